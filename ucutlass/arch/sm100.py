"""SM100 (Blackwell: B200, GB200) rules: the configurations nvcc would reject, found in Python.

An SM100 GEMM runs tcgen05 UMMA instructions that read A and B from shared memory and accumulate in
tensor memory (TMEM); ``warpspecialized_1sm`` issues one MMA per SM, ``warpspecialized_2sm`` one MMA
over the two SMs of a CTA pair (CUTLASS's KernelTmaWarpSpecialized1SmSm100 / 2SmSm100 with the epilogue
schedules TmaWarpSpecialized1Sm / 2Sm). ``tile`` is the MMA tile (the builders' ``MmaTileShape_MNK``): a
2SM kernel gives each CTA of the pair half of its M (:func:`cta_tile`).

A CUTLASS 4.2 SM100 GEMM that breaks one of these rules fails a ``static_assert`` after about a minute
of nvcc. The kernels cannot run here (an H200 is sm_90); ucutlass compiles them for ``sm_100a``.

Sources are cited per constant: header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's
``cutlass_library/source/include``; line numbers are those of that wheel.

The shared-memory model (:func:`epilogue_smem_bytes`, :func:`smem_bytes`, :func:`auto_stages`) follows the
SM100 CollectiveBuilders with the defaults ucutlass emits (``EpilogueTileAuto``, the TMA warp-specialized
epilogue, ``StageCountAutoCarveout<sizeof(Epilogue::SharedStorage)>``) and the Sm90* EVT nodes SM100
reuses; ``tests/test_arch_sm100.py`` (``MEASURED``) holds what nvcc 13.0 printed for it.

TMEM needs no rule: it holds 128 lanes x 512 columns
(``cutlass/gemm/collective/builders/sm100_umma_builder.inl:256-257``) and one CTA's f32 accumulator tile is
at most 128 x 256, so the builder always fits 2 to 4 accumulator stages (``:259-263``).

Length: one target's whole rule table in one place, as :mod:`ucutlass.arch.sm90` (every rule beside the lines it
cites, and the shared-memory model they share).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..errors import Diagnostic
from ..ir import DType, EpilogueInputKind, GemmKernel, Layout, Schedule, Target
from . import _common
from ._common import MIN_STAGES, TMA_ALIGNMENT_BYTES, diag, kib, pos, require_concrete, round_up, spell

__all__ = [
    "check_kernel", "resolve_schedule", "resolve_swap_ab", "is_2sm", "cta_tile", "epilogue_tile", "mainloop_stages", "auto_stages",
    "max_stages", "smem_bytes", "epilogue_smem_bytes", "stage_bytes", "RULES", "SCHEDULES",
    "SMEM_CAPACITY_BYTES", "TILE_M_1SM", "TILE_M_2SM", "TILE_N_MULTIPLE", "TILE_N_MAX", "TMA_ALIGNMENT_BYTES",
]

# --- constants, with their sources -----------------------------------------------------------------------

#: Shared memory one thread block may use on sm100: ``cutlass/arch/arch.h:44``
#: ``sm100_smem_capacity_bytes = 232448`` (227 KiB, as on sm90); the kernel asserts its SharedStorage fits
#: (``cutlass/gemm/kernel/sm100_gemm_tma_warpspecialized.hpp:213`` "SMEM usage exceeded capacity.").
SMEM_CAPACITY_BYTES = 232448

#: MMA tile M of a 1SM kernel: ``cutlass/gemm/collective/builders/sm100_common.inl:309`` and
#: ``cute/arch/mma_sm100_umma.hpp:88`` ("M-mode size should be 64 or 128 for 1 CTA cluster MMA").
TILE_M_1SM = (64, 128)
#: MMA tile M of a 2SM kernel (each CTA of the pair holds half): ``sm100_common.inl:377`` and
#: ``mma_sm100_umma.hpp:424`` ("M-mode size should be 128 or 256 for 2 CTA cluster MMA").
TILE_M_2SM = (128, 256)

#: Tile N: at most 256 and a multiple of 16 for the 2SM MMA (``mma_sm100_umma.hpp:425``), of 8 for the 1SM
#: one (``:89``; ``sm100_common.inl:313`` and ``:381``). ucutlass keeps N a multiple of 16 for both.
TILE_N_MULTIPLE = 16
TILE_N_MAX = 256

#: Per mainloop stage the builder adds ``sizeof(PipelineTmaUmmaAsync<1>::SharedStorage)``: a full and an empty
#: 8-byte barrier (``sm100_umma_builder.inl:285`` and ``:93-96``).
PIPELINE_BARRIER_BYTES_PER_STAGE = 16

#: Tile-scheduler (CLC) pipeline stages of a dense GEMM (``sm100_umma_builder.inl:272``) and the size of
#: one CLC response (``cutlass/gemm/kernel/sm100_tile_scheduler.hpp:73``, four uint32).
SCHEDULER_STAGES = 2
CLC_RESPONSE_BYTES = 16

#: TMEM: 128 lanes x 512 32-bit columns; at most 4 accumulator stages (``sm100_umma_builder.inl:256-263``).
TMEM_CELLS = 128 * 512
MAX_ACCUMULATOR_STAGES = 4

#: Schedules of this target (``auto`` resolves to one of the others, :func:`resolve_schedule`).
SCHEDULES = (Schedule.auto, Schedule.warpspecialized_1sm, Schedule.warpspecialized_2sm)

#: Rule codes and what each checks (the card, docs/DSL.md, lists them).
RULES: dict[str, str] = {
    "sm100.schedule": "schedule is auto, warpspecialized_1sm or warpspecialized_2sm (the sm90 ones are not)",
    "sm100.mixed-input": "a and b have the same dtype",
    "sm100.accum": "accum is f32 (f16 only with f16 a and b)",
    "sm100.tile-m": "tile M is 64 or 128 (1sm), 128 or 256 (2sm)",
    "sm100.tile-n": "tile N is a multiple of 16 from 16 to 256",
    "sm100.swap-ab": "swap_ab = true is sm90 only so far (auto does not swap on sm100)",
    "sm100.tile-k": "tile K x element bytes is 64, 128 or 256",
    "sm100.2sm-cluster": "2sm needs an even cluster M",
    "sm100.cluster-shape": "cluster M and N in 1, 2, 4, 8 and cluster K = 1",
    "sm100.cluster-size": "cluster M x N <= 8",
    "sm100.epilogue-tile": "tile N is a multiple of the epilogue subtile N (EpilogueTileAuto)",
    "sm100.tf32-mn-major": "an f32 operand contiguous in M or N has a per-CTA M or N that is a multiple of 32",
    "sm100.split-k-scheduler": "split_k > 1 and reduction_mode nondeterministic need scheduler stream_k",
    "sm100.split-k-range": "split_k <= the K tiles of the problem (when extents are given)",
    "sm100.swizzle": "swizzle is 1, 2, 4 or 8",
    "sm100.stages-min": "stages >= 2",
    "sm100.smem": "explicit stages fit in 227 KiB of shared memory",
    "sm100.smem-auto": "stages = auto fits at least 2 stages",
    "sm100.align": "contiguous extent x element bytes is a multiple of 16 (when extents are given)",
    "sm100.scale-dtype": "a per-tensor scale_a or scale_b is f32",
    "sm100.blockscaled-format": "block scales are NVFP4 (e2m1, ue4m3 per K/16) or MXFP8 (f8, ue8m0 per K/32)",
    "sm100.blockscaled-k-major": "block-scaled a and b are K-major",
    "sm100.blockscaled-tile": "block-scaled CTA tile: M 128, N 64/128/192/256, K 128 bytes",
    "sm100.align-tma": "alignment is auto (16 bytes): sm100 kernels load and store with TMA only",
}

#: Block-scaled tcgen05 GEMMs (``cutlass/gemm/collective/builders/sm100_blockscaled_umma_builder.inl``), by the
#: name ucutlass reports: (a and b dtypes, scale-factor dtype, elements per scale along K, kernel schedule
#: suffix). NVFP4: e2m1 with ue4m3 scales per 16 (``cutlass::nv_float4_t``, KernelTmaWarpSpecialized1SmNvf4Sm100);
#: MXFP8: e4m3/e5m2 with ue8m0 scales per 32 (``cutlass::mx_float8_t``, KernelTmaWarpSpecialized1SmMxf8f6f4Sm100).
BLOCK_SCALED_FORMATS: dict[str, tuple[tuple[DType, ...], DType, int, str]] = {
    "nvfp4": ((DType.e2m1,), DType.ue4m3, 16, "Nvf4"),
    "mxfp8": ((DType.f8e4m3, DType.f8e5m2), DType.ue8m0, 32, "Mxf8f6f4"),
}
#: Per-CTA tile N of the block-scaled mainloop (``cutlass/gemm/collective/sm100_blockscaled_mma_warpspecialized.hpp:125``
#: "Cta N should be one of 64/128/192/256"); per-CTA tile M is one 128-row scale-factor atom
#: (``cutlass/detail/sm100_blockscaled_layout.hpp:51`` ``Blk_MN = _128``).
BLOCK_SCALED_CTA_N = (64, 128, 192, 256)
BLOCK_SCALED_CTA_M = 128
#: Tile K of a block-scaled GEMM: 128 bytes of a and b, i.e. 256 e2m1 or 128 FP8 elements (CUTLASS example
#: 72_blackwell_narrow_precision_gemm; four scale factors per row, ``Blk_SF = _4``, per 64 or 128 elements).
BLOCK_SCALED_TILE_K_BYTES = 128


def block_scaled_format(kernel: GemmKernel) -> str | None:
    """``"nvfp4"`` or ``"mxfp8"`` when both scales are sm100 block-scale factors of that format, else None."""
    sa, sb = kernel.scale_a, kernel.scale_b
    if sa is None or sb is None or sa.per_tensor or sb.per_tensor:
        return None
    for name, (ab, sf, vec, _) in BLOCK_SCALED_FORMATS.items():
        if (kernel.a.dtype in ab and kernel.b.dtype in ab and sa.dtype is sf and sb.dtype is sf
                and sa.block == (1, vec) and sb.block == (1, vec)):
            return name
    return None


def _check_block_scaled(kernel: GemmKernel, schedule: Schedule | None) -> list[Diagnostic]:
    """``sm100.scale-dtype``, ``sm100.blockscaled-format``, ``sm100.blockscaled-tile``, ``sm100.blockscaled-k-major``."""
    out: list[Diagnostic] = []
    for s in kernel.scales:
        if s.per_tensor and s.dtype is not DType.f32:
            out.append(diag("sm100.scale-dtype", f"{s.name} is one {s.dtype.value} for the tensor; per-tensor scales "
                            "are f32", s.pos, ("f32",)))
    a, b = kernel.a, kernel.b
    fmt = block_scaled_format(kernel)
    wants = kernel.blockwise or DType.e2m1 in (a.dtype, b.dtype) or any(
        s.dtype in (DType.ue4m3, DType.ue8m0) for s in kernel.scales)
    if fmt is None and wants:
        where = next((s.pos for s in kernel.scales if not s.per_tensor), pos(kernel, "a.dtype"))
        out.append(diag("sm100.blockscaled-format", "sm100 block-scaled GEMMs are NVFP4 (a, b : e2m1 with "
                        "scale_a : ue4m3[M, K/16], scale_b : ue4m3[N, K/16]) or MXFP8 (a, b : f8e4m3/f8e5m2 with "
                        "scale_a : ue8m0[M, K/32], scale_b : ue8m0[N, K/32]); this kernel has a : "
                        f"{a.dtype.value}, b : {b.dtype.value}, "
                        + ", ".join(f"{s.name} : {s.dtype.value}[{', '.join(s.dims)}]" for s in kernel.scales),
                        where, ("nvfp4", "mxfp8")))
        return out
    if fmt is None:
        return out
    for op in (a, b):
        if op.contiguous_dim != "K":
            out.append(diag("sm100.blockscaled-k-major", f"{op.name} is contiguous in {op.contiguous_dim}: block-scaled "
                            f"{op.name} is K-major (its scale factors run along K)", pos(kernel, f"{op.name}.layout"),
                            ("row" if op.dims[-1] == "K" else "col",)))
    if schedule is None:
        return out
    cta_m, cta_n, _ = cta_tile(kernel)
    tile_k = kernel.tile[2]
    bits = a.dtype.bits
    valid_k = BLOCK_SCALED_TILE_K_BYTES * 8 // bits
    if cta_m != BLOCK_SCALED_CTA_M or cta_n not in BLOCK_SCALED_CTA_N or tile_k != valid_k:
        share = 2 if schedule is Schedule.warpspecialized_2sm else 1
        out.append(diag("sm100.blockscaled-tile", f"tile {spell(kernel.tile)} with {fmt} and schedule {schedule.value}: "
                        f"a block-scaled CTA tile is M = {BLOCK_SCALED_CTA_M} (one scale-factor atom), N in "
                        f"{', '.join(map(str, BLOCK_SCALED_CTA_N))} and K = {valid_k} ({BLOCK_SCALED_TILE_K_BYTES} "
                        "bytes)", pos(kernel, "tile"),
                        tuple(f"{BLOCK_SCALED_CTA_M * share}x{n * share}x{valid_k}" for n in (128, 256)
                              if n * share <= TILE_N_MAX)))
    return out


# --- the model -------------------------------------------------------------------------------------------


def resolve_schedule(kernel: GemmKernel) -> Schedule:
    """The schedule a kernel runs. ``auto`` is what CUTLASS's ``KernelScheduleAuto`` picks
    (``sm100_common.inl:459-466``): ``warpspecialized_2sm`` when cluster M is even and tile M is a multiple of
    128, else ``warpspecialized_1sm``.

    Raises:
        ValueError: the schedule, tile or cluster is still an open choice.
    """
    _common.require_concrete_schedule(kernel)
    if kernel.schedule is not Schedule.auto:
        return kernel.schedule
    two = kernel.cluster[0] % 2 == 0 and kernel.tile[0] % 128 == 0
    return Schedule.warpspecialized_2sm if two else Schedule.warpspecialized_1sm


def resolve_swap_ab(kernel: GemmKernel, m_max: int | None = None) -> bool:
    """``swap_ab`` as written; ``auto`` is false on sm100 (ucutlass's sm100 templates do not swap AB yet: the rule
    ``sm100.swap-ab`` rejects ``true``). ``m_max`` is ignored."""
    return kernel.swap_ab is True


def is_2sm(kernel: GemmKernel) -> bool:
    """True when the kernel runs one MMA over an SM pair."""
    return resolve_schedule(kernel) is Schedule.warpspecialized_2sm


def cta_tile(kernel: GemmKernel) -> tuple[int, int, int]:
    """One CTA's tile: the MMA tile, with M halved for 2SM (``sm100_cta_tile_shape``,
    ``cutlass/epilogue/collective/builders/sm100_builder.inl:1082-1096``); the epilogue and its broadcast nodes
    work on it."""
    m, n, k = kernel.tile
    return (m // 2, n, k) if is_2sm(kernel) else (m, n, k)


def _tmem_warps(kernel: GemmKernel) -> tuple[int, int]:
    """Epilogue warps over (M, N): 2x2 for a 2SM MMA of M 128, else 4x1 (``sm100_builder.inl:1068-1080``)."""
    return (2, 2) if is_2sm(kernel) and kernel.tile[0] == 128 else (4, 1)


def _m_major(dims: tuple[str, ...], layout: Layout) -> bool:
    return _common.contiguous(dims, layout) == "M"


def epilogue_tile(kernel: GemmKernel) -> tuple[int, int]:
    """The epilogue subtile (M, N) of ``EpilogueTileAuto``: ``sm100_dense_compute_tile_shape_or_override``
    (``sm100_builder.inl:968-1066``). About 4096 elements per subtile without C; with C, 16 to 64 columns
    by the widest of C and D."""
    cta_m, cta_n, _ = cta_tile(kernel)
    warp_m, warp_n = _tmem_warps(kernel)
    c, d = kernel.c, kernel.d
    c_bits = c.dtype.bits if c is not None else d.dtype.bits
    max_bits = max(c_bits, d.dtype.bits)
    m = min(cta_m, 32 * warp_m)
    if c is None:
        n_perf = 4096 // m
    elif max_bits == 32:
        n_perf = 16 if cta_m > 64 and cta_n <= 128 else 32
    elif max_bits == 16:
        n_perf = 32 if cta_n <= 128 else 64
    else:
        n_perf = 64
    n_min_c = 8 * warp_n if c is None or _m_major(c.dims, c.layout) else 128 // c.dtype.bits * warp_n
    n_min_d = 8 * warp_n if _m_major(d.dims, d.layout) else 128 // d.dtype.bits * warp_n
    return m, min(cta_n, max(n_perf, n_min_c, n_min_d))


def _contiguous_run(kernel: GemmKernel, dims: tuple[str, ...], layout: Layout) -> int:
    """Elements of one epilogue-subtile row TMA moves contiguously: the subtile M for an M-major tensor, else
    its N, split between the two N warps of a 2x2 epilogue unless the subtile spans the CTA tile N
    (``sm100_builder.inl:72-96``, the ``tma_tile`` of ``sm100_get_epilogue_smem_swizzle_layout_atom``)."""
    epi_m, epi_n = epilogue_tile(kernel)
    if _m_major(dims, layout):
        return epi_m
    _, warp_n = _tmem_warps(kernel)
    return epi_n if epi_n == cta_tile(kernel)[1] else epi_n // warp_n


def _smem_alignment(kernel: GemmKernel, dims: tuple[str, ...], layout: Layout, dtype: DType) -> int:
    """``alignment_for_swizzle`` of the epilogue smem atom ``sm100_smem_selector`` picks for a C, D or aux tensor
    (``cutlass/gemm/collective/builders/sm100_common.inl:79-133``): by the contiguous run, as on sm90; an
    M-major f32 tensor always gets the SW128_32B atom (``:90-93``), whose ``Swizzle<2,5,2>``
    (``cute/atom/mma_traits_sm100.hpp:72``) aligns to 1 << 9 = 512 bytes."""
    if dtype.bits == 32 and _m_major(dims, layout):
        return 512
    return _common.swizzle_alignment(_contiguous_run(kernel, dims, layout) * dtype.bytes)


def _epilogue_stages(kernel: GemmKernel) -> tuple[int, int, bool]:
    """(StagesC, StagesD, ReuseSmemC) of ``sm100_dense_dispatch_policy`` (``sm100_builder.inl:1098-1131``)."""
    cta_m, cta_n, _ = cta_tile(kernel)
    epi_m, epi_n = epilogue_tile(kernel)
    epi_tiles = (cta_m // epi_m) * (cta_n // epi_n)
    reuse = kernel.c is not None and kernel.c.dtype.bits > 8
    stages_d = min(epi_tiles, 2)
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse else min(epi_tiles, 4)
    return stages_c, stages_d, reuse


def _epilogue_tensor_bytes(kernel: GemmKernel) -> tuple[int, int]:
    """(sizeof(Epilogue::TensorStorage), its alignment): the C/D staging subtiles plus the EVT nodes' smem
    (``cutlass/epilogue/collective/sm100_epilogue_tma_warpspecialized.hpp:151-215``)."""
    epi_m, epi_n = epilogue_tile(kernel)
    stages_c, stages_d, _ = _epilogue_stages(kernel)  # ReuseSmemC whenever there is a C (all C dtypes > 8 bits)
    c, d = kernel.c, kernel.d
    sub = epi_m * epi_n
    d_align = _smem_alignment(kernel, d.dims, d.layout, d.dtype)
    if c is None:  # CollectiveStorageWithoutC: D only
        collective, align = round_up(stages_d * sub * d.dtype.bytes, d_align), d_align
    else:  # CollectiveStorageReuseC: C and D share StagesC slots of the wider subtile
        align = max(d_align, _smem_alignment(kernel, c.dims, c.layout, c.dtype))
        slot = sub * max(c.dtype.bytes, d.dtype.bytes)
        c_bytes = (stages_c - 1) * slot + sub * c.dtype.bytes
        d_bytes = (stages_c - 1) * slot + sub * d.dtype.bytes
        collective = round_up(max(c_bytes, d_bytes), align)
    fusion = 0
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.row_vector:  # Sm90RowBroadcast: array_aligned<T, CTA tile N>
            fusion += round_up(cta_tile(kernel)[1] * inp.dtype.bytes, 16)
        elif inp.kind is EpilogueInputKind.matrix:  # Sm90AuxLoad: epilogue subtile x StagesC, swizzle-aligned
            aux_align = _smem_alignment(kernel, inp.dims, inp.layout, inp.dtype)
            fusion = round_up(fusion, aux_align) + sub * stages_c * inp.dtype.bytes
            align = max(align, aux_align)
    for out in kernel.epilogue_outputs:
        if out.kind is EpilogueInputKind.matrix:  # Sm90AuxStore: subtile x StagesD (Sm100AuxStoreDescriptor)
            aux_align = _smem_alignment(kernel, out.dims, out.layout, out.dtype)
            fusion = round_up(fusion, aux_align) + sub * stages_d * out.dtype.bytes
            align = max(align, aux_align)
        # the reductions keep no shared memory of their own (Stages = 0)
    return round_up(collective + max(fusion, 1), align), align


def epilogue_smem_bytes(kernel: GemmKernel) -> int:
    """``sizeof(CollectiveEpilogue::SharedStorage)``: what ``StageCountAutoCarveout`` reserves: the tensor
    storage and the C load pipeline's barriers (16 bytes per C stage, also without C)."""
    require_concrete(kernel)
    tensors, align = _epilogue_tensor_bytes(kernel)
    stages_c, _, _ = _epilogue_stages(kernel)
    return round_up(tensors + PIPELINE_BARRIER_BYTES_PER_STAGE * stages_c, align)


def stage_bytes(kernel: GemmKernel) -> int:
    """Bytes of one mainloop stage in one CTA: its M x K slice of A and N x K slice of B (a 2SM pair splits
    both, ``sm100_umma_builder.inl:235-245``)."""
    m, n, k = kernel.tile
    share = 2 if is_2sm(kernel) else 1
    tensors = ((m // share) * k * kernel.a.dtype.bits + (n // share) * k * kernel.b.dtype.bits) // 8
    fmt = block_scaled_format(kernel)
    if fmt is None:
        return tensors
    # block-scaled: one byte per scale factor, in 128-row atoms (``sm100_compute_stage_count_or_override_blockscaled``,
    # ``cutlass/gemm/collective/builders/sm100_blockscaled_umma_builder.inl:69-88``)
    vec = BLOCK_SCALED_FORMATS[fmt][2]
    return tensors + (round_up(m // share, 128) + round_up(n, 128)) * (k // vec)


def _accumulator_stages(kernel: GemmKernel) -> int:
    """TMEM accumulator stages (``sm100_umma_builder.inl:259-263``)."""
    cta_m, cta_n, _ = cta_tile(kernel)
    if is_2sm(kernel) or kernel.tile[0] > 64:
        stages = TMEM_CELLS // (cta_m * cta_n)
    else:
        stages = 512 // cta_n * 2
    return min(MAX_ACCUMULATOR_STAGES, stages)


def _kernel_carveout(kernel: GemmKernel) -> int:
    """``Sm100DenseGemmTmaUmmaCarveout::KernelSmemCarveout`` (``sm100_pipeline_carveout.inl:45-74``): the
    accumulator, CLC and CLC-throttle pipelines, the load-order and TMEM-dealloc barriers, the CLC
    responses and the TMEM base pointers."""
    acc = 16 * _accumulator_stages(kernel)
    clc = 16 * SCHEDULER_STAGES
    return acc + clc + 16 + 8 + clc + SCHEDULER_STAGES * CLC_RESPONSE_BYTES + SCHEDULER_STAGES * 4


def auto_stages(kernel: GemmKernel) -> int:
    """The stage count ``stages = auto`` gets: ``sm100_compute_stage_count_or_override`` for
    ``StageCountAutoCarveout`` (``sm100_umma_builder.inl:83-99``, ``:282``):
    (capacity - kernel carveout - epilogue SharedStorage) // (stage bytes + 16)."""
    require_concrete(kernel)
    free = SMEM_CAPACITY_BYTES - _kernel_carveout(kernel) - epilogue_smem_bytes(kernel)
    return free // (stage_bytes(kernel) + PIPELINE_BARRIER_BYTES_PER_STAGE)


def mainloop_stages(kernel: GemmKernel) -> int:
    """The mainloop's pipeline depth: ``stages`` when given, else what ``auto`` picks (:func:`auto_stages`)."""
    require_concrete(kernel)
    return kernel.stages if kernel.stages is not None else auto_stages(kernel)


def smem_bytes(kernel: GemmKernel, stages: int | None = None) -> int:
    """``sizeof(GemmKernel::SharedStorage)`` (``cutlass/gemm/kernel/sm100_gemm_tma_warpspecialized.hpp:182-210``):
    the pipelines (each 16-byte aligned), the CLC responses and TMEM pointer, then the epilogue and mainloop
    tensors, 128-byte aligned or more.

    Args:
        kernel: a concrete kernel.
        stages: mainloop stages; None means :func:`mainloop_stages`.
    """
    require_concrete(kernel)
    stages = mainloop_stages(kernel) if stages is None else stages
    epi_tensors, epi_align = _epilogue_tensor_bytes(kernel)
    stages_c, _, _ = _epilogue_stages(kernel)
    barriers = [16 * stages, 16 * stages_c, 16, 16 * SCHEDULER_STAGES, 16 * _accumulator_stages(kernel),
                16 * SCHEDULER_STAGES, 8]
    header = sum(round_up(b, 16) for b in barriers) + SCHEDULER_STAGES * CLC_RESPONSE_BYTES + 4
    align = max(128, epi_align)
    return round_up(round_up(header, align) + epi_tensors + stages * stage_bytes(kernel), align)


def max_stages(kernel: GemmKernel) -> int:
    """The most mainloop stages whose :func:`smem_bytes` fit in :data:`SMEM_CAPACITY_BYTES` (0 if none)."""
    n = 0
    while smem_bytes(kernel, n + 1) <= SMEM_CAPACITY_BYTES:
        n += 1
    return n


# --- the rules -------------------------------------------------------------------------------------------


def _check_tile(kernel: GemmKernel, schedule: Schedule, note: str) -> list[Diagnostic]:
    out = []
    tile = spell(kernel.tile)
    tile_m, tile_n, _ = kernel.tile
    valid_m = TILE_M_2SM if schedule is Schedule.warpspecialized_2sm else TILE_M_1SM
    if tile_m not in valid_m:
        what = "2SM MMA over a CTA pair (each CTA gets M/2)" if valid_m == TILE_M_2SM else "1SM MMA"
        out.append(diag("sm100.tile-m", f"tile {tile} with schedule {schedule.value}{note}: the tcgen05 {what} "
                        f"is {valid_m[0]} or {valid_m[1]} rows", pos(kernel, "tile"), valid_m))
    if tile_n % TILE_N_MULTIPLE or not TILE_N_MULTIPLE <= tile_n <= TILE_N_MAX:
        out.append(diag("sm100.tile-n", f"tile {tile}: tile N {tile_n} must be a multiple of {TILE_N_MULTIPLE} "
                        f"from {TILE_N_MULTIPLE} to {TILE_N_MAX} (one tcgen05 MMA is at most 256 wide)",
                        pos(kernel, "tile"), range(TILE_N_MULTIPLE, TILE_N_MAX + 1, TILE_N_MULTIPLE)))
    return out


def _check_epilogue_tile(kernel: GemmKernel) -> list[Diagnostic]:
    """The builder divides the CTA tile into epilogue subtiles (``sm100_builder.inl:1215``, ``EpiTiles``):
    ``shape_div`` asserts "Divisibility Condition" (``cute/int_tuple.hpp:408``) unless N divides."""
    cta_n = cta_tile(kernel)[1]
    epi_n = epilogue_tile(kernel)[1]
    if cta_n % epi_n == 0:
        return []
    valid = [n for n in range(TILE_N_MULTIPLE, TILE_N_MAX + 1, TILE_N_MULTIPLE)
             if n % epilogue_tile(dataclasses.replace(kernel, tile=(kernel.tile[0], n, kernel.tile[2])))[1] == 0]
    return [diag("sm100.epilogue-tile", f"tile {spell(kernel.tile)}: the epilogue works in {epi_n}-column "
                 f"subtiles (EpilogueTileAuto for this D{' and C' if kernel.c else ''}), which must divide tile N "
                 f"{cta_n}", pos(kernel, "tile"), valid)]


def _check_tf32_mn_major(kernel: GemmKernel) -> list[Diagnostic]:
    """MN-major tf32 operands use only the SW128_32B smem atom, 32 elements wide (``sm100_common.inl:90-93``)."""
    out = []
    share = 2 if is_2sm(kernel) else 1
    for op, extent in ((kernel.a, kernel.tile[0] // share), (kernel.b, kernel.tile[1] // share)):
        if op.dtype is DType.f32 and op.contiguous_dim != "K" and extent % 32:
            out.append(diag("sm100.tf32-mn-major", f"{op.name} is f32 and contiguous in {op.contiguous_dim}: its "
                            f"per-CTA {op.contiguous_dim} tile ({extent}) must be a multiple of 32 (the only smem "
                            f"atom for MN-major tf32), or declare {op.name} K-major", pos(kernel, "tile")))
    return out


def _check_smem(kernel: GemmKernel) -> list[Diagnostic]:
    tile = spell(kernel.tile)
    if kernel.stages is None:
        n = auto_stages(kernel)
        if n >= MIN_STAGES:
            return []
        return [diag("sm100.smem-auto", f"tile {tile} is too large for shared memory: one mainloop stage is "
                     f"{kib(stage_bytes(kernel))} per CTA and the epilogue takes {kib(epilogue_smem_bytes(kernel))}, "
                     f"so stages = auto fits {n} (needs >= {MIN_STAGES}) in {kib(SMEM_CAPACITY_BYTES)}",
                     pos(kernel, "tile"))]
    need = smem_bytes(kernel, kernel.stages)
    if need <= SMEM_CAPACITY_BYTES:
        return []
    most = max_stages(kernel)
    fit = f"at most {most} fit" if most >= MIN_STAGES else "not even 2 fit: use a smaller tile"
    return [diag("sm100.smem", f"stages = {kernel.stages} with tile {tile} needs {kib(need)} of shared memory "
                 f"({kernel.stages} x {kib(stage_bytes(kernel))} mainloop + epilogue); an sm100 block has at most "
                 f"{kib(SMEM_CAPACITY_BYTES)}: {fit}", pos(kernel, "stages"),
                 ("auto",) + tuple(str(s) for s in range(MIN_STAGES, most + 1)) if most >= MIN_STAGES else ())]


def check_kernel(kernel: GemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every sm100 rule a concrete kernel breaks (an empty list when nvcc should accept it).

    Args:
        kernel: a kernel without open choices, ``target = sm100``.
        extents: problem extents by dim name; when given, the 16-byte alignment of each tensor's
            contiguous dim and the split-K range are checked.

    Returns:
        Diagnostics with codes from :data:`RULES`, positioned at the setting to change.

    Raises:
        ValueError: the kernel still has open choices or targets another architecture.
    """
    require_concrete(kernel)
    if kernel.target is not Target.sm100:
        raise ValueError(f"kernel {kernel.name!r} targets {spell(kernel.target)}: check it with "
                         "ucutlass.arch.check_kernel, which picks the target's rules")
    out = _common.check_element_types(kernel, "sm100", "tcgen05")
    if kernel.swap_ab is True:
        out.append(diag("sm100.swap-ab", "swap_ab = true: ucutlass swaps AB on sm90 only so far (the sm100 templates "
                        "build D = A·B as declared); use swap_ab = false or auto, or target = sm90",
                        pos(kernel, "swap_ab"), ("false", "auto")))
    shape_ok = True
    if kernel.schedule not in SCHEDULES:
        out.append(diag("sm100.schedule", f"schedule {kernel.schedule.value} is an sm90 schedule; an sm100 kernel "
                        "runs auto, warpspecialized_1sm or warpspecialized_2sm (KernelTmaWarpSpecialized1SmSm100 / "
                        "2SmSm100)", pos(kernel, "schedule"), tuple(s.value for s in SCHEDULES)))
        schedule, shape_ok = None, False
    else:
        schedule = resolve_schedule(kernel)
        note = f" (schedule auto resolves to {schedule.value})" if kernel.schedule is Schedule.auto else ""
        tile_diags = _check_tile(kernel, schedule, note)
        out += tile_diags
        shape_ok = not tile_diags
    scaled = _check_block_scaled(kernel, schedule if shape_ok else None)
    out += scaled
    shape_ok = shape_ok and not scaled
    tile_k = _common.check_tile_k(kernel, "sm100")
    out += tile_k
    cluster = _common.check_cluster(kernel, "sm100")
    if schedule is Schedule.warpspecialized_2sm and kernel.cluster[0] % 2:
        cluster.insert(0, diag("sm100.2sm-cluster", f"cluster {spell(kernel.cluster)} with schedule "
                               "warpspecialized_2sm: the two CTAs of an MMA pair sit side by side along cluster M, "
                               "so cluster M must be even (CUTLASS: \"schedule + cluster mismatch\")",
                               pos(kernel, "cluster" if "cluster" in kernel.setting_pos else "schedule"),
                               ("2x1x1", "2x2x1", "4x1x1", "2x4x1", "4x2x1", "8x1x1")))
    out += cluster
    if shape_ok:
        shape_ok = not tile_k and not cluster
        tf32 = _check_tf32_mn_major(kernel)
        epi = _check_epilogue_tile(kernel)
        out += tf32 + epi
        shape_ok = shape_ok and not tf32 and not epi
    out += _common.check_scheduler_arguments(kernel, extents, "sm100")
    stages_min = _common.check_stages_min(kernel, "sm100", "TMA")
    out += stages_min
    if shape_ok and not stages_min:
        out += _check_smem(kernel)
    small = [op.name for op in kernel.operands if kernel.alignment_of(op.dtype) * op.dtype.bits < 8 * TMA_ALIGNMENT_BYTES]
    if small:
        out.append(diag("sm100.align-tma", f"alignment = {kernel.alignment} reads {', '.join(small)} below 16 bytes "
                        "at a time; ucutlass's sm100 kernels load and store with TMA only (16 bytes): use alignment = "
                        "auto, or target = sm90 (cp.async fallback)", pos(kernel, "alignment"), ("auto",)))
    return out + _common.check_alignment(kernel, extents, "sm100")

