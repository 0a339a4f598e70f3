"""Records of a grading run: one :class:`WorkloadResult` per (solution, workload), in the FlashInfer-Bench
trace style, plus :func:`summarize` and :func:`format_table`.

``WorkloadResult.to_json()``::

    {"definition": ..., "workload": {"uuid", "axes"}, "solution": ...,
     "evaluation": {"status", "reason", "log", "environment": {...}, "timestamp",
                    "correctness": {"max_absolute_error", "max_relative_error", "matched_ratio",
                                    "tolerance": {"max_atol", "max_rtol", "required_matched_ratio", "source"},
                                    "trials", "checked_timed_sets",
                                    "accuracy": {"candidate_error", "reference_error", "ratio", ...}},
                    "performance": {"latency_ms", "latency_p20_ms", "latency_p80_ms", "reference_latency_ms",
                                    "speedup_factor", "t_sol_ms", "sol_score", "timed_calls", ...},
                    "checks": {"variants", "unlisted_shape", "wall", "l2_persisting_resets", ...}}}

``correctness`` is present when outputs were compared (PASSED, INCORRECT_NUMERICAL, INCORRECT_ACCURACY,
FASTER_THAN_SOL, UNTIMED_WORK), ``performance`` when the candidate was timed (PASSED, FASTER_THAN_SOL,
UNTIMED_WORK).
"""

from __future__ import annotations

import enum
import math
import os
import platform
import socket
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Sequence


class Status(str, enum.Enum):
    """Outcome of grading one workload: FlashInfer-Bench's names, CRASHED, and one name per guard."""

    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"          # wrong output count, name or shape; not contiguous
    INCORRECT_DTYPE = "INCORRECT_DTYPE"          # not a plain torch.Tensor, wrong dtype or device
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"  # outside tolerance, or NaN/Inf (unwritten outputs)
    INCORRECT_ACCURACY = "INCORRECT_ACCURACY"    # within tolerance, far less accurate than the reference
    RUNTIME_ERROR = "RUNTIME_ERROR"              # the candidate raised
    COMPILE_ERROR = "COMPILE_ERROR"              # the loader could not build the candidate
    TIMEOUT = "TIMEOUT"                          # a request ran past timeout_s; the worker was killed
    CRASHED = "CRASHED"                          # the worker died (signal, exit, lost CUDA context)
    FASTER_THAN_SOL = "FASTER_THAN_SOL"          # correct but timed below T_SOL: flagged, never rewarded
    INPUT_MODIFIED = "INPUT_MODIFIED"            # an input differs after the call
    OUTPUT_ALIASED = "OUTPUT_ALIASED"            # a returned output shares memory with an input/output
    UNTIMED_WORK = "UNTIMED_WORK"                # the parent's wall clock saw work the events did not
    THREAD_SPAWNED = "THREAD_SPAWNED"            # a native thread outlived a load, call or timing run
    PROCESS_SPAWNED = "PROCESS_SPAWNED"          # a process the candidate started outlived a request
    TAMPERED = "TAMPERED"                        # timing, grader or reply functions were replaced

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Correctness:
    """Worst errors over all trials and outputs, and the tolerance they were judged by."""

    max_absolute_error: float
    max_relative_error: float
    matched_ratio: float
    tolerance: Mapping[str, Any]  # Tolerance.to_json(): max_atol, max_rtol, required_matched_ratio, source
    trials: int = 0
    checked_timed_sets: int = 0
    accuracy: Mapping[str, Any] | None = None  # against the ground truth: see ucutlass.grader.accuracy

    def to_json(self) -> dict:
        return {"max_absolute_error": _num(self.max_absolute_error),
                "max_relative_error": _num(self.max_relative_error),
                "matched_ratio": _num(self.matched_ratio), "tolerance": dict(self.tolerance),
                "trials": self.trials, "checked_timed_sets": self.checked_timed_sets,
                "accuracy": _clean(self.accuracy) if self.accuracy is not None else None}


@dataclass(frozen=True)
class Performance:
    """Timing of one workload: the candidate's median and spread, the reference's, and the SOL view."""

    latency_ms: float
    latency_p20_ms: float
    latency_p80_ms: float
    reference_latency_ms: float
    speedup_factor: float
    t_sol_ms: float | None = None
    sol_score: float | None = None
    timed_calls: int = 0
    reference_latency_p20_ms: float | None = None
    reference_latency_p80_ms: float | None = None
    reference_timed_calls: int = 0

    def to_json(self) -> dict:
        return {"latency_ms": self.latency_ms, "latency_p20_ms": self.latency_p20_ms,
                "latency_p80_ms": self.latency_p80_ms, "reference_latency_ms": self.reference_latency_ms,
                "speedup_factor": self.speedup_factor, "t_sol_ms": self.t_sol_ms, "sol_score": self.sol_score,
                "timed_calls": self.timed_calls, "reference_latency_p20_ms": self.reference_latency_p20_ms,
                "reference_latency_p80_ms": self.reference_latency_p80_ms,
                "reference_timed_calls": self.reference_timed_calls}


@dataclass
class WorkloadResult:
    """The grade of one solution on one workload.

    Attributes:
        definition: the problem's name.
        workload_uuid / axes / label: which workload.
        solution: the solution's name.
        status: a :class:`Status`.
        reason: one line saying why, when not PASSED (FASTER_THAN_SOL says by how much).
        log: the reason, a traceback when the candidate raised, and what the worker printed.
        correctness / performance: None where that stage was not reached.
        checks: what the guards measured (input distributions, unlisted shape, wall clock, threads, …).
    """

    definition: str
    workload_uuid: str
    axes: Mapping[str, int]
    label: str
    solution: str
    status: Status
    reason: str = ""
    log: str = ""
    environment: Mapping[str, Any] = field(default_factory=dict)
    timestamp: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    correctness: Correctness | None = None
    performance: Performance | None = None
    checks: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    @property
    def latency_ms(self) -> float | None:
        return self.performance.latency_ms if self.performance else None

    @property
    def reference_latency_ms(self) -> float | None:
        return self.performance.reference_latency_ms if self.performance else None

    @property
    def speedup(self) -> float | None:
        return self.performance.speedup_factor if self.performance else None

    @property
    def t_sol_ms(self) -> float | None:
        return self.performance.t_sol_ms if self.performance else None

    @property
    def sol_score(self) -> float | None:
        return self.performance.sol_score if self.performance else None

    def to_json(self) -> dict:
        """The FlashInfer-Bench trace-style record (see the module docstring)."""
        return {
            "definition": self.definition,
            "workload": {"uuid": self.workload_uuid, "axes": dict(self.axes)},
            "solution": self.solution,
            "evaluation": {
                "status": self.status.value,
                "reason": self.reason,
                "log": self.log,
                "environment": dict(self.environment),
                "timestamp": self.timestamp,
                "correctness": self.correctness.to_json() if self.correctness else None,
                "performance": self.performance.to_json() if self.performance else None,
                "checks": _clean(self.checks),
            },
        }


def _num(x: float | None) -> float | None:
    """JSON-safe: NaN/Inf become None."""
    return None if x is None or not math.isfinite(x) else x


def _clean(x: Any) -> Any:
    """JSON-safe copy: NaN/Inf floats become None, tuples lists, mappings dicts."""
    if isinstance(x, float):
        return _num(x)
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


#: Statuses given by a guard (a cheat caught in the act, not a wrong answer).
GUARD_STATUSES = frozenset({Status.FASTER_THAN_SOL, Status.INPUT_MODIFIED, Status.OUTPUT_ALIASED,
                            Status.UNTIMED_WORK, Status.THREAD_SPAWNED, Status.PROCESS_SPAWNED,
                            Status.TAMPERED})


# --- summaries -----------------------------------------------------------------------------------------

def summarize(results: Sequence[WorkloadResult]) -> dict:
    """One line of numbers over a solution's workloads.

    Returns:
        ``{"workloads", "passed", "failed", "all_passed", "statuses": {status: count},
        "geomean_speedup", "mean_sol_score", "flagged"}`` where ``geomean_speedup`` is over PASSED
        workloads (None if none), ``mean_sol_score`` averages the SOL score over every
        workload, one that did not pass counting 0 (None when no T_SOL was given), and
        ``flagged`` counts FASTER_THAN_SOL results (to re-verify; they score 0 here), ``guarded`` every
        result a guard gave (FASTER_THAN_SOL, INPUT_MODIFIED, OUTPUT_ALIASED, UNTIMED_WORK, THREAD_SPAWNED,
        TAMPERED).
    """
    n = len(results)
    passed = [r for r in results if r.status is Status.PASSED]
    speedups = [r.speedup for r in passed if r.speedup and r.speedup > 0]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    scores = [r.sol_score for r in passed]
    if passed:
        scored = all(s is not None for s in scores)
    else:  # nothing passed: 0.0 when a T_SOL was known (e.g. all FASTER_THAN_SOL), else unknown
        scored = any(r.t_sol_ms is not None for r in results)
    mean_score = sum(scores) / n if n and scored else None  # type: ignore[arg-type]
    return {
        "workloads": n,
        "passed": len(passed),
        "failed": n - len(passed),
        "all_passed": n > 0 and len(passed) == n,
        "statuses": dict(Counter(r.status.value for r in results)),
        "geomean_speedup": geo,
        "mean_sol_score": mean_score,
        "flagged": sum(r.status is Status.FASTER_THAN_SOL for r in results),
        "guarded": sum(r.status in GUARD_STATUSES for r in results),
    }


def _fmt(x: float | None, spec: str = ".4g") -> str:
    return "-" if x is None else format(x, spec)


def _error_columns(c: Correctness | None) -> tuple[str, str, str]:
    """The worst errors, the tolerance (an element matches when ``|out - ref| <= atol + rtol * |ref|``) and
    ``matched / required`` (shares of the elements, from 0 to 1; six digits, so that 0.99998 does not read as 1)."""
    if c is None:
        return "-", "-", "-"
    tol = c.tolerance or {}
    return (f"{_fmt(c.max_absolute_error, '.3g')} / {_fmt(c.max_relative_error, '.3g')}",
            f"{_fmt(tol.get('max_atol'), '.3g')} / {_fmt(tol.get('max_rtol'), '.3g')}",
            f"{_fmt(c.matched_ratio, '.6g')} / {_fmt(tol.get('required_matched_ratio'), '.4g')}")


def format_table(results: Iterable[WorkloadResult], *, reasons: bool = True, emulated: bool = False) -> str:
    """A plain-text table: workload, status, latency, reference, speedup, T_SOL, SOL score (and reason).

    ``emulated``: the candidate was a program run as torch ops (``grade --emulate``): its latency is that of the
    emulation on this machine, so no speedup, T_SOL or SOL score is shown (a ratio of torch ops to torch ops says
    nothing of a kernel); the columns say instead how close the program came to the tolerance it was judged by:
    the worst absolute and relative errors against the workload's ``max_atol`` / ``max_rtol``, and the share of
    elements within them against the required share.
    """
    results = list(results)
    if emulated:
        rows = [("workload", "status", "latency ms (emulated)", "reference ms", "max err abs / rel",
                 "tolerance atol / rtol", "matched / required")]
    else:
        rows = [("workload", "status", "latency ms", "reference ms", "speedup", "T_SOL ms", "SOL score")]
    notes = []
    for r in results:
        if emulated:
            rows.append((r.label, r.status.value, _fmt(r.latency_ms), _fmt(r.reference_latency_ms),
                         *_error_columns(r.correctness)))
        else:
            sp = f"{r.speedup:.3g}x" if r.speedup is not None else "-"
            rows.append((r.label, r.status.value, _fmt(r.latency_ms), _fmt(r.reference_latency_ms), sp,
                         _fmt(r.t_sol_ms), _fmt(r.sol_score, ".3f")))
        if reasons and r.reason and r.status is not Status.PASSED:
            notes.append(f"  {r.label}: {r.reason.splitlines()[0][:160]}")
        charged = (r.checks.get("wall") or {}).get("charged_ms") if isinstance(r.checks, Mapping) else None
        if charged:
            notes.append(f"  {r.label}: latency includes {charged:.4g} ms per call the wall clock saw outside the "
                         "events (charged, docs/grader.md)")
    if emulated and any(_passed_beyond_max(r) for r in results):
        notes.append("  (a PASSED row's max error can exceed atol / rtol: each element matches when |out - ref| <= "
                     "atol + rtol * |ref|, and the row passes when the matched share reaches the required one; the "
                     "max relative error is largest where the reference is near 0)")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + notes)


def _passed_beyond_max(r: WorkloadResult) -> bool:
    """A PASSED result whose worst absolute or relative error is above the tolerance's atol or rtol."""
    c = r.correctness
    if r.status is not Status.PASSED or c is None:
        return False
    tol = c.tolerance or {}
    return any(e is not None and t is not None and e > t
               for e, t in ((c.max_absolute_error, tol.get("max_atol")), (c.max_relative_error, tol.get("max_rtol"))))


# --- environment ---------------------------------------------------------------------------------------

def _driver_version() -> str | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            text = f.read()
        import re

        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
        return m.group(1) if m else None
    except OSError:
        return None


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version(name)
    except PackageNotFoundError:
        return None
    except Exception:
        return None


_NVCC: list[str | None] = []


def nvcc_version() -> str | None:
    """``release X.Y, VZ`` of the nvcc on CUDACXX, CUDA_HOME or PATH (cached; None when absent)."""
    if _NVCC:
        return _NVCC[0]
    import re
    import shutil
    import subprocess

    cands = [os.environ.get("CUDACXX"),
             os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None,
             shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    found = None
    for c in cands:
        if c and os.path.isfile(c):
            try:
                out = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            m = re.search(r"release ([0-9.]+), V([0-9.]+)", out)
            found = m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else None
            break
    _NVCC.append(found)
    return found


def collect_environment(device) -> dict:
    """Where a grade was measured: hardware, driver, library versions (torch, CUDA, CUTLASS, nvcc, Triton),
    host."""
    import torch

    import ucutlass

    dev = torch.device(device)
    env: dict[str, Any] = {"device": str(dev), "hostname": socket.gethostname(),
                           "platform": platform.platform(), "cpu_count": os.cpu_count()}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        env.update(hardware=props.name, compute_capability=f"{props.major}.{props.minor}",
                   l2_cache_bytes=int(getattr(props, "L2_cache_size", 0) or 0), driver=_driver_version())
    else:
        env.update(hardware=platform.processor() or platform.machine() or "cpu", driver=None)
    env["libs"] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                   "ucutlass": getattr(ucutlass, "__version__", None),
                   "cutlass": _dist_version("nvidia-cutlass"), "nvcc": nvcc_version(),
                   "triton": _dist_version("triton")}
    return env


__all__ = ["Status", "Correctness", "Performance", "WorkloadResult", "summarize", "format_table",
           "collect_environment", "nvcc_version", "GUARD_STATUSES"]
