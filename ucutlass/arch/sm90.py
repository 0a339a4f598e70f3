"""SM90 (Hopper: H100, H200) rules: the configurations nvcc or the CUDA runtime would reject, found in Python.

A CUTLASS 4.2 SM90 GEMM that breaks one of these rules fails a ``static_assert`` after about a minute
of nvcc, or compiles and then fails ``initialize`` (shared memory). :func:`check_kernel` finds them at
once on a concrete :class:`~ucutlass.ir.GemmKernel`, so the tuner prunes them before compiling and a
hand-written `.ucut` gets a message that points at the setting to change.

Sources are cited per constant: header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's
``cutlass_library/source/include``; line numbers are those of that wheel.

The shared-memory model (:func:`epilogue_smem_bytes`, :func:`smem_bytes`, :func:`auto_stages`) follows
the CollectiveBuilder defaults that ucutlass emits (``EpilogueTileAuto``, the TMA warp-specialized
epilogue, ``StageCountAutoCarveout<sizeof(Epilogue::SharedStorage)>``) and the EVT nodes each epilogue
input lowers to (``[N]`` Sm90RowBroadcast, ``[M]`` Sm90ColBroadcast, ``[M, N]`` Sm90AuxLoad, scalar
Sm90ScalarBroadcast). It was checked against ``sizeof`` and ``DispatchPolicy::Stages`` printed by a host
program built with nvcc 13.0 for 26 configurations (cooperative, pingpong, warpspecialized; bf16/f16/f32;
with and without C of the same or another width, bias, residual, row scale; row- and column-major D;
K- and MN-major A and B; auto and explicit stages) and matches every byte: the table is
``MEASURED`` in ``tests/test_arch_sm90.py``.

Length: one target's whole rule table in one place: every rule sm90 applies, each beside the CUTLASS lines it
cites, and the shared-memory model those rules share; split by rule, no file would show all that the target
rejects.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from ..errors import Diagnostic
from ..ir import (ALIGNMENTS, Choice, DType, EpilogueInputKind, GemmKernel, Layout, Schedule, Target, TileScheduler,
                  SWAPPED_NAMES, expr_to_text, linear_combination, transposed)
from . import _common
from ._common import (CLUSTER_EXTENTS, MAX_CLUSTER_SIZE, MIN_STAGES, SWIZZLE_SIZES, TILE_K_BYTES,
                      TMA_ALIGNMENT_BYTES)
from ._common import contiguous as _contiguous
from ._common import diag as _diag
from ._common import kib as _kib
from ._common import pos as _pos
from ._common import require_concrete as _require_concrete
from ._common import round_up as _round_up
from ._common import spell as _spell
from ._common import swizzle_alignment as _swizzle_alignment

__all__ = [
    "check_kernel", "resolve_schedule", "resolve_swap_ab", "mma_view", "mainloop_stages", "auto_stages", "max_stages",
    "smem_bytes", "stage_slices", "swizzle_modes", "smem_tiles",
    "epilogue_smem_bytes", "epilogue_tile", "stage_bytes", "RULES",
    "SMEM_CAPACITY_BYTES", "TMA_ALIGNMENT_BYTES", "MIN_STAGES", "STAGE_ALIGNMENT_BYTES",
    "PIPELINE_BARRIER_BYTES_PER_STAGE", "COOPERATIVE_TILE_M", "WARPSPECIALIZED_TILE_M", "TILE_N_MULTIPLE",
    "TILE_N_MAX", "TILE_K_BYTES", "CLUSTER_EXTENTS", "MAX_CLUSTER_SIZE", "COOPERATIVE_EPI_TILE_M",
    "WARPSPECIALIZED_EPI_TILE_M", "EPI_TILE_N", "SWAP_AB_AUTO_MAX_M",
]

# --- constants, with their sources -----------------------------------------------------------------------

#: Shared memory one thread block may use on sm90 (227 KiB, the opt-in dynamic maximum).
#: CUTLASS: ``cutlass/gemm/collective/builders/sm90_common.inl:57`` ``sm90_smem_capacity_bytes = 232448``;
#: CUDA C++ Programming Guide, compute capability 9.0: 227 KB of shared memory per block (opt-in).
SMEM_CAPACITY_BYTES = 232448

#: ``compute_stage_count_or_override`` rounds stage bytes and the carveout to 128 bytes
#: (``cutlass/gemm/collective/builders/sm90_gmma_builder.inl:70``, ``int alignment = 128``).
STAGE_ALIGNMENT_BYTES = 128

#: Per mainloop stage CUTLASS adds ``sizeof(PipelineTmaAsync<1>::SharedStorage)``: one full and one empty
#: 8-byte barrier (``cutlass/pipeline/sm90_pipeline.hpp:280``; used in ``sm90_gmma_builder.inl:72``).
PIPELINE_BARRIER_BYTES_PER_STAGE = 16

#: Tile M the cooperative kernel accepts. It needs M >= 128
#: (``cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp:357`` "Cooperative kernel requires Tile
#: Size to be greater than or equal to 128 along the M-dimension") and its epilogue tile M = min(128, M)
#: must divide M (``cutlass/epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp:129`` "EPI_TILE_M must divide
#: CTA_M"); wgmma needs M % 64 == 0 (``cute/arch/mma_sm90.hpp:370``). 256 = two warpgroups of 128 rows.
COOPERATIVE_TILE_M = (128, 256)

#: Tile M the pingpong and warpspecialized kernels accept: their epilogue tile M is min(64, M) and must
#: divide M (same asserts as above); one warpgroup owns a whole tile, so M = 256 would need 256 x N
#: accumulators in 128 threads (with N = 128, 256 fp32 registers per thread: more than the 255 there are).
WARPSPECIALIZED_TILE_M = (64, 128)

#: 32-bit registers a thread of an MMA warpgroup may hold: CUTLASS's cooperative and pingpong kernels give their
#: MMA warpgroups at most 240 (``warpgroup_reg_alloc<MmaRegisterRequirement>``,
#: ``cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp:148``, ``..._cooperative.hpp:137``); the
#: warpspecialized kernel sets none, so the hardware's 255. A tile whose accumulators alone exceed this
#: (``RegsPerThread``, ``..._pingpong.hpp:143``) compiles but spills: on the H200, 128x256 pingpong ran 15-16x
#: slower than 128x256 cooperative (docs/benchmarks/2026-11-30-h200-l1003-fold.md).
MMA_REGISTERS = {Schedule.cooperative: 240, Schedule.pingpong: 240, Schedule.warpspecialized: 255}
#: Threads that share one tile's accumulators: two warpgroups in the cooperative kernel, one otherwise.
MMA_THREADS = {Schedule.cooperative: 256, Schedule.pingpong: 128, Schedule.warpspecialized: 128}

#: Epilogue tile M picked by ``EpilogueTileAuto``:
#: ``cutlass/epilogue/collective/builders/sm90_builder.inl:119`` (cooperative: min(128, M)) and ``:125``
#: (warp-specialized and pingpong: min(64, M)).
COOPERATIVE_EPI_TILE_M = 128
WARPSPECIALIZED_EPI_TILE_M = 64
#: Epilogue tile N: gcd(min(32, N), N) for 16- and 32-bit D (``sm90_builder.inl:120`` and ``:124-126``).
EPI_TILE_N = 32

#: Tile N: a multiple of 8 from 8 to 256. What each piece of the kernel asks of it:
#: - the wgmma atom: ``ss_op_selector`` (``cute/arch/mma_sm90.hpp:366``) tries N from 256 down and stops at
#:   ``static_assert(Tile_N % 8 == 0, "Tile_N must be a multiple of 8.")`` (``:525``, and the same assert in every
#:   dtype branch); 256 is the widest wgmma. N = 24, 40, 48, 56, 72, … take a narrower atom repeated (their own
#:   atoms need ``CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED``, which ucutlass does not set): legal, as the selector runs.
#: - B's shared-memory tile: ``ss_smem_selector`` (``cutlass/gemm/collective/builders/sm90_common.inl:280``
#:   ``"BLK_MN0 must be a multiple of 8."``); an MN-major B of N = 8 takes the interleaved atom (``:293``).
#: - the epilogue: ``EpilogueTileAuto`` takes epilogue tile N = gcd(min(32, N), N) (``sm90_builder.inl:120``/``:126``),
#:   a multiple of 8 when N is; the accumulator copy atom needs epilogue tile N % 8 == 0 (``sm90_builder.inl:324-333``
#:   ``CopyAtomC``: SM90_U32x4_STSM_N for N % 16 == 0, SM90_U32x2_STSM_N for N % 8 == 0, else "CopyAtomC can't be
#:   void"), and so do the smem store atoms of a row- or column-major D (``epilogue/collective/builders/
#:   sm90_common.inl:45-60``: SM90_U16x8/U16x4_STSM_T, SM90_U32x4/U32x2_STSM_N); the smem layout atoms of C and D
#:   divide an epilogue tile N of 8 (16-bit: the 8-wide interleaved K atom; f32: 8 = the 32-byte swizzle atom).
#: - but not N = 24: its epilogue tile is 24 wide, so each thread's fragment is 128·24/256 = 12 (64·24/128 pingpong)
#:   accumulators, which the 16-bit stmatrix atoms do not split into (``sm90_epilogue_tma_warpspecialized.hpp:626``
#:   ``"Fragment size does not vectorize properly"``; nvcc 13.0 on 128x24x128). Every other N has an epilogue tile N
#:   of 8, 16 or 32 (the gcd above).
#: With ``swap_ab`` the tile's N runs along the problem's M (the decode tokens), where 8, 16, 32 and 64 fit.
#: A narrow N also meets the shared-memory layout rule (``sm90.smem-layout``, :func:`stage_slices`).
TILE_N_MULTIPLE = 8
TILE_N_MAX = 256
TILE_N_EXCLUDED = (24,)
TILE_NS = tuple(n for n in range(TILE_N_MULTIPLE, TILE_N_MAX + 1, TILE_N_MULTIPLE) if n not in TILE_N_EXCLUDED)

#: ``swap_ab = auto`` swaps where M is known to be at most this: a dispatch kernel ``when M <= 64`` or less, or a
#: binding whose workloads all have M <= 64. There the 64-row tiles a non-swapped kernel needs give N/64 CTAs for 132
#: SMs (32 at N = 4096), each streaming all of K; swapped, the weight's N fills 128-row cooperative tiles (stream-K and
#: split-K included) and the tokens a narrow tile N (docs/benchmarks/2026-11-29-h200-gemm-dispatch.md, decode rows).
SWAP_AB_AUTO_MAX_M = 64

#: Schedules of this target (``auto`` resolves to one of the others, :func:`resolve_schedule`).
SCHEDULES = (Schedule.auto, Schedule.cooperative, Schedule.pingpong, Schedule.warpspecialized,
             Schedule.cooperative_fp8_fastaccum, Schedule.pingpong_fp8_fastaccum, Schedule.warpspecialized_fp8_fastaccum)

#: Element types of a and b (wgmma: f16/bf16, tf32, e4m3/e5m2; ``sm90_common.inl`` ``is_input_fp8``), and of
#: c, d and the epilogue's inputs (ucutlass's epilogues read and write 16- and 32-bit floats).
AB_DTYPES = (DType.bf16, DType.f16, DType.f32, DType.f8e4m3, DType.f8e5m2)
EPILOGUE_DTYPES = (DType.bf16, DType.f16, DType.f32)

#: Blockwise FP8 scaling (``cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp``):
#: the scale granularity K must divide tile K (``:125``) and, with the 32-deep FP8 wgmma, be a multiple of
#: 4 x 32 = 128 (``:129`` "ScalePromotionInterval must be a multiple of 4") no smaller than tile K (``:130``),
#: so tile K equals the granularity K; the granularities M and N divide tile M and N (``:154-155``).
BLOCKWISE_K_MULTIPLE = 128
#: ElementBlockScale is the accumulator type, f32 (``:203`` "ElementAccumulator and ElementBlockScale should be
#: same datatype"); bytes of one scale in shared memory per stage (``compute_stage_count_with_blockwise_scale``,
#: ``cutlass/gemm/collective/builders/sm90_gmma_builder.inl:88-106``).
BLOCK_SCALE_BYTES = 4

#: Rule codes and what each checks (the card, docs/DSL.md, lists them).
RULES: dict[str, str] = {
    "sm90.schedule": "schedule is auto, cooperative, pingpong or warpspecialized (the sm100 ones are not)",
    "sm90.mixed-input": "a and b have the same dtype (mixed-input GEMM comes later)",
    "sm90.accum": "accum is f32 (f16 only with f16 a and b)",
    "sm90.tf32-k-major": "f32 a and b (tf32 wgmma) are both K-major",
    "sm90.cooperative-tile-m": "cooperative: tile M is 128 or 256",
    "sm90.pingpong-tile-m": "pingpong: tile M is 64 or 128",
    "sm90.warpspecialized-tile-m": "warpspecialized: tile M is 64 or 128",
    "sm90.tile-n": "tile N is a multiple of 8 from 8 to 256, except 24",
    "sm90.swap-ab": "swap_ab = true: not with batch dims or blockwise scales (yet)",
    "sm90.accumulator-registers": "tile M x N accumulators per MMA thread fit its registers (240; 255 warpspecialized)",
    "sm90.tile-k": "tile K x element bytes is 64, 128 or 256",
    "sm90.cluster-shape": "cluster M and N in 1, 2, 4, 8 and cluster K = 1",
    "sm90.cluster-size": "cluster M x N <= 8",
    "sm90.stream-k-schedule": "scheduler stream_k needs schedule cooperative",
    "sm90.split-k-scheduler": "split_k > 1 and reduction_mode nondeterministic need scheduler stream_k",
    "sm90.split-k-range": "split_k <= the K tiles of the problem (when extents are given)",
    "sm90.swizzle": "swizzle is 1, 2, 4 or 8",
    "sm90.stages-min": "stages >= 2",
    "sm90.smem": "explicit stages fit in 227 KiB of shared memory",
    "sm90.smem-auto": "stages = auto fits at least 2 stages",
    "sm90.smem-layout": "each swizzled shared-memory tile (a, b, c, d, aux) can be sliced by stage (small tile N)",
    "sm90.align": "contiguous extents are multiples of the elements per access (when extents are given)",
    "sm90.dtype": "a and b are bf16, f16, f32, f8e4m3 or f8e5m2; c, d and epilogue inputs bf16, f16 or f32",
    "sm90.fp8-k-major": "f8e4m3/f8e5m2 a and b are both K-major",
    "sm90.fp8-align": "f8e4m3/f8e5m2 a and b are loaded 16 bytes at a time (alignment auto)",
    "sm90.fastaccum": "the *_fp8_fastaccum schedules need f8e4m3/f8e5m2 a and b",
    "sm90.scale-dtype": "scale_a and scale_b are f32",
    "sm90.blockwise-fp8": "blockwise scales need f8e4m3/f8e5m2 a and b",
    "sm90.blockwise-pair": "blockwise scale_a and scale_b come together, with the same K block",
    "sm90.blockwise-schedule": "blockwise scales run cooperative or pingpong (not warpspecialized or fastaccum)",
    "sm90.blockwise-tile": "blockwise: tile K = the K block (a multiple of 128); M and N blocks divide the tile",
    "sm90.align-cp-async": "alignment below 16 bytes on a or b (cp.async mainloop): >= 4 bytes, cluster 1x1x1",
    "sm90.align-epilogue": "alignment below 16 bytes on c or d (no-smem epilogue): d = alpha*acc + beta*c only",
}

# --- helpers ---------------------------------------------------------------------------------------------


def _check_accumulator_registers(kernel, schedule: Schedule, auto_note: str) -> list[Diagnostic]:
    """``sm90.accumulator-registers``: the tile's accumulators per MMA thread, against :data:`MMA_REGISTERS`."""
    tile_m, tile_n, _ = kernel.tile
    threads, budget = MMA_THREADS[schedule], MMA_REGISTERS[schedule]
    regs = tile_m * tile_n * max(kernel.accum.bytes, 1) // (threads * 4)
    if regs <= budget:
        return []

    def fits(m: int, n: int) -> bool:
        return m * n * max(kernel.accum.bytes, 1) // (threads * 4) <= budget

    tile_ms = COOPERATIVE_TILE_M if schedule is Schedule.cooperative else WARPSPECIALIZED_TILE_M
    widest = max((n for n in TILE_NS if n < tile_n and fits(tile_m, n)), default=None)
    valid = [f"{m}x{tile_n}x{kernel.tile[2]}" for m in tile_ms if m < tile_m and fits(m, tile_n)]
    valid += [f"{tile_m}x{widest}x{kernel.tile[2]}"] if widest else []
    hint = ("; schedule cooperative splits it over two warpgroups" if schedule is not Schedule.cooperative else "")
    return [_diag("sm90.accumulator-registers",
                  f"tile {_spell(kernel.tile)} with schedule {schedule.value}{auto_note}: its {kernel.accum.value} "
                  f"accumulators take {regs} registers per thread of the {threads} that hold them, over the "
                  f"{budget} a thread of an MMA warpgroup gets, so the kernel would spill (it compiles, and runs "
                  f"many times slower){hint}", _pos(kernel, "tile"), tuple(valid))]


def _with_tile_m(tile, tile_ms) -> tuple[str, ...]:
    """The tiles that differ from ``tile`` only in an allowed M (what a tile-M rule's error lists as valid)."""
    return tuple(f"{m}x{tile[1]}x{tile[2]}" for m in tile_ms)


def resolve_schedule(kernel: GemmKernel) -> Schedule:
    """The schedule a kernel runs: ``auto`` becomes cooperative when tile M >= 128 and M % 128 == 0, else pingpong.

    Raises:
        ValueError: the schedule or the tile is still an open choice.
    """
    _common.require_concrete_schedule(kernel)
    if kernel.schedule is not Schedule.auto:
        return kernel.schedule
    tile_m = kernel.tile[0]
    return Schedule.cooperative if tile_m >= 128 and tile_m % 128 == 0 else Schedule.pingpong


def resolve_swap_ab(kernel: GemmKernel, m_max: int | None = None) -> bool:
    """Whether the kernel computes Dᵀ = B·Aᵀ: ``true``/``false`` as written; ``auto`` is true where M is known to be
    at most :data:`SWAP_AB_AUTO_MAX_M` (the kernel's ``when M <= B``, or ``m_max``, the largest M of its calls) and the
    kernel can be swapped (no batch dims, no blockwise scales: ``sm90.swap-ab``), else false.

    Raises:
        ValueError: ``swap_ab`` is still an open choice.
    """
    if isinstance(kernel.swap_ab, Choice):
        raise ValueError(f"kernel {kernel.name!r}: swap_ab is an open choice; resolve it first")
    if kernel.swap_ab is not None:
        return bool(kernel.swap_ab)
    when = kernel.when[1] if kernel.when is not None and kernel.when[0] == "M" else None
    bounds = [b for b in (when, m_max) if b is not None]
    return bool(bounds) and min(bounds) <= SWAP_AB_AUTO_MAX_M and not kernel.batch and not kernel.blockwise


def mma_view(kernel: GemmKernel) -> GemmKernel:
    """The kernel as CUTLASS builds it: :func:`ucutlass.ir.transposed` when it swaps AB (the problem's b is CUTLASS's
    A, D is column-major, a bias a column broadcast …), else the kernel itself. The tile, schedule and shared-memory
    rules and the templates read this view; the alignment rules read the problem's (the same memory either way)."""
    return transposed(kernel) if resolve_swap_ab(kernel) else kernel


def _check_swap_ab(kernel: GemmKernel) -> list[Diagnostic]:
    """``sm90.swap-ab``: what a swapped kernel cannot be yet (written ``swap_ab = true``; ``auto`` does not swap these)."""
    if kernel.swap_ab is not True:
        return []
    out: list[Diagnostic] = []
    if kernel.batch:
        out.append(_diag("sm90.swap-ab", f"swap_ab = true with batch dims [{', '.join(kernel.batch)}]: a swapped "
                         "batched GEMM is not supported yet (a shared b would be CUTLASS's A, which has no stride-0 "
                         "batch mode here); use swap_ab = false (or auto)", _pos(kernel, "swap_ab"), ("false", "auto")))
    if kernel.blockwise:
        out.append(_diag("sm90.swap-ab", "swap_ab = true with blockwise scales: the blockwise FP8 mainloop with the "
                         "scales exchanged (1 x 128 blocks on CUTLASS's B) is not supported yet; use swap_ab = false "
                         "(or per-tensor scales)", _pos(kernel, "swap_ab"), ("false", "auto")))
    return out


def epilogue_tile(kernel: GemmKernel) -> tuple[int, int]:
    """The epilogue subtile (M, N) of ``EpilogueTileAuto`` (``sm90_builder.inl:114-132``)."""
    tile_m, tile_n, _ = kernel.tile
    cooperative = resolve_schedule(kernel).base is Schedule.cooperative
    epi_m = min(COOPERATIVE_EPI_TILE_M if cooperative else WARPSPECIALIZED_EPI_TILE_M, tile_m)
    return epi_m, math.gcd(min(EPI_TILE_N, tile_n), tile_n)


def _epilogue_stages(kernel: GemmKernel) -> tuple[int, int, bool]:
    """(StagesC, StagesD, ReuseSmem) of ``sm90_get_tma_dispatch_policy`` (``sm90_builder.inl:66-86``)."""
    tile_m, tile_n, _ = kernel.tile
    epi_m, epi_n = epilogue_tile(kernel)
    epi_tiles = math.ceil(tile_m / epi_m) * math.ceil(tile_n / epi_n)
    c_bits = kernel.c.dtype.bits if kernel.c is not None else 0  # ElementC = void -> sizeof_bits 0
    d_bits = kernel.d.dtype.bits
    reuse = c_bits == d_bits and d_bits > 8
    stages_d = min(epi_tiles, 2)
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse else min(epi_tiles, 4)
    return stages_c, stages_d, reuse


def _epilogue_tensor_bytes(kernel: GemmKernel) -> tuple[int, int]:
    """(sizeof(Epilogue::TensorStorage), its alignment): the C/D staging tiles plus the EVT nodes' smem."""
    epi_m, epi_n = epilogue_tile(kernel)
    stages_c, stages_d, reuse = _epilogue_stages(kernel)

    def tile_align(dims: tuple[str, ...], layout: Layout, dtype: DType) -> int:
        run = epi_n if _contiguous(dims, layout) == "N" else epi_m
        return _swizzle_alignment(run * dtype.bytes)

    d, c = kernel.d, kernel.c
    d_bytes = epi_m * epi_n * (stages_c if reuse else stages_d) * d.dtype.bytes
    align = tile_align(d.dims, d.layout, d.dtype)
    if c is None:
        collective = d_bytes
    else:
        c_bytes = epi_m * epi_n * stages_c * c.dtype.bytes
        align = max(align, tile_align(c.dims, c.layout, c.dtype))
        collective = max(c_bytes, d_bytes) if reuse else _round_up(c_bytes, align) + d_bytes
    fusion = 0
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.row_vector:  # Sm90RowBroadcast: array_aligned<T, tile N>, 16-aligned
            fusion += _round_up(kernel.tile[1] * inp.dtype.bytes, 16)
        elif inp.kind is EpilogueInputKind.matrix:  # Sm90AuxLoad: epilogue tile x StagesC, swizzle-aligned
            aux_align = tile_align(inp.dims, inp.layout, inp.dtype)
            fusion = _round_up(fusion, aux_align) + epi_m * epi_n * stages_c * inp.dtype.bytes
            align = max(align, aux_align)
        # col_vector (Sm90ColBroadcast) and scalar (Sm90ScalarBroadcast) use no shared memory
    for out in kernel.epilogue_outputs:
        if out.kind is EpilogueInputKind.matrix:  # Sm90AuxStore: epilogue tile x StagesD (AuxStoreDescriptor)
            aux_align = tile_align(out.dims, out.layout, out.dtype)
            fusion = _round_up(fusion, aux_align) + epi_m * epi_n * stages_d * out.dtype.bytes
            align = max(align, aux_align)
        # Sm90ColReduction / Sm90RowReduction (Stages = 0): no storage of their own, they reduce through
        # the collective's D buffer (sm90_visitor_store_tma_warpspecialized.hpp, "smem_buffer")
    return _round_up(collective + max(fusion, 1), align), align  # an empty fusion storage still takes 1 byte


def epilogue_smem_bytes(kernel: GemmKernel) -> int:
    """``sizeof(CollectiveEpilogue::SharedStorage)``: what ``StageCountAutoCarveout`` reserves.

    The tensor storage (C/D staging tiles of the epilogue tile, ``StagesC``/``StagesD`` deep, plus bias rows
    and residual tiles) and the C load pipeline's barriers (16 bytes per C stage), rounded to the
    smem swizzle alignment (``cutlass/epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp:161-229``).
    """
    _require_concrete(kernel)
    tensors, align = _epilogue_tensor_bytes(kernel)
    stages_c, _, _ = _epilogue_stages(kernel)
    return _round_up(tensors + PIPELINE_BARRIER_BYTES_PER_STAGE * stages_c, align)


def stage_bytes(kernel: GemmKernel) -> int:
    """Bytes of one mainloop stage: an M x K tile of A and an N x K tile of B (with blockwise scales, also the
    tile's ScaleMsPerTile + ScaleNsPerTile f32 scales, ``compute_stage_count_with_blockwise_scale``)."""
    tile_m, tile_n, tile_k = kernel.tile
    scales = 0
    if kernel.blockwise and kernel.scale_a is not None and kernel.scale_b is not None:
        gm, gn = max(kernel.scale_a.block[0], 1), max(kernel.scale_b.block[0], 1)
        scales = BLOCK_SCALE_BYTES * (tile_m // gm + tile_n // gn)
    return tile_m * tile_k * kernel.a.dtype.bytes + tile_n * tile_k * kernel.b.dtype.bytes + scales


def auto_stages(kernel: GemmKernel) -> int:
    """The stage count ``stages = auto`` gets: CUTLASS's ``compute_stage_count_or_override`` for
    ``StageCountAutoCarveout`` (``sm90_gmma_builder.inl:69-86``):
    (capacity - round128(epilogue SharedStorage)) // (round128(stage bytes) + 16).
    """
    _require_concrete(kernel)
    capacity = SMEM_CAPACITY_BYTES // STAGE_ALIGNMENT_BYTES * STAGE_ALIGNMENT_BYTES
    carveout = _round_up(epilogue_smem_bytes(kernel), STAGE_ALIGNMENT_BYTES)
    per_stage = _round_up(stage_bytes(kernel), STAGE_ALIGNMENT_BYTES) + PIPELINE_BARRIER_BYTES_PER_STAGE
    return (capacity - carveout) // per_stage


def mainloop_stages(kernel: GemmKernel) -> int:
    """The mainloop's pipeline depth: ``stages`` when given, else what ``auto`` picks (:func:`auto_stages`)."""
    _require_concrete(kernel)
    return kernel.stages if kernel.stages is not None else auto_stages(kernel)


def smem_bytes(kernel: GemmKernel, stages: int | None = None) -> int:
    """``sizeof(GemmKernel::SharedStorage)``: the dynamic shared memory the kernel launches with.

    Cooperative and pingpong kernels keep the epilogue and mainloop tensors side by side after the
    pipeline barriers and the tile scheduler storage
    (``cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp`` and ``..._pingpong.hpp``,
    ``struct SharedStorage``); the non-persistent warpspecialized kernel overlaps them in a union
    (``sm90_gemm_tma_warpspecialized.hpp``).

    Args:
        kernel: a concrete kernel.
        stages: mainloop stages; None means :func:`mainloop_stages`.
    """
    _require_concrete(kernel)
    stages = mainloop_stages(kernel) if stages is None else stages
    epi_tensors, epi_align = _epilogue_tensor_bytes(kernel)
    stages_c, _, _ = _epilogue_stages(kernel)
    align = max(128, epi_align)
    mainloop = stages * stage_bytes(kernel)
    barriers = PIPELINE_BARRIER_BYTES_PER_STAGE * (stages + stages_c)  # mainloop + epilogue C load pipelines
    schedule = resolve_schedule(kernel).base
    if schedule is Schedule.warpspecialized:
        return _round_up(_round_up(max(mainloop, epi_tensors), align) + barriers, align)
    barriers += 16  # load_order: OrderedSequenceBarrier<1, 2>
    if schedule is Schedule.pingpong:
        barriers += 32  # math_wg_order: OrderedSequenceBarrier<2, 2>
    header = barriers + 16  # alignas(16) TileSchedulerStorage
    return _round_up(_round_up(header, align) + epi_tensors + mainloop, align)


def max_stages(kernel: GemmKernel) -> int:
    """The most mainloop stages whose :func:`smem_bytes` fit in :data:`SMEM_CAPACITY_BYTES` (0 if none)."""
    n = 0
    while smem_bytes(kernel, n + 1) <= SMEM_CAPACITY_BYTES:
        n += 1
    return n


# --- swizzled shared-memory tiles ---------------------------------------------------------------------------

#: The GMMA shared-memory atoms (``cute/atom/mma_traits_sm90_gmma.hpp``, ``Layout_K_SW128_Atom`` …) are 8 rows of a
#: 128-, 64-, 32- or 16-byte contiguous run; ``ss_smem_selector`` (``cutlass/gemm/collective/builders/sm90_common.inl:
#: 273-319``) takes the widest whose run divides the tile's contiguous extent, for A and B (mainloop) and for C, D and
#: the epilogue's [M, N] tensors (``sm90_get_epilogue_smem_swizzle_layout_atom``, ``sm90_builder.inl:90-110``).
SWIZZLE_RUN_BYTES = (128, 64, 32, 16)
SWIZZLE_ATOM_ROWS = 8


def swizzle_modes(rows: int, run: int, stages: int, elem_bytes: int) -> tuple[int, int, int]:
    """The modes ``tile_to_shape`` lays the atoms out in: (rows / 8, run / atom run, stages), ``rows`` being the
    tile's extent across its contiguous dim and ``run`` the extent along it (K-major (N, K) and MN-major (K, N) alike:
    ``sm90_mma_tma_gmma_ss_warpspecialized.hpp:128-135`` and ``sm90_epilogue_tma_warpspecialized.hpp:161-168`` tile
    the contiguous dim's atoms after the other's)."""
    width = next((b // elem_bytes for b in SWIZZLE_RUN_BYTES if run % (b // elem_bytes) == 0), run)
    return rows // SWIZZLE_ATOM_ROWS, run // width, stages


def stage_slices(rows: int, run: int, stages: int, elem_bytes: int) -> bool:
    """Whether CuTe can slice one stage out of the swizzled shared-memory tile.

    The atoms' swizzle functors (Swizzle<B, 4, 3>, B = 3, 2, 1, 0 for 128- to 16-byte runs) act on element offsets
    and repeat every 2^(B+7) elements, which is ``elem_bytes`` atoms. Slicing a stage (``SmemLayoutB{}(_,_,0)``,
    ``sm90_mma_tma_gmma_ss_warpspecialized.hpp:188``, and the epilogue's ``sD(_,_,index)``) composes that period with
    the layout's modes in order (the epilogue's C, D and aux tiles are modelled alike: no failure of theirs alone was
    seen, N = 24 fails earlier, ``sm90.tile-n``), and a mode that neither divides what is left of the period nor is
    divided by it fails ``static_assert ... "Shape Divisibility Condition"`` / ``"Stride Divisibility Condition"``
    (``cute/layout.hpp:1101``, ``composition_impl``). In words: a 16-bit tile of 8 rows per 128-byte run needs an
    even count in its first mode above 1 (rows / 8, then run / 64, then stages); 32-bit needs a multiple of 4; 8-bit
    anything; a last mode may also end inside the period (a whole tile shorter than it). Found by nvcc 13.0 on
    CUTLASS 4.2: 128x8x64 bf16 fails with 13 stages and passes with 12, 128x24x64 fails at any count, 128x8x128 and
    128x16x64 pass (the probes are in tests/test_swap_ab.py, ``STAGE_SLICE_PROBES``).
    """
    period = elem_bytes  # in atoms
    modes = [size for size in swizzle_modes(rows, run, stages, elem_bytes) if size > 1]
    for i, size in enumerate(modes):
        if period == 1 or size % period == 0:
            return True
        if period % size == 0:
            period //= size
            continue
        return size < period and i == len(modes) - 1  # the last mode may end inside the period, not cross it
    return True  # the whole tile is shorter than one period: nothing is sliced inside it


def smem_tiles(view: GemmKernel, stages: int | None = None) -> list[tuple[str, int, int, int, DType]]:
    """Every swizzled shared-memory tile of a kernel as CUTLASS builds it (:func:`mma_view`): (name, rows, run,
    stages, dtype) of A and B (``stages``: the mainloop's, default :func:`mainloop_stages`) and, with the TMA
    epilogue, of C, D and the epilogue's [M, N] inputs (StagesC) and outputs (StagesD) over the epilogue tile."""
    tile_m, tile_n, tile_k = view.tile
    stages = mainloop_stages(view) if stages is None else stages
    out = []
    for op, mn in ((view.a, tile_m), (view.b, tile_n)):
        rows, run = (mn, tile_k) if op.contiguous_dim == "K" else (tile_k, mn)
        out.append((op.name, rows, run, stages, op.dtype))
    if uses_no_smem_epilogue(view):
        return out
    epi_m, epi_n = epilogue_tile(view)
    stages_c, stages_d, reuse = _epilogue_stages(view)

    def add(name: str, dims: tuple[str, ...], layout: Layout, dtype: DType, n: int) -> None:
        rows, run = (epi_m, epi_n) if _contiguous(dims, layout) == "N" else (epi_n, epi_m)
        out.append((name, rows, run, n, dtype))

    add(view.d.name, view.d.dims, view.d.layout, view.d.dtype, stages_c if reuse else stages_d)
    if view.c is not None:
        add(view.c.name, view.c.dims, view.c.layout, view.c.dtype, stages_c)
    for inp in view.epilogue_inputs:
        if inp.kind is EpilogueInputKind.matrix:
            add(inp.name, inp.dims, inp.layout, inp.dtype, stages_c)
    for o in view.epilogue_outputs:
        if o.kind is EpilogueInputKind.matrix:
            add(o.name, o.dims, o.layout, o.dtype, stages_d)
    return out


def _slices(view: GemmKernel, stages: int | None = None) -> bool:
    """Whether every shared-memory tile of ``view`` (:func:`smem_tiles`) can be sliced by stage."""
    return all(stage_slices(rows, run, n, dtype.bytes) for _, rows, run, n, dtype in smem_tiles(view, stages))


def _check_smem_layout(kernel: GemmKernel, view: GemmKernel, swap_note: str) -> list[Diagnostic]:
    """``sm90.smem-layout``: every swizzled shared-memory tile can be sliced by stage (:func:`stage_slices`)."""
    bad = [t for t in smem_tiles(view) if not stage_slices(t[1], t[2], t[3], t[4].bytes)]
    if not bad:
        return []
    name, rows, run, stages, dtype = bad[0]
    tile_m, tile_n, tile_k = kernel.tile
    user = SWAPPED_NAMES.get(name, name) if view is not kernel else name
    valid: list[str] = []
    if name in ("a", "b") and kernel.stages is None:  # a stage count that slices (the epilogue's do not change)
        fit = next((n for n in range(mainloop_stages(view) - 1, MIN_STAGES - 1, -1) if _slices(view, n)), None)
        valid += [f"stages = {fit}"] if fit else []
    for shape in [(tile_m, n, tile_k) for n in (tile_n + 8, tile_n - 8, 16, 32, 64)] + \
            [(tile_m, tile_n, k) for k in (tile_k * 2, tile_k // 2)]:
        other = dataclasses.replace(kernel, tile=shape)
        if shape != kernel.tile and shape[1] in TILE_NS and not _common.check_tile_k(other, "sm90") \
                and (kernel.stages is not None or auto_stages(mma_view(other)) >= MIN_STAGES) \
                and _slices(mma_view(other)):
            valid.append(_spell(shape))
    what = "a mainloop stage" if name in ("a", "b") else "an epilogue stage"
    modes = swizzle_modes(rows, run, stages, dtype.bytes)
    return [_diag("sm90.smem-layout", f"tile {_spell(kernel.tile)}{swap_note}: {user}'s shared-memory tile is {rows} "
                  f"rows x {run} {dtype.value} per stage, {stages} stages ({what}); its {modes} swizzle-atom modes do not divide the swizzle's period of {dtype.bytes} atoms, so CuTe cannot "
                  "slice out one stage (nvcc: \"Shape Divisibility Condition\", cute/layout.hpp:1101); 16-bit tiles "
                  "need an even atom count first, 32-bit a multiple of 4", _pos(kernel, "tile"),
                  tuple(dict.fromkeys(valid)))]


def uses_cp_async(kernel: GemmKernel) -> bool:
    """True when a or b is aligned to less than 16 bytes: TMA cannot load it, the mainloop is CUTLASS's
    cp.async one (``KernelCpAsyncWarpSpecialized*``, ``sm90_gmma_builder.inl`` "GMMA_CpAsync_WS_SS")."""
    return any(kernel.alignment_of(op.dtype) * op.dtype.bytes < TMA_ALIGNMENT_BYTES for op in (kernel.a, kernel.b))


def uses_no_smem_epilogue(kernel: GemmKernel) -> bool:
    """True when c or d is aligned to less than 16 bytes: TMA cannot store it, the epilogue is CUTLASS's
    ``NoSmemWarpSpecialized`` one (``sm90_builder.inl`` static_assert "C/D Should meet TMA alignment
    requirement" rules out the TMA epilogue)."""
    return any(kernel.alignment_of(op.dtype) * op.dtype.bytes < TMA_ALIGNMENT_BYTES
               for op in (kernel.c, kernel.d) if op is not None)


def literal_scalars(kernel: GemmKernel) -> dict[str, float]:
    """Epilogue scalars with a literal value (``alpha : f32 = 0.5``), by name."""
    return {i.name: i.value for i in kernel.epilogue_inputs
            if i.kind is EpilogueInputKind.scalar and i.value is not None}


def _check_fallback_alignment(kernel: GemmKernel) -> list[Diagnostic]:
    """``sm90.align-cp-async`` and ``sm90.align-epilogue``: what runs when TMA cannot."""
    out: list[Diagnostic] = []
    where = _pos(kernel, "alignment")
    if uses_cp_async(kernel):
        small = [op for op in (kernel.a, kernel.b)
                 if kernel.alignment_of(op.dtype) * op.dtype.bytes < _common.CP_ASYNC_MIN_ALIGNMENT_BYTES]
        if small:
            op = small[0]
            valid = tuple(str(v) for v in ALIGNMENTS if v * op.dtype.bytes >= _common.CP_ASYNC_MIN_ALIGNMENT_BYTES)
            names = " and ".join(o.name for o in small)
            out.append(_diag("sm90.align-cp-async", f"alignment = {kernel.alignment}: {names} "
                             f"({op.dtype.value}) would be read {kernel.alignment_of(op.dtype) * op.dtype.bytes} bytes "
                             "at a time; below 16 bytes a and b load with cp.async, which copies at least 4 bytes "
                             "(CUTLASS: \"Minimum alignment required for cp.async is 4B\"). Where alignment = auto "
                             "chose this, a contiguous extent of a, b or d is odd on some workload and no alignment "
                             "serves it: pad that extent to a multiple of 8 in a pipeline (F.pad) and slice the "
                             "result back", where, valid))
        if tuple(kernel.cluster) != (1, 1, 1):
            out.append(_diag("sm90.align-cp-async", f"alignment = {kernel.alignment} loads a and b with cp.async, "
                             f"which has no cluster multicast: cluster {_spell(kernel.cluster)} must be 1x1x1",
                             _pos(kernel, "cluster"), ("1x1x1",)))
    if uses_no_smem_epilogue(kernel):
        has_tensors = bool(kernel.epilogue_outputs) or any(i.kind is not EpilogueInputKind.scalar
                                                           for i in kernel.epilogue_inputs)
        if has_tensors or linear_combination(kernel.epilogue, literal_scalars(kernel)) is None:
            out.append(_diag("sm90.align-epilogue", f"alignment = {kernel.alignment} stores d below 16 bytes, "
                             "which only CUTLASS's no-smem epilogue does, and it computes d = alpha*acc + beta*c "
                             f"with constant alpha and beta only, not d = {expr_to_text(kernel.epilogue)}; use "
                             "alignment = auto (16 bytes) or that epilogue", where,
                             ("auto",) + tuple(str(v) for v in ALIGNMENTS if v * kernel.d.dtype.bytes >= 16)))
    return out


# --- the rules -------------------------------------------------------------------------------------------


def _check_fp8(kernel: GemmKernel) -> list[Diagnostic]:
    """``sm90.dtype``, ``sm90.fp8-k-major``, ``sm90.fp8-align``, ``sm90.fastaccum``, ``sm90.scale-dtype`` and the
    ``sm90.blockwise-*`` rules (FP8 GEMMs with per-tensor or blockwise scale factors)."""
    out: list[Diagnostic] = []
    a, b = kernel.a, kernel.b
    fp8 = a.dtype.is_fp8 and b.dtype.is_fp8
    for op in kernel.operands:
        valid = AB_DTYPES if op.name in ("a", "b") else EPILOGUE_DTYPES
        if op.dtype not in valid:
            why = (" (an sm100 block-scaled type)" if op.dtype in (DType.e2m1, DType.ue8m0, DType.ue4m3) else
                   " (ucutlass's epilogues write 16- and 32-bit floats)")
            out.append(_diag("sm90.dtype", f"{op.name} is {op.dtype.value}: an sm90 {op.name} is one of "
                             f"{', '.join(v.value for v in valid)}{why}",
                             _pos(kernel, f"{op.name}.dtype"), tuple(v.value for v in valid)))
    for inp in kernel.epilogue_inputs:
        if inp.dtype not in EPILOGUE_DTYPES:
            out.append(_diag("sm90.dtype", f"epilogue input {inp.name} is {inp.dtype.value}; epilogue inputs are "
                             "bf16, f16 or f32", inp.pos, tuple(v.value for v in EPILOGUE_DTYPES)))
    for op in (a, b):
        if op.dtype.is_fp8 and op.contiguous_dim != "K":
            out.append(_diag("sm90.fp8-k-major", f"{op.name} is {op.dtype.value}: 8-bit wgmma reads only K-major "
                             f"tiles, but {op.name} is contiguous in {op.contiguous_dim}; store it K-major "
                             f"({op.name} : {op.dtype.value}[{op.dims[0] if op.dims[0] != 'K' else op.dims[1]}, K] row)",
                             _pos(kernel, f"{op.name}.layout"), ("row" if op.dims[-1] == "K" else "col",)))
    narrow = [op.name for op in (a, b) if op.dtype.is_fp8 and kernel.alignment_of(op.dtype) < TMA_ALIGNMENT_BYTES]
    if narrow:
        out.append(_diag("sm90.fp8-align", f"alignment = {kernel.alignment} with FP8 {' and '.join(narrow)}: "
                         "ucutlass's FP8 mainloops load a and b with TMA only (16 bytes at a time); pad K to a "
                         "multiple of 16", _pos(kernel, "alignment"), ("auto",)))
    if kernel.schedule.fp8_fastaccum and not fp8:
        out.append(_diag("sm90.fastaccum", f"schedule {kernel.schedule.value} is for f8e4m3/f8e5m2 a and b (CUTLASS: "
                         "\"Only FP8 datatypes are compatible with these kernel schedules\"); a is "
                         f"{a.dtype.value}, b is {b.dtype.value}", _pos(kernel, "schedule"),
                         (kernel.schedule.base.value,)))
    for s in kernel.scales:
        if s.dtype is not DType.f32:
            out.append(_diag("sm90.scale-dtype", f"{s.name} is {s.dtype.value}: sm90 scales are f32 (the "
                             "epilogue's compute type; blockwise: ElementBlockScale = the f32 accumulator)",
                             s.pos, ("f32",)))
    if not kernel.blockwise:
        return out
    sa, sb = kernel.scale_a, kernel.scale_b
    where = (sa or sb).pos  # type: ignore[union-attr]
    if not fp8:
        out.append(_diag("sm90.blockwise-fp8", f"blockwise scales need f8e4m3/f8e5m2 a and b (CUTLASS: \"Warp "
                         "Specialized gemm with FP8 Blockwise (Software) Scaling is only compatible with FP8 inputs\"); "
                         f"a is {a.dtype.value}, b is {b.dtype.value}", where, ("f8e4m3", "f8e5m2")))
    if sa is None or sb is None or sa.per_tensor or sb.per_tensor:
        out.append(_diag("sm90.blockwise-pair", "a blockwise scale needs one for the other operand too (the "
                         "mainloop scales A and B blocks together): declare scale_a : f32[M, K/128] and "
                         "scale_b : f32[N/128, K/128]", where, ("scale_a : f32[M, K/128] row",
                                                                "scale_b : f32[N/128, K/128] row")))
        return out
    (gm, gka), (gn, gkb) = sa.block, sb.block
    if gka != gkb:
        out.append(_diag("sm90.blockwise-pair", f"scale_a covers K/{gka} but scale_b K/{gkb}: CUTLASS needs \"SFA "
                         "and SFB ... equivalent SF vector sizes along K\"", sb.pos, (f"K/{gka}",)))
    if kernel.schedule.fp8_fastaccum or resolve_schedule(kernel).base is Schedule.warpspecialized:
        out.append(_diag("sm90.blockwise-schedule", f"schedule {kernel.schedule.value} with blockwise scales: the "
                         "blockwise mainloop runs KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum or "
                         "...PingpongFP8BlockScaledAccum", _pos(kernel, "schedule"), ("auto", "cooperative", "pingpong")))
    tile_m, tile_n, tile_k = kernel.tile
    if gka % BLOCKWISE_K_MULTIPLE or tile_k != gka:
        out.append(_diag("sm90.blockwise-tile", f"tile {_spell(kernel.tile)} with scales over K/{gka}: the blockwise "
                         f"mainloop needs tile K = the scale block K, a multiple of {BLOCKWISE_K_MULTIPLE} (it "
                         "promotes the accumulators once per scale block)", _pos(kernel, "tile"),
                         (f"{tile_m}x{tile_n}x{gka}",) if gka % BLOCKWISE_K_MULTIPLE == 0 else ("K/128",)))
    if tile_m % gm or tile_n % gn:
        out.append(_diag("sm90.blockwise-tile", f"tile {_spell(kernel.tile)}: the scale blocks ({gm} rows of a, {gn} "
                         "rows of b) must divide tile M and tile N (CUTLASS: \"FP8 scaling granularity must evenly "
                         "divide tile shape\")", _pos(kernel, "tile"),
                         tuple(f"{m}x{n}x{tile_k}" for m in (64, 128, 256) for n in (128, 256)
                               if m % gm == 0 and n % gn == 0)))
    return out



def check_kernel(kernel: GemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every sm90 rule a concrete kernel breaks (an empty list when nvcc and the runtime should accept it).

    Args:
        kernel: a kernel without open choices.
        extents: problem extents by dim name (``{"M": 4096, "N": 4096, "K": 4096}``); when given, the
            16-byte alignment of each operand's contiguous dim is checked.

    Returns:
        Diagnostics with codes from :data:`RULES`, positioned at the setting to change.

    Raises:
        ValueError: the kernel still has open choices.
    """
    _require_concrete(kernel)
    if kernel.target is not Target.sm90:
        raise ValueError(f"kernel {kernel.name!r} targets {_spell(kernel.target)}: check it with "
                         "ucutlass.arch.check_kernel, which picks the target's rules")

    out: list[Diagnostic] = []
    a, b = kernel.a, kernel.b
    tile_m, tile_n, tile_k = kernel.tile
    tile = _spell(kernel.tile)

    # element types
    out += _common.check_element_types(kernel, "sm90", "wgmma")
    for op, tag in ((a, "a"), (b, "b")):
        if op.dtype is DType.f32 and op.contiguous_dim != "K":
            k_major = f"[{op.dims[0] if op.dims[0] != 'K' else op.dims[1]}, K] row"
            out.append(_diag("sm90.tf32-k-major", f"{tag} is f32 (tf32 wgmma), which reads only K-major tiles, but "
                             f"{tag} is contiguous in {op.contiguous_dim}: declare {tag} : f32{k_major}",
                             _pos(kernel, f"{tag}.layout"), ("row" if op.dims[-1] == "K" else "col",)))

    # a schedule of another target: the tile rules below would not mean anything
    if kernel.schedule not in SCHEDULES:
        out.append(_diag("sm90.schedule", f"schedule {kernel.schedule.value} is an sm100 schedule; an sm90 kernel "
                         "runs auto, cooperative, pingpong or warpspecialized (or set target = sm100)",
                         _pos(kernel, "schedule"), tuple(s.value for s in SCHEDULES)))
        out += _common.check_tile_k(kernel, "sm90") + _common.check_cluster(kernel, "sm90")
        out += _common.check_scheduler_arguments(kernel, extents, "sm90")
        out += _common.check_stages_min(kernel, "sm90", "TMA")
        return out + _common.check_alignment(kernel, extents, "sm90")

    # FP8 inputs, their schedules and scale factors; what a swapped kernel cannot be yet
    out += _check_fp8(kernel)
    out += _check_swap_ab(kernel)
    # the tile, schedule and shared-memory rules read the kernel as CUTLASS builds it (swap_ab: Dᵀ = B·Aᵀ)
    mma = mma_view(kernel) if not any(d.code == "sm90.swap-ab" for d in out) else kernel
    swap_note = " (swap_ab: the tile's M runs along N, its N along M)" if mma is not kernel else ""

    # tile and schedule (an FP8 fast-accumulation schedule tiles as its base schedule)
    schedule = resolve_schedule(kernel).base
    auto_note = f" (schedule auto resolves to {schedule.value})" if kernel.schedule is Schedule.auto else ""
    tile_ok = True
    if schedule is Schedule.cooperative and tile_m not in COOPERATIVE_TILE_M:
        out.append(_diag("sm90.cooperative-tile-m", f"tile {tile} with schedule cooperative{auto_note}: the "
                         "cooperative kernel needs tile M >= 128 and its 128-row epilogue tile must divide M",
                         _pos(kernel, "tile"), _with_tile_m(kernel.tile, COOPERATIVE_TILE_M)))
        tile_ok = False
    elif schedule in (Schedule.pingpong, Schedule.warpspecialized) and tile_m not in WARPSPECIALIZED_TILE_M:
        if tile_m > max(WARPSPECIALIZED_TILE_M):
            why = (f"one warpgroup owns a whole {tile_m}-row tile, too many accumulators per thread; use "
                   "schedule cooperative for tile M 256")
        else:
            why = "its 64-row epilogue tile must divide M (and wgmma M is a multiple of 64)"
        out.append(_diag(f"sm90.{schedule.value}-tile-m", f"tile {tile} with schedule {schedule.value}"
                         f"{auto_note}: {why}", _pos(kernel, "tile"), _with_tile_m(kernel.tile, WARPSPECIALIZED_TILE_M)))
        tile_ok = False
    if tile_n not in TILE_NS:
        why = ("its 24-wide epilogue tile gives each thread 12 accumulators, which do not vectorize (CUTLASS: "
               "\"Fragment size does not vectorize properly\")" if tile_n in TILE_N_EXCLUDED else
               "wgmma N steps by 8; one wgmma is at most 256 wide")
        rule = (f"a multiple of {TILE_N_MULTIPLE} from {TILE_N_MULTIPLE} to {TILE_N_MAX}, except "
                + ", ".join(map(str, TILE_N_EXCLUDED)))
        out.append(_diag("sm90.tile-n", f"tile {tile}{swap_note}: tile N {tile_n} is not {rule} ({why})",
                         _pos(kernel, "tile"), TILE_NS))
        tile_ok = False
    if tile_ok:
        out += _check_accumulator_registers(kernel, schedule, auto_note)
    tile_k_diags = _common.check_tile_k(kernel, "sm90")
    out += tile_k_diags
    tile_ok = tile_ok and not tile_k_diags

    # cluster
    out += _common.check_cluster(kernel, "sm90")

    # tile scheduler
    if kernel.scheduler is TileScheduler.stream_k and schedule is not Schedule.cooperative:
        why = ("Ping-pong kernel does not currently support stream-K scheduler" if schedule is Schedule.pingpong
               else "TMA warp-specialized kernel does not support specializing the tile scheduler")
        out.append(_diag("sm90.stream-k-schedule", f"scheduler stream_k with schedule {schedule.value}{auto_note}: "
                         f"CUTLASS says \"{why}\"; stream_k needs schedule cooperative",
                         _pos(kernel, "scheduler"), ("persistent",)))

    # run-time tile-scheduler arguments
    out += _common.check_scheduler_arguments(kernel, extents, "sm90")

    # stages and shared memory (only meaningful for a tile the rules above accept)
    stages_min = _common.check_stages_min(kernel, "sm90", "TMA")
    out += stages_min
    if tile_ok and not stages_min:
        if kernel.stages is None:
            n = auto_stages(mma)
            if n < MIN_STAGES:
                out.append(_diag("sm90.smem-auto", f"tile {tile} is too large for shared memory: one mainloop "
                                 f"stage is {_kib(stage_bytes(mma))} and the epilogue takes "
                                 f"{_kib(epilogue_smem_bytes(mma))}, so stages = auto fits {n} (needs >= "
                                 f"{MIN_STAGES}) in {_kib(SMEM_CAPACITY_BYTES)}", _pos(kernel, "tile")))
        else:
            need = smem_bytes(mma, kernel.stages)
            if need > SMEM_CAPACITY_BYTES:
                most = max_stages(mma)
                fit = f"at most {most} fit" if most >= MIN_STAGES else "not even 2 fit: use a smaller tile"
                out.append(_diag("sm90.smem", f"stages = {kernel.stages} with tile {tile} needs {_kib(need)} of "
                                 f"shared memory ({kernel.stages} x {_kib(stage_bytes(mma))} mainloop + "
                                 f"epilogue); an sm90 block has at most {_kib(SMEM_CAPACITY_BYTES)}: {fit}",
                                 _pos(kernel, "stages"),
                                 ("auto",) + tuple(str(s) for s in range(MIN_STAGES, most + 1))
                                 if most >= MIN_STAGES else ()))

        if not [d for d in out if d.code in ("sm90.smem", "sm90.smem-auto")]:
            out += _check_smem_layout(kernel, mma, swap_note)

    # below 16 bytes: cp.async mainloop, no-smem epilogue
    out += _check_fallback_alignment(kernel)
    # alignment of the contiguous dim, for the extents we know
    return out + _common.check_alignment(kernel, extents, "sm90")
