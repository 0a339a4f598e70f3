"""What makes a campaign's attempts (:mod:`.campaign`): :class:`TunerRunner` (``ucutlass tune`` trials, a study per
problem under the campaign's folder) and :class:`AgentRunner` (a pluggable agent :class:`~.policy.Policy`, here
the scripted :class:`~.policy.DiagnosticFixer`, sending programs through ``prompt``, ``check`` and ``grade``).

Both reach the GPU only through the command line in a child process (:func:`cli_tools`, :func:`cli_tune`), as the
MCP server does: a program an agent writes runs in the grader's isolated workers, never in the campaign's process.
Tests pass fakes of the same signatures.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from .campaign import Attempt, Judge, ProblemState
from .policy import DiagnosticFixer, Policy, grade_numbers

#: A tool: (name: prompt | check | grade, arguments) → its answer (``{"text": …}`` for prompt; a feedback
#: document, feedback-v1.json, for check and grade).
Tools = Callable[[str, dict], dict]
#: Agent policies by name (``ucutlass campaign --policy NAME``): each makes a fresh :class:`Policy`.
POLICIES: dict[str, Callable[[], Policy]] = {"scripted": DiagnosticFixer}


#: Seconds a child given SIGTERM has to close its graders and workers before its process group is killed.
GRACE_S = 15.0


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the child's process group (``ucutlass`` closes its graders' workers on it), SIGKILL after
    :data:`GRACE_S`."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


def _cli(args: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
    """Run ``python -m ucutlass.cli ARGS`` in a child process of its own session; (exit code, stdout, stderr). Past
    ``timeout_s``, or when the campaign is interrupted, the child's whole process group is stopped (:func:`_stop`)."""
    proc = subprocess.Popen([sys.executable, "-m", "ucutlass.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc)
        proc.communicate()
        return 124, "", f"ucutlass {' '.join(args[:2])}: no answer within {timeout_s:g} s"
    except BaseException:
        _stop(proc)
        raise
    return proc.returncode, out, err


def _document(command: str, rc: int, out: str, err: str) -> dict:
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return {"command": command, "ok": False, "error": (err.strip() or f"exit {rc}")[-2000:], "diagnostics": []}


def cli_tools(problems: Sequence[str] = (), *, emulate: bool = False, workloads: int | None = None,
              gpu: str = "local", timeout_s: float = 600.0, sol: bool = True) -> Tools:
    """Tools that run the command line: ``prompt`` (``sol`` False: ``--no-sol``, no T_SOL table), ``check
    --problem --json``, ``grade --json`` (``emulate``: as torch ops, on CPU; ``workloads``: only the first N), each
    program written to a fresh file."""
    extra = [a for d in problems for a in ("--problems", d)]

    def call(name: str, args: dict) -> dict:
        problem = args["problem"]
        if name == "prompt":
            rc, out, err = _cli(["prompt", problem, *extra] + ([] if sol else ["--no-sol"]), timeout_s)
            if rc:
                raise RuntimeError(f"ucutlass prompt {problem}: {err.strip()[-500:]}")
            return {"text": out}
        with tempfile.TemporaryDirectory(prefix="ucutlass-campaign-") as d:
            path = Path(d) / "attempt.ucut"
            path.write_text(args["program"])
            if name == "check":
                argv = ["check", str(path), "--problem", problem, "--json"]
            elif name == "grade":
                argv = ["grade", str(path), problem, "--json", "--gpu", gpu] + (["--emulate"] if emulate else []) + (
                    ["--workloads", str(workloads)] if workloads else [])
            else:
                raise ValueError(f"unknown tool {name!r} (valid: prompt, check, grade)")
            return _document(name, *_cli(argv + extra, timeout_s))

    return call


def attempt_from_grade(grade: dict | None, epsilon: float | None, note: str = "") -> Attempt:
    """An :class:`Attempt` from a grade document (None: the program did not get as far as a grade)."""
    speedup, near, below = grade_numbers(grade, epsilon)
    score = (grade or {}).get("summary", {}) or {}
    return Attempt(speedup, near, below_sol=below, sol_score=score.get("mean_sol_score") if speedup else None,
                   note=note)


def grade_headroom(grade: dict | None) -> float | None:
    """geomean(baseline time / T_SOL) over a grade document's records that have both (None: none has; an emulated
    grade has no T_SOL)."""
    ratios = []
    for r in (grade or {}).get("records", []):
        p = (r.get("evaluation") or {}).get("performance") or {}
        if p.get("t_sol_ms") and p.get("reference_latency_ms"):
            ratios.append(p["reference_latency_ms"] / p["t_sol_ms"])
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


class AgentRunner:
    """Attempts of an agent policy: the prompt, then each program checked against the problem and, when it checks,
    graded; the policy revises from each feedback document. Its current program is kept in the state (``extra``),
    so a resumed campaign continues from it.

    Args:
        policy: makes a fresh :class:`Policy` (one per problem; ``POLICIES["scripted"]``).
        tools: :data:`Tools` (:func:`cli_tools`).
        epsilon: the campaign's ε (None: off), to tell an attempt near T_SOL.
    """

    def __init__(self, policy: Callable[[], Policy], tools: Tools, epsilon: float | None):
        self.make_policy, self.tools, self.epsilon = policy, tools, epsilon
        self.policies: dict[str, Policy] = {}

    def advance(self, state: ProblemState, n: int, judge: Judge) -> tuple[list[Attempt], str | None]:
        p, ex = state.problem, state.extra
        policy = self.policies.setdefault(p, self.make_policy())
        if "program" not in ex:
            ex["program"] = policy.start(self.tools("prompt", {"problem": p})["text"])
        out: list[Attempt] = []
        for _ in range(n):
            program = ex["program"]
            feedback = self.tools("check", {"program": program, "problem": p})
            grade = None
            if feedback.get("ok"):
                grade = feedback = self.tools("grade", {"program": program, "problem": p})
            codes = [d["code"] for d in feedback.get("diagnostics", [])]
            a = attempt_from_grade(grade, self.epsilon, note=feedback.get("command", "") + (
                f": {', '.join(codes)}" if codes else "") + ("" if feedback.get("ok") else " (failed)"))
            out.append(a)
            h = grade_headroom(grade)
            if h is not None:
                state.headroom = h
            if grade and grade.get("ok") and a.speedup is not None:
                if state.best is None or a.speedup > state.best.get("speedup", 0):
                    state.best = {"speedup": a.speedup, "sol_score": a.sol_score, "program": program}
            ex["last_grade"] = grade
            stop = judge(a)
            revised = policy.revise(program, feedback)
            if revised is None:
                return out, ("passed; the policy has nothing more to try" if grade and grade.get("ok")
                             else "the policy found no fix in the feedback")
            ex["program"] = revised
            if stop:
                break
        return out, None

    def remeasure(self, state: ProblemState, attempt: Attempt) -> Attempt | None:
        """Grade the program of the attempt just made again."""
        grade = self.tools("grade", {"program": state.extra["program"], "problem": state.problem})
        return attempt_from_grade(grade, self.epsilon, note="re-measured")


def tune_argv(problem: str, trials: int, out: Path, epsilon: float | None, window: int | None, *,
              problems: Sequence[str] = (), gpu: str = "local", max_workloads: int = 6,
              extra: Sequence[str] = ()) -> list[str]:
    """The ``ucutlass tune`` arguments of one grant: the study run on to ``trials`` measured trials in ``out``, with
    the campaign's ε and w (a rule that is off: ε -1, w 2^30, which never fire)."""
    return ["tune", problem, "--trials", str(trials), "--out", str(out), "--gpu", gpu, "--max-workloads",
            str(max_workloads), f"--epsilon={-1.0 if epsilon is None else epsilon}", f"--patience={window or 1 << 30}",
            *[a for d in problems for a in ("--problems", d)], *extra]


def cli_tune(problems: Sequence[str] = (), *, gpu: str = "local", max_workloads: int = 6, timeout_s: float = 3600,
             extra: Sequence[str] = ()) -> Callable[[str, int, Path, float | None, int | None], dict]:
    """A tune function for :class:`TunerRunner`: ``ucutlass tune PROBLEM --trials T --out DIR`` (its study in
    ``DIR/study.db``, resumed by each call), then the ``results.json`` it wrote."""
    def tune(problem: str, trials: int, out: Path, epsilon: float | None, window: int | None) -> dict:
        argv = tune_argv(problem, trials, out, epsilon, window, problems=problems, gpu=gpu,
                         max_workloads=max_workloads, extra=extra)
        rc, _, err = _cli(argv, timeout_s)
        results = out / "results.json"
        if not results.is_file():
            raise RuntimeError(f"ucutlass tune {problem} wrote no results (exit {rc}): {err.strip()[-1500:]}")
        return json.loads(results.read_text())

    return tune


class TunerRunner:
    """Tuner trials: each grant runs the problem's study on to ``spent + n`` measured trials (Optuna storage under
    ``out/PROBLEM``; trials a killed campaign measured but did not record come back by their number). A trial's
    speedup is headroom / (T/T_SOL) on the tuned workloads; the problem's best is the verified one on every workload
    (``results.json``'s rows). A best below T_SOL is graded again (``grade``: ``ucutlass grade best.ucut``).

    Args:
        tune: ``(problem, trials, out_dir, epsilon, window) → results.json`` (:func:`cli_tune`).
        grade: ``(program file, problem) → grade document``, to re-measure (None: no re-measure; SUSPECT).
    """

    def __init__(self, out: Path, tune: Callable, epsilon: float | None, window: int | None,
                 grade: Callable[[Path, str], dict] | None = None):
        self.out, self.tune, self.epsilon, self.window, self.grade = out, tune, epsilon, window, grade

    def advance(self, state: ProblemState, n: int, judge: Judge) -> tuple[list[Attempt], str | None]:
        doc = self.tune(state.problem, state.spent + n, self.out / state.problem, self.epsilon, self.window)
        h = doc.get("headroom_reference_over_sol")
        if isinstance(h, (int, float)) and math.isfinite(h) and h > 0:
            state.headroom = float(h)
        seen = {a.key for a in state.attempts}
        trials = sorted((t for t in doc.get("trials", []) if t.get("state") in ("COMPLETE", "FAIL")
                         and not t.get("duplicate") and t.get("status") != "INTERRUPTED"
                         and t["number"] not in seen), key=lambda t: t["number"])
        best_trial = (doc.get("best") or {}).get("trial")
        rows = [r for r in doc.get("workloads", []) if r.get("speedup")]
        old = state.best or {}
        if rows and not (old.get("trial") == best_trial and old.get("remeasured")):  # else: keep the re-measure
            scores = [r["sol_score"] for r in rows if r.get("sol_score") is not None]
            below = any(r.get("t_sol_ms") and r["time_ms"] < r["t_sol_ms"] for r in rows)
            state.best = {"speedup": math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows)),
                          "sol_score": sum(scores) / len(scores) if scores else None,
                          "trial": best_trial, "below_sol": below}
        out = []
        for t in trials:
            v = t.get("value") if t["state"] == "COMPLETE" else None
            s = state.headroom / v if v and state.headroom else None
            near = self.epsilon is not None and s is not None and v <= 1 + self.epsilon and s > 1
            out.append(Attempt(s, near, below_sol=bool(v) and v < 1, key=t["number"],
                               note="best" if t["number"] == best_trial else ""))
            judge(out[-1])
        reason = doc.get("stop_reason") or ""
        return out, None if reason.startswith("trial budget") or not reason else f"tuner: {reason}"

    def remeasure(self, state: ProblemState, attempt: Attempt) -> Attempt | None:
        best = self.out / state.problem / "best.ucut"
        if self.grade is None or attempt.note != "best" or not best.is_file():
            return None
        a = attempt_from_grade(self.grade(best, state.problem), self.epsilon, note="best.ucut re-graded")
        # still below T_SOL: no verified best (the table falls back to the best attempt not SUSPECT)
        state.best = {"trial": attempt.key, "remeasured": True, "below_sol": a.below_sol,
                      "speedup": None if a.below_sol else a.speedup, "sol_score": None if a.below_sol else a.sol_score}
        return a


def cli_grade(problems: Sequence[str] = (), gpu: str = "local", timeout_s: float = 600.0):
    """``ucutlass grade FILE PROBLEM --json`` in a child process, as a ``grade`` for :class:`TunerRunner`."""
    dirs = [a for d in problems for a in ("--problems", d)]
    return lambda path, problem: _document("grade", *_cli(["grade", str(path), problem, "--json", "--gpu", gpu,
                                                           *dirs], timeout_s))


__all__ = ["Tools", "POLICIES", "cli_tools", "cli_tune", "tune_argv", "cli_grade", "attempt_from_grade", "grade_headroom", "AgentRunner",
           "TunerRunner"]
