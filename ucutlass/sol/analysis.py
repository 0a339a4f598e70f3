"""T_SOL of one workload on one GPU: the roofline over the counted FLOPs and bytes.

``T_SOL = max(Σ_p FLOPs_p / rate_p, bytes / DRAM bandwidth) + overhead`` — tensor-core FLOPs of each
precision at that precision's dense rate (:meth:`Hardware.rate`), the minimum DRAM bytes at the DRAM
bandwidth, plus the hardware entry's fixed per-workload overhead (SOLAR's ~0.4 µs; 0 for datasheets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .counting import Counts, OpCount, count_workload
from .hardware import Hardware, load_hardware


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


_COUNTS: dict[tuple, Counts] = {}


def counts_for(problem, workload, *, inputs: Mapping[str, Any] | None = None, seed: int | None = None) -> Counts:
    """:func:`count_workload`, cached per (problem folder, id, workload uuid, seed) when no inputs are given."""
    if inputs is not None:
        return count_workload(problem, workload, inputs=inputs)
    key = (str(problem.path), problem.id, workload.uuid, seed)
    if key not in _COUNTS:
        _COUNTS[key] = count_workload(problem, workload, seed=seed)
    return _COUNTS[key]


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
            seed: int | None = None) -> SolReport:
    """The SOL report of one workload of a problem on one GPU.

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        workload: one of its workloads (or its index).
        hardware: a :class:`Hardware` or a name for :func:`load_hardware` (``h200``, ``b200-solar``, ``local``).
        inputs: the real inputs to bound (data-dependent problems such as MoE routing); default: generated
            on meta, with small tensors made on the CPU from ``seed``.
        seed: seed for generated inputs (default :func:`ucutlass.sol.counting.workload_seed`).

    Returns:
        A :class:`SolReport`; cached per (problem, workload uuid, hardware, seed) unless ``inputs`` are given.

    Raises:
        SolError: the reference cannot be counted. HardwareError: unknown hardware or no rate for a precision.
    """
    hw = load_hardware(hardware)
    if isinstance(workload, int):
        workload = problem.workloads[workload]
    key = (str(problem.path), problem.id, workload.uuid, hw.name, hw.digest(), seed)
    if inputs is None and key in _REPORTS:
        return _REPORTS[key]
    report = roofline(counts_for(problem, workload, inputs=inputs, seed=seed), hw, problem_id=problem.id,
                      workload=workload)
    if inputs is None:
        _REPORTS[key] = report
    return report


def clear_cache() -> None:
    """Forget cached counts and reports (after editing a problem's reference)."""
    _COUNTS.clear()
    _REPORTS.clear()


__all__ = ["SolReport", "analyze", "roofline", "counts_for", "clear_cache"]
