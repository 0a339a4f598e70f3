"""What the sm90 and sm100 rules share: TMA, cluster and tile-scheduler limits, and the helpers they use.

Both targets load A, B, C and the epilogue inputs with TMA, launch thread-block clusters and run the same
persistent / stream-K tile schedulers (SM100's wrap SM90's parameters), so these rules read the same on
both and differ only in the rule-code prefix (``sm90.align`` / ``sm100.align``). Header paths are
relative to the ``nvidia-cutlass==4.2.0.0`` wheel's ``cutlass_library/source/include``.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from ..errors import Diagnostic
from ..ir import Choice, DType, EpilogueInputKind, GemmKernel, Layout, Pos, ReductionMode, TileScheduler

#: TMA needs 16-byte aligned global strides: ``cutlass/gemm/collective/builders/sm90_common.inl:55``
#: ``tma_alignment_bytes = 16`` (SM100's builders check the same through ``sm1xx_gemm_is_aligned``,
#: ``cutlass/gemm/collective/builders/sm1xx_common.inl:369``).
TMA_ALIGNMENT_BYTES = 16

#: The mainloop needs at least two stages: ``cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp:137``
#: and ``cutlass/gemm/collective/sm100_mma_warpspecialized.hpp:188``
#: ``static_assert(DispatchPolicy::Stages >= 2, ...)``.
MIN_STAGES = 2

#: Tile K x element bytes: 64, 128 or 256 bytes, i.e. the 64-byte swizzle atom or one or two 128-byte ones
#: (sm90: ``Layout_K_SW64_Atom`` / ``Layout_K_SW128_Atom``, ``cute/atom/mma_traits_sm90_gmma.hpp:83-84``, chosen by
#: ``ss_smem_selector``, ``sm90_common.inl:302``; sm100: the UMMA atoms of the same widths chosen by
#: ``sm100_smem_selector``, ``cutlass/gemm/collective/builders/sm100_common.inl:79-133``); bf16/f16: K in
#: {32, 64, 128}, f32 (tf32): {16, 32, 64}. CUTLASS also compiles other multiples of the 32-byte MMA K step,
#: but they leave too few stages to pipeline or too small MMA K steps; this practical set is what ucutlass
#: accepts.
TILE_K_BYTES = (64, 128, 256)

#: Cluster extents along M and N: TMA multicast of B along cluster M and of A along cluster N
#: (``sm90_gmma_builder.inl`` ``sm90_cluster_shape_to_tma_atom``; ``sm100_common.inl:199-268``); the tile
#: scheduler divides by them as powers of two (``cutlass/gemm/kernel/tile_scheduler_params.h:91``
#: ``FastDivmodU64Pow2``) and ignores cluster K (``tile_scheduler_params.h:58`` ``cluster_size = m * n``), so
#: cluster K must be 1.
CLUSTER_EXTENTS = (1, 2, 4, 8)

#: At most 8 CTAs in a cluster: the portable cluster size (CUDA C++ Programming Guide, "Thread Block
#: Clusters": "a maximum of 8 thread blocks in a cluster is supported as a portable cluster size"). A B200
#: also launches 16 with a non-portable opt-in; ucutlass stays portable.
MAX_CLUSTER_SIZE = 8

#: max_swizzle_size values of the tile schedulers (``cutlass/gemm/kernel/tile_scheduler_params.h``,
#: get_log_swizzle_size: 1, 2, 4 or 8; ``PersistentTileSchedulerSm100`` and its stream-K variant take the
#: same ``Arguments``, ``cutlass/gemm/kernel/sm100_tile_scheduler.hpp:97``).
SWIZZLE_SIZES = (1, 2, 4, 8)

VALID_CLUSTERS = ("1x1x1", "2x1x1", "1x2x1", "2x2x1", "4x1x1", "1x4x1", "8x1x1", "4x2x1", "2x4x1")

# --- helpers ---------------------------------------------------------------------------------------------


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def spell(value: object) -> str:
    """The `.ucut` spelling of a setting value (``128x128x64``, ``cooperative``, ``4``)."""
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value)
    return getattr(value, "value", None) or str(value)


def pos(kernel: GemmKernel, key: str) -> Pos:
    """Where a setting (``tile``) or an operand attribute (``b.dtype``) is written, else the kernel."""
    found = kernel.setting_pos.get(key) if kernel.setting_pos else None
    if found is None and "." in key:
        op = getattr(kernel, key.split(".", 1)[0], None)
        found = getattr(op, "pos", None)
    return found if found is not None else kernel.pos


def require_concrete(kernel: GemmKernel) -> None:
    if not kernel.is_concrete():
        raise ValueError(f"kernel {kernel.name!r} has open choices {sorted(kernel.choices())}; "
                         "resolve them first (GemmKernel.resolve or arch.legal_combinations)")


def require_concrete_schedule(kernel: GemmKernel) -> None:
    if any(isinstance(v, Choice) for v in (kernel.schedule, kernel.tile, kernel.cluster)):
        raise ValueError(f"kernel {kernel.name!r}: schedule, tile and cluster must be concrete to resolve "
                         "the schedule")


def contiguous(dims: tuple[str, ...], layout: Layout) -> str:
    return dims[-1] if layout is Layout.row else dims[0]


def swizzle_alignment(row_bytes: int) -> int:
    """``alignment_for_swizzle`` of the smem atom chosen for a contiguous run of ``row_bytes``: SW128 -> 1024,
    SW64 -> 512, SW32 -> 256, interleaved -> 128 (``cutlass/detail/layout.hpp:420``: 1 << (B + M + S) of
    ``Swizzle<B, 4, 3>``)."""
    for atom, align in ((128, 1024), (64, 512), (32, 256)):
        if row_bytes % atom == 0:
            return align
    return 128


def diag(code: str, message: str, where: Pos, valid: Iterable = ()) -> Diagnostic:
    return Diagnostic(message, where, tuple(str(v) for v in valid), code=code)


def kib(n: int) -> str:
    return f"{n / 1024:.1f}".rstrip("0").rstrip(".") + " KiB"


def nearest_multiples(extent: int, multiple: int) -> tuple[int, ...]:
    low = extent // multiple * multiple
    return tuple(v for v in (low, low + multiple) if v > 0)


# --- rules both targets share ------------------------------------------------------------------------------


def check_element_types(kernel: GemmKernel, prefix: str, mma: str) -> list[Diagnostic]:
    """``{prefix}.mixed-input`` and ``{prefix}.accum``; ``mma`` names the instruction (wgmma, tcgen05)."""
    out: list[Diagnostic] = []
    a, b = kernel.a, kernel.b
    if a.dtype is not b.dtype and not (a.dtype.is_fp8 and b.dtype.is_fp8):  # e4m3 x e5m2 is one FP8 MMA
        out.append(diag(f"{prefix}.mixed-input", f"a is {a.dtype.value} but b is {b.dtype.value}: a and b must have "
                        "the same dtype (mixed-input GEMM comes later)", pos(kernel, "b.dtype"), (a.dtype.value,)))
    valid_accum = ("f32", "f16") if a.dtype is DType.f16 and b.dtype is DType.f16 else ("f32",)
    if kernel.accum.value not in valid_accum:
        why = (f"{mma} accumulates bf16 and tf32 products in f32 only" if kernel.accum is not DType.bf16
               else f"{mma} has no bf16 accumulator")
        out.append(diag(f"{prefix}.accum", f"accum = {kernel.accum.value} with {a.dtype.value} inputs: {why}",
                        pos(kernel, "accum"), valid_accum))
    return out


def check_tile_k(kernel: GemmKernel, prefix: str) -> list[Diagnostic]:
    """``{prefix}.tile-k``: tile K x element bytes in :data:`TILE_K_BYTES`."""
    tile_k = kernel.tile[2]
    bits = kernel.a.dtype.bits  # 4 for e2m1: two elements per byte
    elem = f"{bits // 8} bytes" if bits >= 8 else "1/2 byte"
    if tile_k * bits // 8 in TILE_K_BYTES:
        return []
    return [diag(f"{prefix}.tile-k", f"tile {spell(kernel.tile)}: tile K {tile_k} x {elem} "
                 f"({kernel.a.dtype.value}) = {tile_k * bits // 8} bytes; it must be 64, 128 or 256 bytes (the 128-byte "
                 "smem swizzle atom)", pos(kernel, "tile"), tuple(n * 8 // bits for n in TILE_K_BYTES))]


def check_cluster(kernel: GemmKernel, prefix: str) -> list[Diagnostic]:
    """``{prefix}.cluster-shape`` (M, N in 1, 2, 4, 8; K = 1) and ``{prefix}.cluster-size`` (<= 8 CTAs)."""
    cm, cn, ck = kernel.cluster
    cluster = spell(kernel.cluster)
    if cm not in CLUSTER_EXTENTS or cn not in CLUSTER_EXTENTS or ck != 1:
        return [diag(f"{prefix}.cluster-shape", f"cluster {cluster}: cluster M and N must be 1, 2, 4 or 8 and "
                     "cluster K must be 1 (TMA multicasts along M and N only)", pos(kernel, "cluster"),
                     VALID_CLUSTERS)]
    if cm * cn > MAX_CLUSTER_SIZE:
        return [diag(f"{prefix}.cluster-size", f"cluster {cluster} has {cm * cn} CTAs; the portable cluster "
                     f"size is at most {MAX_CLUSTER_SIZE}", pos(kernel, "cluster"),
                     ("8x1x1", "4x2x1", "2x4x1", "1x8x1"))]
    return []


def check_scheduler_arguments(kernel: GemmKernel, extents: Mapping[str, int] | None,
                              prefix: str) -> list[Diagnostic]:
    """The run-time tile-scheduler arguments: ``{prefix}.split-k-scheduler``, ``.swizzle``, ``.split-k-range``."""
    out: list[Diagnostic] = []
    if kernel.split_k > 1 and kernel.scheduler is not TileScheduler.stream_k:
        out.append(diag(f"{prefix}.split-k-scheduler", f"split_k = {kernel.split_k} with scheduler "
                        f"{kernel.scheduler.value}: only CUTLASS's stream-K tile scheduler splits K "
                        "(PersistentScheduler has no splits argument); set scheduler = stream_k or split_k = 1",
                        pos(kernel, "split_k"), ("1",)))
    if kernel.reduction_mode is not ReductionMode.deterministic and kernel.scheduler is not TileScheduler.stream_k:
        out.append(diag(f"{prefix}.split-k-scheduler", f"reduction_mode = {kernel.reduction_mode.value} with scheduler "
                        f"{kernel.scheduler.value}: only CUTLASS's stream-K tile scheduler adds partial tiles (its "
                        "Arguments::reduction_mode); set scheduler = stream_k or reduction_mode = deterministic",
                        pos(kernel, "reduction_mode"), ("deterministic",)))
    if kernel.swizzle not in SWIZZLE_SIZES:
        out.append(diag(f"{prefix}.swizzle", f"swizzle = {kernel.swizzle}: the tile scheduler swizzles by a power "
                        "of two up to 8 (max_swizzle_size)", pos(kernel, "swizzle"),
                        tuple(str(v) for v in SWIZZLE_SIZES)))
    if extents and extents.get("K") and kernel.split_k > 1:
        tile_k = kernel.tile[2]
        k_tiles = -(-int(extents["K"]) // tile_k)
        if kernel.split_k > k_tiles:
            out.append(diag(f"{prefix}.split-k-range", f"split_k = {kernel.split_k} but K = {extents['K']} has "
                            f"only {k_tiles} tiles of {tile_k}: each split needs at least one K tile",
                            pos(kernel, "split_k"), tuple(str(v) for v in (1, 2, 4, 8) if v <= k_tiles)))
    return out


def check_stages_min(kernel: GemmKernel, prefix: str, mainloop: str) -> list[Diagnostic]:
    """``{prefix}.stages-min``: explicit stages >= :data:`MIN_STAGES`."""
    if kernel.stages is None or kernel.stages >= MIN_STAGES:
        return []
    return [diag(f"{prefix}.stages-min", f"stages = {kernel.stages}: the {mainloop} mainloop needs at least "
                 f"{MIN_STAGES} stages", pos(kernel, "stages"), ("auto", "2", "3", "4"))]


#: cp.async, the SM90 mainloop for a and b that TMA cannot load (alignment below 16 bytes), copies at least
#: 4 bytes: ``cutlass/gemm/collective/builders/sm90_gmma_builder.inl:796`` "Minimum alignment required for
#: cp.async is 4B" (``detail::cp_async_min_alignment_bytes``).
CP_ASYNC_MIN_ALIGNMENT_BYTES = 4


def alignment_tensors(kernel: GemmKernel) -> list[tuple[str, tuple[str, ...], Layout, DType, Pos, int]]:
    """Every tensor with the elements per access it is built for: (name, dims, layout, dtype, pos, alignment).

    a, b, c and d follow the ``alignment`` setting (:meth:`GemmKernel.alignment_of`); the epilogue's vectors
    and matrices are always loaded 16 bytes at a time (Sm90RowBroadcast/ColBroadcast, Sm90AuxLoad by TMA).
    """
    out = [(op.name, op.dims, op.layout, op.dtype, op.pos, kernel.alignment_of(op.dtype)) for op in kernel.operands]
    out += [(inp.name, inp.dims, inp.layout, inp.dtype, inp.pos, TMA_ALIGNMENT_BYTES // inp.dtype.bytes)
            for inp in kernel.epilogue_inputs if inp.kind is not EpilogueInputKind.scalar]
    # extra [M, N] outputs are stored by TMA (Sm90AuxStore); the reductions write element by element
    out += [(o.name, o.dims, o.layout, o.dtype, o.pos, TMA_ALIGNMENT_BYTES // o.dtype.bytes)
            for o in kernel.epilogue_outputs if o.kind is EpilogueInputKind.matrix]
    return out


def largest_alignment(kernel: GemmKernel, extents: Iterable[Mapping[str, int]]) -> int | None:
    """The largest ``alignment`` setting (8, 4, 2, 1 elements) whose a, b, c, d accesses divide every operand's
    contiguous extent in every one of ``extents``; None when 16 bytes (``auto``) already does."""
    needed: int | None = None  # the largest elements per access that every ragged extent allows
    for ext in extents:
        for op in kernel.operands:
            extent = ext.get(contiguous(op.dims, op.layout))
            full = 8 * TMA_ALIGNMENT_BYTES // op.dtype.bits
            if extent and int(extent) % full:
                fit = math.gcd(full, int(extent))
                needed = fit if needed is None else min(needed, fit)
    if needed is None:
        return None
    return max(a for a in (8, 4, 2, 1) if needed % a == 0)


def check_alignment(kernel: GemmKernel, extents: Mapping[str, int] | None, prefix: str) -> list[Diagnostic]:
    """``{prefix}.align``: each tensor's contiguous extent is a multiple of the elements per access it is built
    for (16 bytes with TMA; the ``alignment`` setting for a, b, c, d)."""
    out: list[Diagnostic] = []
    if not extents:
        return out
    for name, dims, layout, dtype, where, align in alignment_tensors(kernel):
        dim = contiguous(dims, layout)
        extent = extents.get(dim)
        if extent is None or extent % align == 0:
            continue
        nearest = nearest_multiples(extent, align)
        fix = ""
        if name in ("a", "b", "c", "d"):
            fit = largest_alignment(kernel, [extents])
            min_ab = min(kernel.a.dtype.bytes, kernel.b.dtype.bytes)
            if fit and fit * min_ab < CP_ASYNC_MIN_ALIGNMENT_BYTES:
                fix = (f"; that needs alignment = {fit}, but a and b cannot be read less than "
                       f"{CP_ASYNC_MIN_ALIGNMENT_BYTES} bytes at a time (cp.async): pad {dim}")
            elif fit:
                fix = f"; build with alignment = {fit} (or auto, bound to the problem)"
        if align * dtype.bits == 8 * TMA_ALIGNMENT_BYTES:
            what = (f"{extent * dtype.bytes} bytes, not a multiple of {TMA_ALIGNMENT_BYTES} (TMA needs 16-byte "
                    "aligned rows)")
        else:
            what = f"not a multiple of {align} (the kernel is built with alignment = {kernel.alignment})"
        out.append(diag(f"{prefix}.align", f"{name}: its contiguous dim {dim} = {extent} {dtype.value} elements is "
                        f"{what}{fix}; nearest valid {dim}: {', '.join(str(v) for v in nearest)}",
                        where if where.line else kernel.pos, nearest))
    return out
