"""T_SOL of one workload on one GPU: the roofline over the counted FLOPs and bytes.

``T_SOL = max(Σ_p FLOPs_p / rate_p, bytes / DRAM bandwidth) + overhead`` — tensor-core FLOPs of each
precision at that precision's dense rate (:meth:`Hardware.rate`), the minimum DRAM bytes at the DRAM
bandwidth, plus the hardware entry's fixed per-workload overhead (SOLAR's ~0.4 µs; 0 for datasheets).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import UcutError
from ._errors import BrokenReferenceError
from .counting import Counts, OpCount
from .hardware import Hardware, load_hardware
from .isolation import check_timeout, count_in_child


@dataclass(frozen=True)
class SolReport:
    """The speed-of-light bound of one workload on one GPU.

    Attributes:
        problem_id, workload_uuid, workload_label: which workload.
        flops_by_precision: tensor-core FLOP per precision (``bf16``, ``tf32``, ``fp8`` …).
        flops: their sum (FLOP).
        bytes: minimum DRAM bytes (inputs read once, outputs written once).
        bytes_by_tensor: those bytes per input and output name.
        per_op: counted ops (merged by op, precision and note); a ``simt`` record holds elementwise work,
            which is not part of T_SOL.
        intensity: FLOP per byte.
        t_compute_ms, t_memory_ms: the two roofline terms (ms); t_overhead_ms: the fixed overhead (ms).
        t_sol_ms: ``max(t_compute_ms, t_memory_ms) + t_overhead_ms``.
        bound: ``compute`` or ``memory``: the larger term.
        hardware, hardware_method: the entry used and its method (datasheet | solar | calibrated).
        rates_used: precision → (FLOP/s, precision whose rate priced it).
        data_dependent: the work depended on input values; ``seed`` (or caller inputs) fixed them.
        notes: how the count was made and where it is uncertain.
    """

    problem_id: str
    workload_uuid: str
    workload_label: str
    flops_by_precision: Mapping[str, int]
    flops: int
    bytes: int
    bytes_by_tensor: Mapping[str, int]
    per_op: tuple[OpCount, ...]
    intensity: float
    t_compute_ms: float
    t_memory_ms: float
    t_overhead_ms: float
    t_sol_ms: float
    bound: str
    hardware: str
    hardware_method: str
    rates_used: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    data_dependent: bool = False
    seed: int | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """A JSON-able dict (what ``ucutlass sol --json`` prints per workload)."""
        return {
            "problem": self.problem_id, "workload": self.workload_uuid, "label": self.workload_label,
            "flops_by_precision": dict(self.flops_by_precision), "flops": self.flops, "bytes": self.bytes,
            "bytes_by_tensor": dict(self.bytes_by_tensor), "per_op": [o.to_json() for o in self.per_op],
            "intensity_flop_per_byte": self.intensity, "t_compute_ms": self.t_compute_ms,
            "t_memory_ms": self.t_memory_ms, "t_overhead_ms": self.t_overhead_ms, "t_sol_ms": self.t_sol_ms,
            "bound": self.bound, "hardware": self.hardware, "hardware_method": self.hardware_method,
            "rates_used": {p: {"flops_per_s": r, "priced_as": q} for p, (r, q) in self.rates_used.items()},
            "data_dependent": self.data_dependent, "seed": self.seed, "notes": list(self.notes),
        }


#: (problem key, workload uuid, seed) → its Counts, or the error counting it raised
_COUNTS: dict[tuple, Counts | UcutError] = {}
#: problem key → the first hang or exit of its reference: its other workloads are not tried again
_BROKEN: dict[tuple, BrokenReferenceError] = {}


def _problem_key(problem) -> tuple:
    """A problem's cache key: its folder, id and a digest of its reference (an edited reference counts anew)."""
    text = f"{problem.reference_source}\0{problem.custom_inputs_entrypoint or ''}"
    return str(problem.path), problem.id, hashlib.sha256(text.encode()).hexdigest()[:16]


def prefetch_counts(problem, workloads=None, *, seed: int | None = None, timeout_s: float | None = None) -> None:
    """Count, in one child process, every one of ``workloads`` not counted yet, and cache the outcomes.

    Callers that will ask for several workloads of a problem call this first, so that one process (one
    torch import) counts them all; :func:`counts_for` and :func:`analyze` then find them in the cache.
    Failures are cached too and raised by those, for the workload they belong to.

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        workloads: its workloads (or their indices); default all of them.
        seed: seed for generated inputs (default :func:`ucutlass.sol.counting.workload_seed`).
        timeout_s: limit for loading the reference, and for counting each workload
            (default :data:`ucutlass.sol.isolation.DEFAULT_TIMEOUT_S`).

    Raises:
        SolError: the counting process itself could not start. ValueError: ``timeout_s`` is not positive.
    """
    timeout_s = check_timeout(timeout_s)
    pkey = _problem_key(problem)
    if pkey in _BROKEN:
        return
    picked = problem.workloads if workloads is None else \
        [problem.workloads[w] if isinstance(w, int) else w for w in workloads]
    todo = []
    for w in picked:
        if (pkey, w.uuid, seed) not in _COUNTS and w not in todo:
            todo.append(w)
    outcomes = count_in_child(problem, todo, seed=seed, timeout_s=timeout_s)
    for w, outcome in zip(todo, outcomes):
        _COUNTS[(pkey, w.uuid, seed)] = outcome
        if isinstance(outcome, BrokenReferenceError):
            _BROKEN[pkey] = outcome


def counts_for(problem, workload, *, inputs: Mapping[str, Any] | None = None, seed: int | None = None,
               timeout_s: float | None = None) -> Counts:
    """:func:`count_workload` in a child process (:mod:`ucutlass.sol.isolation`), cached per (problem, workload
    uuid, seed) when no inputs are given.

    Raises:
        BrokenReferenceError: the reference hung past ``timeout_s`` or ended the counting process (for this
            workload or, earlier in this process, for another workload of the problem).
        SolError, ProblemError: as :func:`count_workload`. ValueError: ``timeout_s`` is not positive.
    """
    timeout_s = check_timeout(timeout_s)
    if inputs is not None:
        outcome = count_in_child(problem, [workload], inputs=inputs, seed=seed, timeout_s=timeout_s)[0]
    else:
        key = (_problem_key(problem), workload.uuid, seed)
        if key not in _COUNTS:
            prefetch_counts(problem, [workload], seed=seed, timeout_s=timeout_s)
        outcome = _COUNTS.get(key)
        if outcome is None:  # the problem broke on another workload
            first = _BROKEN[key[0]]
            outcome = BrokenReferenceError(f"{first} (so its workload {workload.label()} is not counted either; "
                                           "ucutlass.sol.clear_cache() forgets this)", problem_id=problem.id,
                                           workload=first.workload, timeout_s=first.timeout_s, status=first.status)
    if isinstance(outcome, Exception):
        raise outcome.with_traceback(None)
    return outcome


def roofline(counts: Counts, hw: Hardware, *, problem_id: str = "", workload=None) -> SolReport:
    """Price counted work on one hardware entry."""
    rates = {p: hw.rate(p) for p in counts.flops_by_precision}
    t_compute = sum(f / rates[p][0] for p, f in counts.flops_by_precision.items())
    t_memory = counts.bytes / hw.dram_bytes_per_s
    notes = list(counts.notes)
    for p, (_, used) in rates.items():
        if used != p:
            notes.append(f"{p} matmuls priced at the {used} rate of {hw.name}")
    if counts.data_dependent:
        src = f"inputs generated on the CPU with seed {counts.seed}" if counts.seed is not None \
            else "the inputs given"
        notes.append(f"data-dependent work (e.g. routing): counted from {src}; pass the timed inputs to "
                     "analyze(..., inputs=...) for the bound of exactly those")
    flops = counts.flops
    return SolReport(
        problem_id=problem_id, workload_uuid=getattr(workload, "uuid", ""),
        workload_label=workload.label() if workload is not None else "",
        flops_by_precision=dict(counts.flops_by_precision), flops=flops, bytes=counts.bytes,
        bytes_by_tensor={**counts.input_bytes, **counts.output_bytes}, per_op=counts.per_op,
        intensity=flops / counts.bytes if counts.bytes else float("inf"),
        t_compute_ms=t_compute * 1e3, t_memory_ms=t_memory * 1e3, t_overhead_ms=hw.overhead_s * 1e3,
        t_sol_ms=(max(t_compute, t_memory) + hw.overhead_s) * 1e3,
        bound="compute" if t_compute >= t_memory else "memory",
        hardware=hw.name, hardware_method=hw.method, rates_used=rates, data_dependent=counts.data_dependent,
        seed=counts.seed, notes=tuple(notes))


_REPORTS: dict[tuple, SolReport] = {}


def analyze(problem, workload, hardware: Hardware | str, *, inputs: Mapping[str, Any] | None = None,
            seed: int | None = None, timeout_s: float | None = None) -> SolReport:
    """The SOL report of one workload of a problem on one GPU.

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        workload: one of its workloads (or its index).
        hardware: a :class:`Hardware` or a name for :func:`load_hardware` (``h200``, ``b200-solar``, ``local``).
        inputs: the real inputs to bound (data-dependent problems such as MoE routing); default: generated
            on meta, with small tensors made on the CPU from ``seed``.
        seed: seed for generated inputs (default :func:`ucutlass.sol.counting.workload_seed`).
        timeout_s: the reference is counted in a child process (:mod:`ucutlass.sol.isolation`); loading it
            and counting the workload must each finish within this many seconds (default 60).

    Returns:
        A :class:`SolReport`; cached per (problem, workload uuid, hardware, seed) unless ``inputs`` are given.

    Raises:
        SolError: the reference cannot be counted; BrokenReferenceError (a SolError) when it hangs past
            ``timeout_s`` or ends the counting process. ProblemError: the problem is malformed.
        HardwareError: unknown hardware or no rate for a precision.
    """
    timeout_s = check_timeout(timeout_s)
    hw = load_hardware(hardware)
    if isinstance(workload, int):
        workload = problem.workloads[workload]
    key = (_problem_key(problem), workload.uuid, hw.name, hw.digest(), seed)
    if inputs is None and key in _REPORTS:
        return _REPORTS[key]
    report = roofline(counts_for(problem, workload, inputs=inputs, seed=seed, timeout_s=timeout_s), hw,
                      problem_id=problem.id, workload=workload)
    if inputs is None:
        _REPORTS[key] = report
    return report


def clear_cache() -> None:
    """Forget cached counts, reports and broken problems."""
    _COUNTS.clear()
    _BROKEN.clear()
    _REPORTS.clear()


__all__ = ["SolReport", "analyze", "roofline", "counts_for", "prefetch_counts", "clear_cache"]
