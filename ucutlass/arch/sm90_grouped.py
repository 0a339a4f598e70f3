"""SM90 rules for grouped GEMMs (``kernel NAME : grouped_gemm``, CUTLASS's ptr-array grouped kernels).

A grouped kernel is built from the same collectives as a plain SM90 GEMM (``CollectiveBuilder`` with
``LayoutA*``, ``LayoutB*``, ``LayoutD*``), so every :mod:`ucutlass.arch.sm90` rule applies to one group's GEMM: this
module checks that view (:func:`group_view`) with those rules, then adds what only the ptr-array kernels require.
Header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's ``cutlass_library/source/include``.

- The ptr-array kernels exist for two schedules only: ``KernelPtrArrayTmaWarpSpecializedCooperative`` and
  ``...Pingpong`` (``cutlass/gemm/dispatch_policy.hpp``; the builder accepts them at
  ``cutlass/gemm/collective/builders/sm90_gmma_builder.inl:221-222``); the cooperative one asserts tile M >= 128
  (``cutlass/gemm/kernel/sm90_gemm_array_tma_warpspecialized_cooperative.hpp:426``), as the plain one does.
- Their only tile scheduler is the group scheduler ``PersistentTileSchedulerSm90Group``
  (``sm90_gemm_array_tma_warpspecialized_cooperative.hpp:129-135``: "Ptr-Array Cooperative and Grouped Gemm
  Cooperative kernel only supports the default scheduler"), which has no stream-K and no split-K.
- Shared memory: besides what the plain kernel holds, the ptr-array kernel keeps the TMA descriptors it rewrites
  per group (A and B: ``sm90_gmma_builder.inl:262`` ``TensorMapStorage``; C and D per epilogue warp group:
  ``cutlass/epilogue/collective/sm90_epilogue_array_tma_warpspecialized.hpp:243``), a tile-scheduler pipeline
  and responses of 8 stages (``sm90_gemm_array_tma_warpspecialized_cooperative.hpp:152``). Those are at most
  :data:`GROUPED_EXTRA_SMEM_BYTES`; :func:`smem_bytes` adds them to the sm90 model for explicit ``stages``
  (``stages = auto`` is CUTLASS's own count, with these carved out by the builder). Checked against
  ``sizeof(GemmKernel::SharedStorage)`` and ``DispatchPolicy::Stages`` printed by a host program built with nvcc 13.0
  for 8 grouped configurations (cooperative and pingpong, tiles 64 to 256, auto and explicit stages, with and without
  a bias row): the stage counts equal the sm90 model's and every size is the model's plus exactly 1024 bytes
  (tests/test_grouped.py, ``test_grouped_smem_model_matches_nvcc``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..errors import Diagnostic
from ..ir import (Choice, DType, EpilogueInputKind, GemmKernel, GroupedGemmKernel, ReductionMode, Schedule, Target,
                  TileScheduler)
from . import _common, sm90
from ._common import diag as _diag
from ._common import kib as _kib
from ._common import pos as _pos

__all__ = ["check_kernel", "resolve_schedule", "group_view", "check_grouped_common", "smem_bytes", "RULES", "SCHEDULES",
           "GROUPED_EXTRA_SMEM_BYTES"]

#: Schedules of the SM90 ptr-array grouped kernels (``auto`` resolves to one of the others).
SCHEDULES = (Schedule.auto, Schedule.cooperative, Schedule.pingpong)

#: An upper bound on the shared memory a ptr-array kernel holds beyond the plain kernel's: 2 x 128-byte TMA
#: descriptors (A, B), up to 3 x 128 (C and one D per epilogue warp group), the scheduler pipeline
#: (``PipelineAsync<8>``, 8 x 8 bytes) and 8 x 16-byte scheduler responses, plus 128-byte alignment padding.
GROUPED_EXTRA_SMEM_BYTES = 1024

RULES: dict[str, str] = {
    "sm90.grouped-schedule": "grouped_gemm schedule is auto, cooperative or pingpong (the ptr-array kernels)",
    "sm90.grouped-scheduler": "grouped_gemm uses the persistent group scheduler: no stream_k, split_k = 1",
    "sm90.grouped-dtype": "grouped_gemm a, b and d are bf16, f16 or f32 (FP8 grouped GEMM comes later)",
    "sm90.grouped-alignment": "grouped_gemm operands are 16-byte aligned (alignment = auto: TMA)",
    "sm90.grouped-smem": "explicit stages fit in 227 KiB beside the ptr-array kernel's descriptors",
}


def resolve_schedule(kernel: GroupedGemmKernel) -> Schedule:
    """``auto``: cooperative when tile M is 128 or 256 (a multiple of 128), else pingpong (:func:`sm90.resolve_schedule`).

    Raises:
        ValueError: the schedule or the tile is still an open choice.
    """
    _common.require_concrete_schedule(kernel)
    return sm90.resolve_schedule(kernel)


def group_view(kernel: GroupedGemmKernel, schedule: Schedule | None = None) -> GemmKernel:
    """One group's GEMM as a plain :class:`GemmKernel` of the same target: b over ``[N, K]`` or ``[K, N]``, ``[G, N]``
    inputs as ``[N]``, the schedule resolved (``schedule``, default :func:`resolve_schedule`), the persistent
    scheduler and split_k 1 (the grouped rules check those themselves)."""
    fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(GemmKernel)}
    b = dataclasses.replace(kernel.b, dims=tuple(kernel.b.dims[1:]))
    inputs = tuple(dataclasses.replace(i, dims=("N",)) if i.dims == ("G", "N") else i
                   for i in kernel.epilogue_inputs)
    fields.update(b=b, c=None, epilogue_inputs=inputs, schedule=schedule or resolve_schedule(kernel),
                  scheduler=TileScheduler.persistent, split_k=1, swap_ab=False,
                  reduction_mode=ReductionMode.deterministic)
    if "alignment" in fields:
        fields["alignment"] = None
    return GemmKernel(**fields)


def check_grouped_common(kernel: GroupedGemmKernel, prefix: str) -> list[Diagnostic]:
    """What every target's grouped kernels share: ``{prefix}.grouped-dtype``, ``.grouped-scheduler`` (the persistent
    group scheduler, split_k 1) and ``.grouped-alignment`` (TMA)."""
    out: list[Diagnostic] = []
    for op in kernel.operands:
        if op.dtype not in (DType.bf16, DType.f16, DType.f32):
            out.append(_diag(f"{prefix}.grouped-dtype", f"{op.name} is {op.dtype.value}: the grouped template takes "
                             "bf16, f16 and f32 (tf32) operands so far (FP8 grouped GEMM, with its scales, comes "
                             "later)",
                             _pos(kernel, f"{op.name}.dtype"), ("bf16", "f16", "f32")))
    if any(getattr(kernel, s, None) is not None for s in ("scale_a", "scale_b")):
        out.append(_diag(f"{prefix}.grouped-dtype", "operand scales are not supported by the grouped template yet",
                         kernel.pos))
    if out:
        return out
    if kernel.scheduler is not TileScheduler.persistent:
        out.append(_diag(f"{prefix}.grouped-scheduler", f"scheduler {kernel.scheduler.value} with grouped_gemm: the "
                         "ptr-array kernels run only the persistent group scheduler (PersistentTileScheduler"
                         f"{'Sm100' if prefix == 'sm100' else 'Sm90'}Group)", _pos(kernel, "scheduler"),
                         ("persistent",)))
    if kernel.swap_ab is True:
        out.append(_diag(f"{prefix}.swap-ab", "swap_ab = true with grouped_gemm: the ptr-array kernels build each "
                         "group's D = A·B as declared (no swap AB yet); use swap_ab = false or auto",
                         _pos(kernel, "swap_ab"), ("false", "auto")))
    if kernel.split_k != 1:
        out.append(_diag(f"{prefix}.grouped-scheduler", f"split_k = {kernel.split_k} with grouped_gemm: the group "
                         "scheduler does not split K", _pos(kernel, "split_k"), ("1",)))
    if kernel.reduction_mode is not ReductionMode.deterministic:
        out.append(_diag(f"{prefix}.grouped-scheduler", f"reduction_mode = {kernel.reduction_mode.value} with "
                         "grouped_gemm: the group scheduler does not split tiles", _pos(kernel, "reduction_mode"),
                         ("deterministic",)))
    if getattr(kernel, "alignment", None) is not None:
        out.append(_diag(f"{prefix}.grouped-alignment", f"alignment = {kernel.alignment} with grouped_gemm: the "
                         "ptr-array kernels load every group with TMA, which needs 16-byte aligned rows",
                         _pos(kernel, "alignment"), ("auto",)))
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.matrix:  # the lowering refuses these; a hand-built IR may not
            out.append(_diag(f"{prefix}.grouped-dtype", f"{inp.name}: [M, N] epilogue inputs are not supported by "
                             "the grouped template", inp.pos))
    if kernel.groups is None or isinstance(kernel.groups.dtype, Choice):
        raise ValueError(f"grouped kernel {kernel.name!r} has no concrete group operand")
    return out


def smem_bytes(kernel: GroupedGemmKernel, stages: int | None = None) -> int:
    """Upper bound of the ptr-array kernel's shared memory: :func:`sm90.smem_bytes` of :func:`group_view` plus
    :data:`GROUPED_EXTRA_SMEM_BYTES`."""
    return sm90.smem_bytes(group_view(kernel), stages) + GROUPED_EXTRA_SMEM_BYTES


def check_kernel(kernel: GroupedGemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule a concrete grouped kernel breaks: the sm90 rules on :func:`group_view` and :data:`RULES`.

    Args:
        kernel: a grouped kernel without open choices.
        extents: optional extents by dim name (``{"N": 4096, "K": 7168, "G": 256}``) for the alignment rule.

    Raises:
        ValueError: the kernel still has open choices.
    """
    _common.require_concrete(kernel)
    out: list[Diagnostic] = []
    if kernel.target is not Target.sm90:
        raise ValueError(f"kernel {kernel.name!r} targets {kernel.target.value}: ucutlass.arch.check_kernel picks "
                         "the grouped rules of its target")
    if kernel.schedule not in SCHEDULES:
        out.append(_diag("sm90.grouped-schedule", f"schedule {kernel.schedule.value} with grouped_gemm: CUTLASS's "
                         "ptr-array grouped kernels are KernelPtrArrayTmaWarpSpecializedCooperative and ...Pingpong",
                         _pos(kernel, "schedule"), tuple(s.value for s in SCHEDULES)))
        return out
    out += check_grouped_common(kernel, "sm90")
    if any(d.code == "sm90.grouped-dtype" for d in out):
        return out
    view = group_view(kernel)
    out += sm90.check_kernel(view, {d: v for d, v in (extents or {}).items() if d in ("M", "N", "K")} or None)
    explicit_ok = kernel.stages is not None and not any(d.code in ("sm90.smem", "sm90.stages-min") or
                                                        d.code.endswith("-tile-m") or d.code.startswith("sm90.tile")
                                                        for d in out)
    if explicit_ok:
        need = smem_bytes(kernel, kernel.stages)
        if need > sm90.SMEM_CAPACITY_BYTES:
            fit = [s for s in range(sm90.MIN_STAGES, kernel.stages)
                   if smem_bytes(kernel, s) <= sm90.SMEM_CAPACITY_BYTES]
            out.append(_diag("sm90.grouped-smem", f"stages = {kernel.stages} with tile {_common.spell(kernel.tile)} "
                             f"needs up to {_kib(need)} of shared memory with the ptr-array kernel's descriptors and "
                             f"scheduler ({_kib(GROUPED_EXTRA_SMEM_BYTES)}); an sm90 block has at most "
                             f"{_kib(sm90.SMEM_CAPACITY_BYTES)}", _pos(kernel, "stages"),
                             ("auto",) + tuple(str(s) for s in fit)))
    return out
