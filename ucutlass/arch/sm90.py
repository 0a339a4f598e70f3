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
"""

from __future__ import annotations

import math
from typing import Mapping

from ..errors import Diagnostic
from ..ir import DType, EpilogueInputKind, GemmKernel, Layout, Schedule, Target, TileScheduler
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
    "check_kernel", "resolve_schedule", "mainloop_stages", "auto_stages", "max_stages", "smem_bytes",
    "epilogue_smem_bytes", "epilogue_tile", "stage_bytes", "RULES",
    "SMEM_CAPACITY_BYTES", "TMA_ALIGNMENT_BYTES", "MIN_STAGES", "STAGE_ALIGNMENT_BYTES",
    "PIPELINE_BARRIER_BYTES_PER_STAGE", "COOPERATIVE_TILE_M", "WARPSPECIALIZED_TILE_M", "TILE_N_MULTIPLE",
    "TILE_N_MAX", "TILE_K_BYTES", "CLUSTER_EXTENTS", "MAX_CLUSTER_SIZE", "COOPERATIVE_EPI_TILE_M",
    "WARPSPECIALIZED_EPI_TILE_M", "EPI_TILE_N",
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

#: Epilogue tile M picked by ``EpilogueTileAuto``:
#: ``cutlass/epilogue/collective/builders/sm90_builder.inl:119`` (cooperative: min(128, M)) and ``:125``
#: (warp-specialized and pingpong: min(64, M)).
COOPERATIVE_EPI_TILE_M = 128
WARPSPECIALIZED_EPI_TILE_M = 64
#: Epilogue tile N: gcd(min(32, N), N) for 16- and 32-bit D (``sm90_builder.inl:120`` and ``:124-126``).
EPI_TILE_N = 32

#: Tile N: one wgmma is at most 256 wide (``cute/arch/mma_sm90.hpp`` ``ss_op_selector``, which tries N from 256
#: down in steps of 8). wgmma itself allows multiples of 8; ucutlass keeps N a multiple of 16, the set the tuner
#: searches, for which the epilogue uses the full 16-wide stmatrix atom (``sm90_builder.inl:324``
#: ``CopyAtomC``: SM90_U32x4_STSM_N when the epilogue tile N % 16 == 0, the half-width atom otherwise).
TILE_N_MULTIPLE = 16
TILE_N_MAX = 256

#: Schedules of this target (``auto`` resolves to one of the others, :func:`resolve_schedule`).
SCHEDULES = (Schedule.auto, Schedule.cooperative, Schedule.pingpong, Schedule.warpspecialized)

#: Rule codes and what each checks (the card, docs/DSL.md, lists them).
RULES: dict[str, str] = {
    "sm90.schedule": "schedule is auto, cooperative, pingpong or warpspecialized (the sm100 ones are not)",
    "sm90.mixed-input": "a and b have the same dtype (mixed-input GEMM comes later)",
    "sm90.accum": "accum is f32 (f16 only with f16 a and b)",
    "sm90.tf32-k-major": "f32 a and b (tf32 wgmma) are both K-major",
    "sm90.cooperative-tile-m": "cooperative: tile M is 128 or 256",
    "sm90.pingpong-tile-m": "pingpong: tile M is 64 or 128",
    "sm90.warpspecialized-tile-m": "warpspecialized: tile M is 64 or 128",
    "sm90.tile-n": "tile N is a multiple of 16 from 16 to 256",
    "sm90.tile-k": "tile K x element bytes is 64, 128 or 256",
    "sm90.cluster-shape": "cluster M and N in 1, 2, 4, 8 and cluster K = 1",
    "sm90.cluster-size": "cluster M x N <= 8",
    "sm90.stream-k-schedule": "scheduler stream_k needs schedule cooperative",
    "sm90.split-k-scheduler": "split_k > 1 needs scheduler stream_k",
    "sm90.split-k-range": "split_k <= the K tiles of the problem (when extents are given)",
    "sm90.swizzle": "swizzle is 1, 2, 4 or 8",
    "sm90.stages-min": "stages >= 2",
    "sm90.smem": "explicit stages fit in 227 KiB of shared memory",
    "sm90.smem-auto": "stages = auto fits at least 2 stages",
    "sm90.align": "contiguous extent x element bytes is a multiple of 16 (when extents are given)",
}

# --- helpers ---------------------------------------------------------------------------------------------


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


def epilogue_tile(kernel: GemmKernel) -> tuple[int, int]:
    """The epilogue subtile (M, N) of ``EpilogueTileAuto`` (``sm90_builder.inl:114-132``)."""
    tile_m, tile_n, _ = kernel.tile
    cooperative = resolve_schedule(kernel) is Schedule.cooperative
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
    """Bytes of one mainloop stage: an M x K tile of A and an N x K tile of B."""
    tile_m, tile_n, tile_k = kernel.tile
    return tile_m * tile_k * kernel.a.dtype.bytes + tile_n * tile_k * kernel.b.dtype.bytes


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
    schedule = resolve_schedule(kernel)
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


# --- the rules -------------------------------------------------------------------------------------------


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

    # tile and schedule
    schedule = resolve_schedule(kernel)
    auto_note = f" (schedule auto resolves to {schedule.value})" if kernel.schedule is Schedule.auto else ""
    tile_ok = True
    if schedule is Schedule.cooperative and tile_m not in COOPERATIVE_TILE_M:
        out.append(_diag("sm90.cooperative-tile-m", f"tile {tile} with schedule cooperative{auto_note}: the "
                         "cooperative kernel needs tile M >= 128 and its 128-row epilogue tile must divide M",
                         _pos(kernel, "tile"), COOPERATIVE_TILE_M))
        tile_ok = False
    elif schedule in (Schedule.pingpong, Schedule.warpspecialized) and tile_m not in WARPSPECIALIZED_TILE_M:
        if tile_m > max(WARPSPECIALIZED_TILE_M):
            why = (f"one warpgroup owns a whole {tile_m}-row tile, too many accumulators per thread; use "
                   "schedule cooperative for tile M 256")
        else:
            why = "its 64-row epilogue tile must divide M (and wgmma M is a multiple of 64)"
        out.append(_diag(f"sm90.{schedule.value}-tile-m", f"tile {tile} with schedule {schedule.value}"
                         f"{auto_note}: {why}", _pos(kernel, "tile"), WARPSPECIALIZED_TILE_M))
        tile_ok = False
    if tile_n % TILE_N_MULTIPLE or not TILE_N_MULTIPLE <= tile_n <= TILE_N_MAX:
        out.append(_diag("sm90.tile-n", f"tile {tile}: tile N {tile_n} must be a multiple of {TILE_N_MULTIPLE} "
                         f"from {TILE_N_MULTIPLE} to {TILE_N_MAX} (one wgmma is at most 256 wide)",
                         _pos(kernel, "tile"), range(TILE_N_MULTIPLE, TILE_N_MAX + 1, TILE_N_MULTIPLE)))
        tile_ok = False
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
            n = auto_stages(kernel)
            if n < MIN_STAGES:
                out.append(_diag("sm90.smem-auto", f"tile {tile} is too large for shared memory: one mainloop "
                                 f"stage is {_kib(stage_bytes(kernel))} and the epilogue takes "
                                 f"{_kib(epilogue_smem_bytes(kernel))}, so stages = auto fits {n} (needs >= "
                                 f"{MIN_STAGES}) in {_kib(SMEM_CAPACITY_BYTES)}", _pos(kernel, "tile")))
        else:
            need = smem_bytes(kernel, kernel.stages)
            if need > SMEM_CAPACITY_BYTES:
                most = max_stages(kernel)
                fit = f"at most {most} fit" if most >= MIN_STAGES else "not even 2 fit: use a smaller tile"
                out.append(_diag("sm90.smem", f"stages = {kernel.stages} with tile {tile} needs {_kib(need)} of "
                                 f"shared memory ({kernel.stages} x {_kib(stage_bytes(kernel))} mainloop + "
                                 f"epilogue); an sm90 block has at most {_kib(SMEM_CAPACITY_BYTES)}: {fit}",
                                 _pos(kernel, "stages"),
                                 ("auto",) + tuple(str(s) for s in range(MIN_STAGES, most + 1))
                                 if most >= MIN_STAGES else ()))

    # 16-byte alignment of the contiguous dim, for the extents we know
    return out + _common.check_alignment(kernel, extents, "sm90")
