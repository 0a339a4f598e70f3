"""SM100 rules for grouped GEMMs (``kernel NAME : grouped_gemm`` with ``target = sm100``), compile-only here.

CUTLASS's SM100 ptr-array grouped kernels (``examples/75_blackwell_grouped_gemm``) are built from the same
collectives as a plain SM100 GEMM, with ``KernelPtrArrayTmaWarpSpecialized1SmSm100`` / ``...2SmSm100``
(``cutlass/gemm/dispatch_policy.hpp:725-726``) and the epilogues ``PtrArrayTmaWarpSpecialized1Sm`` / ``2Sm``
(``cutlass/epilogue/dispatch_policy.hpp:73-74``), and the group scheduler ``PersistentTileSchedulerSm100Group``
(``cutlass/gemm/kernel/sm100_tile_scheduler_group.hpp``). So the :mod:`ucutlass.arch.sm100` rules apply to one
group's GEMM (:func:`ucutlass.arch.sm90_grouped.group_view`), plus the grouped ones shared with sm90. Shared memory
of the ptr-array kernel beyond the plain one is not modelled for sm100: ``stages`` must be ``auto`` (CUTLASS's
own count; the kernel also static_asserts ``SharedStorageSize <= sm100_smem_capacity_bytes``,
``cutlass/gemm/kernel/sm100_gemm_array_tma_warpspecialized.hpp:229``).
"""

from __future__ import annotations

from typing import Mapping

from ..errors import Diagnostic
from ..ir import GroupedGemmKernel, Schedule, Target
from . import _common, sm100
from ._common import diag as _diag
from ._common import pos as _pos
from .sm90_grouped import check_grouped_common, group_view

__all__ = ["check_kernel", "resolve_schedule", "RULES", "SCHEDULES"]

#: Schedules of the SM100 ptr-array grouped kernels (as for a plain sm100 GEMM).
SCHEDULES = (Schedule.auto, Schedule.warpspecialized_1sm, Schedule.warpspecialized_2sm)

RULES: dict[str, str] = {
    "sm100.grouped-schedule": "grouped_gemm schedule is auto, warpspecialized_1sm or warpspecialized_2sm",
    "sm100.grouped-scheduler": "grouped_gemm uses the persistent group scheduler: no stream_k, split_k = 1",
    "sm100.grouped-dtype": "grouped_gemm a, b and d are bf16, f16 or f32",
    "sm100.grouped-alignment": "grouped_gemm operands are 16-byte aligned (alignment = auto: TMA)",
    "sm100.grouped-stages": "grouped_gemm on sm100 takes stages = auto",
}


def resolve_schedule(kernel: GroupedGemmKernel) -> Schedule:
    """``auto`` as for a plain sm100 GEMM (:func:`ucutlass.arch.sm100.resolve_schedule`)."""
    _common.require_concrete_schedule(kernel)
    return sm100.resolve_schedule(kernel)


def check_kernel(kernel: GroupedGemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule a concrete sm100 grouped kernel breaks: :data:`RULES` and the sm100 rules on one group.

    Raises:
        ValueError: the kernel still has open choices, or does not target sm100.
    """
    _common.require_concrete(kernel)
    if kernel.target is not Target.sm100:
        raise ValueError(f"kernel {kernel.name!r} targets {kernel.target.value}, not sm100")
    out: list[Diagnostic] = []
    if kernel.schedule not in SCHEDULES:
        out.append(_diag("sm100.grouped-schedule", f"schedule {kernel.schedule.value} with grouped_gemm on sm100: "
                         "CUTLASS's SM100 ptr-array kernels are KernelPtrArrayTmaWarpSpecialized1SmSm100 and "
                         "...2SmSm100", _pos(kernel, "schedule"), tuple(s.value for s in SCHEDULES)))
        return out
    out += check_grouped_common(kernel, "sm100")
    if any(d.code == "sm100.grouped-dtype" for d in out):
        return out
    if kernel.stages is not None:
        out.append(_diag("sm100.grouped-stages", f"stages = {kernel.stages} with grouped_gemm on sm100: the ptr-array "
                         "kernel's extra shared memory is not modelled here; use stages = auto (CUTLASS's count)",
                         _pos(kernel, "stages"), ("auto",)))
    view = group_view(kernel, resolve_schedule(kernel))
    out += sm100.check_kernel(view, {d: v for d, v in (extents or {}).items() if d in ("M", "N", "K")} or None)
    return out
