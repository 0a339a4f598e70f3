"""SM90 rules for convolutions (``kernel NAME : conv``, CUTLASS 3.x implicit-GEMM fprop), checked before nvcc.

Header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's ``cutlass_library/source/include``.

- Schedule: the SM90 conv mainloop (``MainloopSm90TmaGmmaWarpSpecializedImplicitGemm``) takes only the
  non-persistent ``KernelImplicitTmaWarpSpecializedSm90``: ``cutlass/conv/dispatch_policy.hpp:81-83`` asserts
  "Persistent schedules not support for conv yet" for the cooperative and pingpong ones. So no stream-K, no split-K,
  and the tile scheduler's raster and swizzle do not apply (``sm90.conv-schedule``, ``sm90.conv-scheduler``).
- The builder (``cutlass/conv/collective/builders/sm90_gmma_builder.inl``) loads A with TMA im2col and B with tiled
  TMA, K-major both (fprop): 16-byte aligned channels (``is_aligned`` static_assert and ``can_implement`` in
  ``cutlass/conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:343-354``): ``sm90.conv-alignment`` (no
  ``alignment`` setting) and, given extents, ``sm90.conv-align`` (C and K × element bytes multiples of 16).
- ``can_implement`` (same file, 361-404): padding at most 65536 (1-D), 256 (2-D), 16 (3-D) and the filter window
  ``(S-1)·dilation`` below 2^(16/rank) - 1 (the im2col TMA's offsets): ``sm90.conv-extents``, with the output extent
  ≥ 1.
- Element types: the wgmma inputs of a gemm (bf16, f16, f32 as tf32), one dtype for a and b (``sm90.conv-dtype``);
  ``groups`` = 1 (``sm90.conv-groups``: ``ConvProblemShape::groups`` is not read by the SM90 fprop mainloop).
- Tile, cluster, stages and shared memory are the sm90 GEMM rules (:mod:`ucutlass.arch.sm90`) on the GEMM view
  (:func:`gemm_view`): M = output pixels, N = output channels K, K = C·window, schedule ``warpspecialized``.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..errors import Diagnostic
from ..ir import (ConvKernel, DType, EpilogueInputKind, GemmKernel, Operand, RasterOrder, ReductionMode, Schedule,
                  Target, TileScheduler, output_extent, spatial_of)
from . import _common, sm90
from ._common import diag as _diag
from ._common import pos as _pos

__all__ = ["check_kernel", "resolve_schedule", "gemm_view", "RULES", "SCHEDULES", "PADDING_LIMIT",
           "FILTER_OFFSET_LIMIT"]

#: Schedules of the SM90 conv kernel: ``auto`` and ``warpspecialized`` (KernelImplicitTmaWarpSpecializedSm90).
SCHEDULES = (Schedule.auto, Schedule.warpspecialized)
#: Largest padding per rank (TMA im2col, sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:362).
PADDING_LIMIT = {1: 65536, 2: 256, 3: 16}
#: (window - 1) · dilation must be below this per rank (the im2col offsets, same file :392).
FILTER_OFFSET_LIMIT = {1: (1 << 16) - 1, 2: (1 << 8) - 1, 3: (1 << 5) - 1}

RULES: dict[str, str] = {
    "sm90.conv-target": "conv kernels build for sm90 (sm100 conv comes later)",
    "sm90.conv-schedule": "conv schedule is auto or warpspecialized (CUTLASS's SM90 conv is not persistent)",
    "sm90.conv-scheduler": "conv runs the plain tile order: persistent scheduler, split_k 1, raster auto, swizzle 1",
    "sm90.conv-groups": "conv groups = 1 (grouped and depthwise convolution are not built)",
    "sm90.conv-dtype": "conv a and b are one of bf16, f16, f32 (tf32); d bf16, f16 or f32",
    "sm90.conv-alignment": "conv operands are 16-byte aligned (alignment = auto: TMA im2col)",
    "sm90.conv-align": "given extents, C and K × element bytes are multiples of 16",
    "sm90.conv-extents": "given extents, padding, filter window and output extents within TMA im2col's limits",
}


def resolve_schedule(kernel: ConvKernel) -> Schedule:
    """``auto`` and ``warpspecialized`` are the one SM90 conv schedule: ``warpspecialized``."""
    _common.require_concrete_schedule(kernel)
    return Schedule.warpspecialized


def gemm_view(kernel: ConvKernel) -> GemmKernel:
    """The convolution as the GEMM CUTLASS runs: a [M, K] row, b [N, K] row, d [M, N] row (M output pixels, N output
    channels, K the filter window), a bias [K] as a row vector over N, schedule ``warpspecialized``."""
    fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(GemmKernel)}
    inputs = tuple(dataclasses.replace(i, dims=("N",)) if i.kind is EpilogueInputKind.row_vector else i
                   for i in kernel.epilogue_inputs)

    def op(o: Operand, dims: tuple[str, str]) -> Operand:
        return dataclasses.replace(o, dims=dims, batch=(), slice=())

    fields.update(a=op(kernel.a, ("M", "K")), b=op(kernel.b, ("N", "K")), d=op(kernel.d, ("M", "N")),
                  c=op(kernel.c, ("M", "N")) if kernel.c is not None else None, epilogue_inputs=inputs,
                  schedule=Schedule.warpspecialized, scheduler=TileScheduler.persistent, split_k=1, swap_ab=False,
                  raster=RasterOrder.auto, swizzle=1, reduction_mode=ReductionMode.deterministic, alignment=None)
    return GemmKernel(**fields)


def _check_setup(kernel: ConvKernel) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    if kernel.schedule not in SCHEDULES:
        out.append(_diag("sm90.conv-schedule", f"schedule {kernel.schedule.value} with conv: CUTLASS's SM90 conv "
                         "mainloop runs KernelImplicitTmaWarpSpecializedSm90 only (dispatch_policy.hpp: \"Persistent "
                         "schedules not support for conv yet\")", _pos(kernel, "schedule"),
                         tuple(s.value for s in SCHEDULES)))
    runtime = [("scheduler", kernel.scheduler is not TileScheduler.persistent, "persistent"),
               ("split_k", kernel.split_k != 1, "1"), ("raster", kernel.raster is not RasterOrder.auto, "auto"),
               ("swizzle", kernel.swizzle != 1, "1"),
               ("reduction_mode", kernel.reduction_mode is not ReductionMode.deterministic, "deterministic")]
    for name, bad, ok in runtime:
        if bad:
            out.append(_diag("sm90.conv-scheduler", f"{name} = {_common.spell(getattr(kernel, name))} with conv: the "
                             "SM90 conv kernel walks its tiles in one plain order (no stream-K, split-K, raster or "
                             "swizzle)", _pos(kernel, name), (ok,)))
    if kernel.group_count != 1:
        out.append(_diag("sm90.conv-groups", f"groups = {kernel.group_count}: grouped and depthwise convolution are "
                         "not built (CUTLASS's SM90 fprop mainloop reads one group); keep groups = 1 and run a grouped "
                         "conv as a torch step", _pos(kernel, "groups"), ("1",)))
    inputs = (DType.bf16, DType.f16, DType.f32)
    for o in (kernel.a, kernel.b):
        if o.dtype not in inputs:
            out.append(_diag("sm90.conv-dtype", f"{o.name} is {o.dtype.value}: the conv template takes bf16, f16 or "
                             "f32 (tf32) inputs", _pos(kernel, f"{o.name}.dtype"), tuple(d.value for d in inputs)))
    if kernel.d.dtype not in inputs:
        out.append(_diag("sm90.conv-dtype", f"d is {kernel.d.dtype.value}: a conv writes bf16, f16 or f32",
                         _pos(kernel, "d.dtype"), tuple(d.value for d in inputs)))
    if kernel.alignment is not None:
        out.append(_diag("sm90.conv-alignment", f"alignment = {kernel.alignment} with conv: the SM90 conv mainloop "
                         "loads with TMA im2col, which needs 16-byte aligned channels", _pos(kernel, "alignment"),
                         ("auto",)))
    if kernel.swap_ab is True:
        out.append(_diag("sm90.conv-scheduler", "swap_ab = true with conv: the implicit GEMM is built as declared",
                         _pos(kernel, "swap_ab"), ("false", "auto")))
    return out


def _check_extents(kernel: ConvKernel, extents: Mapping[str, int]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    rank = kernel.rank
    for o, dim in ((kernel.a, "C"), (kernel.b, "C"), (kernel.d, "K")):
        if dim in extents and (extents[dim] * o.dtype.bytes) % 16:
            per = 16 // o.dtype.bytes
            near = _common.nearest_multiples(extents[dim], per)
            out.append(_diag("sm90.conv-align", f"{o.name}: {dim} = {extents[dim]} {o.dtype.value} channels are not a "
                             f"multiple of {per} (16 bytes, TMA); pad the channels to "
                             f"{' or '.join(str(n) for n in near)}", o.pos, tuple(str(n) for n in near)))
    limit = PADDING_LIMIT[rank]
    if any(p > limit for p in kernel.padding):
        out.append(_diag("sm90.conv-extents", f"padding {_common.spell(kernel.padding)}: TMA im2col takes padding up "
                         f"to {limit} for a {rank}-D conv", _pos(kernel, "padding"), (str(limit),)))
    windows = spatial_of(kernel.b.dims)
    sizes = spatial_of(kernel.a.dims)
    outs = spatial_of(kernel.d.dims)
    for i, (w, s, q) in enumerate(zip(windows, sizes, outs)):
        if w in extents and (extents[w] - 1) * kernel.dilation[i] >= FILTER_OFFSET_LIMIT[rank]:
            out.append(_diag("sm90.conv-extents", f"filter {w} = {extents[w]} with dilation {kernel.dilation[i]} spans "
                             f"{(extents[w] - 1) * kernel.dilation[i] + 1} elements; TMA im2col offsets reach "
                             f"{FILTER_OFFSET_LIMIT[rank]} for a {rank}-D conv", kernel.b.pos))
        if w in extents and s in extents:
            n_out = output_extent(extents[s], extents[w], kernel.stride[i], kernel.padding[i], kernel.dilation[i])
            if n_out < 1:
                out.append(_diag("sm90.conv-extents", f"{s} = {extents[s]} with filter {w} = {extents[w]}, padding "
                                 f"{kernel.padding[i]}, dilation {kernel.dilation[i]} leaves no output {q}",
                                 kernel.a.pos))
    return out


def check_kernel(kernel: ConvKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule a concrete conv kernel breaks: :data:`RULES`, then the sm90 GEMM rules on :func:`gemm_view`.

    Args:
        kernel: a conv kernel without open choices.
        extents: optional extents by dim name (``{"N": 1, "W": 3000, "C": 1280, "K": 1280, "S": 3, "Q": 1500}``).

    Raises:
        ValueError: the kernel still has open choices.
    """
    _common.require_concrete(kernel)
    if kernel.target is not Target.sm90:
        return [_diag("sm90.conv-target", f"target {kernel.target.value} with conv: conv kernels build for sm90 so "
                      "far", _pos(kernel, "target"), ("sm90",))]
    out = _check_setup(kernel)
    if any(d.code == "sm90.conv-dtype" for d in out):
        return out
    out += sm90.check_kernel(gemm_view(kernel))
    if extents:
        out += _check_extents(kernel, extents)
    return out
