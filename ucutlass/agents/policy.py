"""Agent policies and the loop an LLM runs, without an LLM: the scripted :class:`DiagnosticFixer`, a
:class:`StopRule` (μCUTLASS's: within ε of T_SOL and faster than the baseline, or ``w`` attempts without gain, or
the budget) and :func:`run_episode` (prompt → program → check → fix → … → grade → stop).

The fixer knows nothing of the language: it reads only the feedback documents (feedback-v1.json). For each error
diagnostic it replaces the word at the diagnostic's line and column with the closest of the diagnostic's ``valid``
choices (by spelling; by value for numbers and shapes, where a shape's wrong component is the one the valid values
replace). That it reaches a passing program shows the feedback is sufficient to repair such mistakes.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

#: A word of a .ucut text at a diagnostic's position: a name, a number, a shape (128x128x64)
WORD = re.compile(r"[A-Za-z0-9_.]+")
SHAPE = re.compile(r"^\d+(?:x\d+)+$")
NUMBER = re.compile(r"^\d+(?:\.\d+)?$")


class Policy(Protocol):
    """What proposes programs: ``start`` from the prompt, ``revise`` from the last program's feedback document
    (None: nothing more to try)."""

    def start(self, prompt: str) -> str: ...

    def revise(self, program: str, feedback: dict) -> str | None: ...


def starting_program(prompt: str) -> str:
    """The first ```ucut block of a prompt's "Starting program" (or, failing that, of the best so far).

    Raises:
        ValueError: the prompt holds no program.
    """
    for heading in ("## Starting program", "## Best program so far"):
        at = prompt.find(heading)
        if at >= 0:
            m = re.search(r"```ucut\n(.*?)```", prompt[at:], re.S)
            if m:
                return m.group(1)
    raise ValueError("the prompt holds no starting program")


def _log_distance(a: str, b: str) -> float:
    xs, ys = [float(v) for v in a.split("x")], [float(v) for v in b.split("x")]
    if len(xs) != len(ys) or min(xs + ys) <= 0:
        return math.inf
    return sum(abs(math.log(x / y)) for x, y in zip(xs, ys))


def closest_choice(word: str, valid: list[str]) -> str | None:
    """The valid choice nearest to ``word``: for a shape or number by value (a shape against single numbers:
    its component that is not valid replaced), else by spelling (a valid choice ``word`` abbreviates first)."""
    if not valid:
        return None
    if SHAPE.match(word) and all(NUMBER.match(v) for v in valid):
        parts = word.split("x")
        wrong = [i for i, p in enumerate(parts) if p not in valid]
        if len(wrong) != 1:
            return None
        i = wrong[0]
        parts[i] = min(valid, key=lambda v: (_log_distance(parts[i], v), -float(v)))
        return "x".join(parts)
    if (SHAPE.match(word) or NUMBER.match(word)) and all(SHAPE.match(v) or NUMBER.match(v) for v in valid):
        best = min(valid, key=lambda v: _log_distance(word, v))
        if _log_distance(word, best) < math.inf:
            return best
    prefixed = [v for v in valid if v.startswith(word) or word.startswith(v)]
    if prefixed and len(word) >= 3:
        return min(prefixed, key=lambda v: abs(len(v) - len(word)))
    close = difflib.get_close_matches(word, valid, n=1, cutoff=0.0)
    return close[0] if close else None


@dataclass
class DiagnosticFixer:
    """A scripted policy that repairs a program from its diagnostics alone.

    Args:
        first: the first program to send (default: the prompt's starting program) — a test gives one with
            mistakes, as an LLM's first draft has.
    """

    first: str | None = None
    fixes: list[dict] = field(default_factory=list)  # what it changed: line, column, code, old, new

    def start(self, prompt: str) -> str:
        return self.first if self.first is not None else starting_program(prompt)

    def revise(self, program: str, feedback: dict) -> str | None:
        """The program with every error diagnostic that has valid choices fixed; None when none can be."""
        lines = program.split("\n")
        errors = [d for d in feedback.get("diagnostics", []) if d["severity"] == "error" and d["valid"]
                  and 1 <= d["line"] <= len(lines) and d["column"] >= 1]
        changed = False
        # right to left within a line, so earlier columns stay where the diagnostics say
        for d in sorted(errors, key=lambda d: (d["line"], d["column"]), reverse=True):
            text = lines[d["line"] - 1]
            m = WORD.match(text, d["column"] - 1)
            if not m:
                continue
            new = closest_choice(m.group(0), list(d["valid"]))
            if new is None or new == m.group(0):
                continue
            lines[d["line"] - 1] = text[:m.start()] + new + text[m.end():]
            self.fixes.append({"line": d["line"], "column": d["column"], "code": d["code"], "old": m.group(0),
                               "new": new})
            changed = True
        return "\n".join(lines) if changed else None


def grade_numbers(grade: dict | None, epsilon: float | None) -> tuple[float | None, bool, bool]:
    """A grade document's numbers for a stop rule: (geomean speedup over the baseline, or None when it did not pass;
    within (1 + ε)·T_SOL and faster than the baseline on every workload — False when ``epsilon`` is None or a
    workload has no T_SOL; some workload timed below T_SOL, status FASTER_THAN_SOL: physically impossible)."""
    if grade is None:
        return None, False, False
    records = [r for r in grade.get("records", []) if r.get("evaluation")]
    perfs = [r["evaluation"].get("performance") for r in records]
    below = any(r["evaluation"].get("status") == "FASTER_THAN_SOL" for r in records) or any(
        p and p.get("t_sol_ms") and p.get("latency_ms") is not None and p["latency_ms"] < p["t_sol_ms"] for p in perfs)
    speedup, near = None, False
    if grade.get("ok") and grade.get("summary"):
        speedup = grade["summary"].get("geomean_speedup")
        near = epsilon is not None and bool(perfs) and all(
            p and p.get("t_sol_ms") and p["latency_ms"] <= (1 + epsilon) * p["t_sol_ms"]
            and p["latency_ms"] < p["reference_latency_ms"] for p in perfs)
    return speedup, near, below


@dataclass
class StopRule:
    """When to stop spending attempts on a problem (μCUTLASS's rules).

    Args:
        budget: attempts in all.
        epsilon: stop once a passing program is within (1 + ε)·T_SOL on every workload and faster than the baseline
            (the ε rule; needs T_SOL: not for emulated grades).
        patience: stop after this many attempts without a gain of the best geomean speedup (the w rule).
    """

    budget: int = 16
    epsilon: float = 0.25
    patience: int = 12
    attempts: int = 0
    best: float | None = None
    since_gain: int = 0
    reason: str = ""

    def record(self, grade: dict | None) -> bool:
        """Count one attempt (its grade document, or None when it did not get as far as a grade); True to stop."""
        speedup, near, _ = grade_numbers(grade, self.epsilon)
        return self.observe(speedup, near)

    def observe(self, speedup: float | None, near_sol: bool) -> bool:
        """Count one attempt by its numbers: its geomean speedup over the baseline (None: it failed) and whether it
        is within (1 + ε)·T_SOL and faster than the baseline; True to stop (``reason`` says why)."""
        self.attempts += 1
        if speedup is not None and (self.best is None or speedup > self.best * 1.01):
            self.best, self.since_gain = speedup, 0
        else:
            self.since_gain += 1
        if near_sol:
            self.reason = f"within {self.epsilon:g} of T_SOL and faster than the baseline"
            return True
        if self.since_gain >= self.patience:
            self.reason = f"{self.patience} attempts without gain"
            return True
        if self.attempts >= self.budget:
            self.reason = f"budget of {self.budget} attempts spent"
            return True
        return False


#: A tool call: (tool name, arguments) → its JSON answer (a feedback document for check and grade).
ToolCall = Callable[[str, dict], Awaitable[dict]]


@dataclass
class Episode:
    """What :func:`run_episode` did: every program sent with its feedback, the last grade, why it stopped."""

    steps: list[dict]
    grade: dict | None
    stop_reason: str

    @property
    def passed(self) -> bool:
        return bool(self.grade and self.grade.get("ok"))


async def run_episode(policy: Policy, call: ToolCall, problem: str, *, rule: StopRule | None = None,
                      emulate: bool = True, workloads: int | None = 1) -> Episode:
    """The agent loop: the prompt, then each program checked against the problem; one that checks is graded
    (``emulate``: as torch ops); the policy revises from each document until the stop rule or the policy ends it.

    Args:
        policy: a :class:`Policy`.
        call: calls a tool (the MCP server's: ``prompt``, ``check``, ``grade``).
        problem: the problem id.
        rule: the stop rule (default ``StopRule()``).
        emulate, workloads: passed to the grade tool.
    """
    rule = rule or StopRule()
    prompt = await call("prompt", {"problem": problem})
    program = policy.start(prompt["text"])
    steps: list[dict] = []
    last_grade = None
    while True:
        feedback = await call("check", {"program": program, "problem": problem})
        grade = None
        if feedback["ok"]:
            grade = await call("grade", {"program": program, "problem": problem, "emulate": emulate,
                                         "workloads": workloads})
            last_grade = grade
            feedback = grade
        steps.append({"program": program, "command": feedback["command"], "ok": feedback["ok"],
                      "codes": [d["code"] for d in feedback.get("diagnostics", [])]})
        if rule.record(grade):
            return Episode(steps, last_grade, rule.reason)
        revised = policy.revise(program, feedback)
        if revised is None:
            reason = "passed; the policy has nothing more to try" if grade and grade["ok"] else \
                "the policy found no fix in the feedback"
            return Episode(steps, last_grade, reason)
        program = revised


__all__ = ["Policy", "DiagnosticFixer", "StopRule", "grade_numbers", "Episode", "run_episode", "starting_program",
           "closest_choice"]
