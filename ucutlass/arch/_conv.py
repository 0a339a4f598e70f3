"""What the conv rules of every target share (:mod:`.sm90_conv`, :mod:`.sm100_conv`): the GEMM view of a convolution,
the checks of its setup (schedule, scheduler, groups, dtypes, alignment) and of its extents (channels, padding, filter
window, output), each under the target's rule prefix."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..errors import Diagnostic
from ..ir import (ConvKernel, DType, EpilogueInputKind, GemmKernel, Operand, RasterOrder, ReductionMode, Schedule,
                  TileScheduler, output_extent, spatial_of)
from . import _common
from ._common import diag as _diag
from ._common import pos as _pos


def gemm_view(kernel: ConvKernel, schedule: Schedule = Schedule.warpspecialized) -> GemmKernel:
    """The convolution as the GEMM CUTLASS runs: a [M, K] row, b [N, K] row, d [M, N] row (M output pixels, N output
    channels, K the filter window), [K] epilogue inputs and outputs as [N], those shaped like d as [M, N], ``schedule``
    (sm90's one, by default)."""
    fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(GemmKernel)}
    gemm_dims = {EpilogueInputKind.row_vector: ("N",), EpilogueInputKind.matrix: ("M", "N")}
    inputs = tuple(dataclasses.replace(i, dims=gemm_dims[i.kind]) if i.kind in gemm_dims else i
                   for i in kernel.epilogue_inputs)
    outputs = tuple(dataclasses.replace(o, dims=gemm_dims[o.kind]) if o.kind in gemm_dims else o
                    for o in kernel.epilogue_outputs)

    def op(o: Operand, dims: tuple[str, str]) -> Operand:
        return dataclasses.replace(o, dims=dims, batch=(), slice=())

    fields.update(a=op(kernel.a, ("M", "K")), b=op(kernel.b, ("N", "K")), d=op(kernel.d, ("M", "N")),
                  c=op(kernel.c, ("M", "N")) if kernel.c is not None else None, epilogue_inputs=inputs,
                  epilogue_outputs=outputs,
                  schedule=schedule, scheduler=TileScheduler.persistent, split_k=1, swap_ab=False,
                  raster=RasterOrder.auto, swizzle=1, reduction_mode=ReductionMode.deterministic, alignment=None)
    return GemmKernel(**fields)


def check_setup(kernel: ConvKernel, prefix: str, schedules: tuple[Schedule, ...], why: str) -> list[Diagnostic]:
    """``{prefix}.conv-schedule`` (one of ``schedules``; ``why`` cites CUTLASS), ``.conv-scheduler``, ``.conv-groups``,
    ``.conv-dtype``, ``.conv-alignment``: what a conv kernel of any target needs."""
    out: list[Diagnostic] = []
    if kernel.schedule not in schedules:
        out.append(_diag(f"{prefix}.conv-schedule", f"schedule {kernel.schedule.value} with conv: {why}",
                         _pos(kernel, "schedule"), tuple(s.value for s in schedules)))
    runtime = [("scheduler", kernel.scheduler is not TileScheduler.persistent, "persistent"),
               ("split_k", kernel.split_k != 1, "1"), ("raster", kernel.raster is not RasterOrder.auto, "auto"),
               ("swizzle", kernel.swizzle != 1, "1"),
               ("reduction_mode", kernel.reduction_mode is not ReductionMode.deterministic, "deterministic")]
    for name, bad, ok in runtime:
        if bad:
            out.append(_diag(f"{prefix}.conv-scheduler", f"{name} = {_common.spell(getattr(kernel, name))} with "
                             "conv: the conv template walks its tiles in one plain order (no stream-K, split-K, raster "
                             "or swizzle)", _pos(kernel, name), (ok,)))
    if kernel.group_count != 1:
        out.append(_diag(f"{prefix}.conv-groups", f"groups = {kernel.group_count}: grouped and depthwise convolution "
                         "are not built (CUTLASS's implicit-GEMM fprop mainloops read one group); keep groups = 1 and "
                         "run a grouped conv as a torch step", _pos(kernel, "groups"), ("1",)))
    inputs = (DType.bf16, DType.f16, DType.f32)
    for o in (kernel.a, kernel.b):
        if o.dtype not in inputs:
            out.append(_diag(f"{prefix}.conv-dtype", f"{o.name} is {o.dtype.value}: the conv template takes bf16, f16 "
                             "or f32 (tf32) inputs", _pos(kernel, f"{o.name}.dtype"), tuple(d.value for d in inputs)))
    if kernel.d.dtype not in inputs:
        out.append(_diag(f"{prefix}.conv-dtype", f"d is {kernel.d.dtype.value}: a conv writes bf16, f16 or f32",
                         _pos(kernel, "d.dtype"), tuple(d.value for d in inputs)))
    if kernel.alignment is not None:
        out.append(_diag(f"{prefix}.conv-alignment", f"alignment = {kernel.alignment} with conv: the conv mainloop "
                         "loads with TMA im2col, which needs 16-byte aligned channels", _pos(kernel, "alignment"),
                         ("auto",)))
    if kernel.swap_ab is True:
        out.append(_diag(f"{prefix}.conv-scheduler", "swap_ab = true with conv: the implicit GEMM is built as declared",
                         _pos(kernel, "swap_ab"), ("false", "auto")))
    return out


def corner_limit(rank: int) -> int:
    """TMA im2col's corner range for ``rank`` spatial dims: corners lie in [-limit, limit - 1] (``1 << (16 / rank -
    1)``, ``cutlass/conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:374``, sm100's alike)."""
    return 1 << (16 // rank - 1)


def check_padding(kernel: ConvKernel, prefix: str, padding_limit: int | None) -> list[Diagnostic]:
    """``{prefix}.conv-extents`` for what needs no extents: the padding (the im2col lower corner, -padding) at most
    the corner limit and ``padding_limit`` (None: no limit of its own)."""
    limit = corner_limit(kernel.rank) if padding_limit is None else min(padding_limit, corner_limit(kernel.rank))
    if all(p <= limit for p in kernel.padding):
        return []
    return [_diag(f"{prefix}.conv-extents", f"padding {_common.spell(kernel.padding)}: TMA im2col takes padding up "
                  f"to {limit} for a {kernel.rank}-D conv", _pos(kernel, "padding"), (str(limit),))]


def check_extents(kernel: ConvKernel, extents: Mapping[str, int], prefix: str, offset_limit: int) -> list[Diagnostic]:
    """Given extents: ``{prefix}.conv-align`` (C and K × element bytes multiples of 16) and ``.conv-extents`` (the
    filter window's last offset (window-1)·dilation at most ``offset_limit``, the upper im2col corner padding -
    (window-1)·dilation within the corner range, an output extent ≥ 1)."""
    out: list[Diagnostic] = []
    rank = kernel.rank
    for o, dim in ((kernel.a, "C"), (kernel.b, "C"), (kernel.d, "K")):
        if dim in extents and (extents[dim] * o.dtype.bytes) % 16:
            per = 16 // o.dtype.bytes
            near = _common.nearest_multiples(extents[dim], per)
            out.append(_diag(f"{prefix}.conv-align", f"{o.name}: {dim} = {extents[dim]} {o.dtype.value} channels are "
                             f"not a multiple of {per} (16 bytes, TMA); pad the channels to "
                             f"{' or '.join(str(n) for n in near)}", o.pos, tuple(str(n) for n in near)))
    corner = corner_limit(rank)
    for i, (w, s, q) in enumerate(zip(spatial_of(kernel.b.dims), spatial_of(kernel.a.dims),
                                      spatial_of(kernel.d.dims))):
        if w not in extents:
            continue
        span = (extents[w] - 1) * kernel.dilation[i]
        if span > offset_limit or not -corner <= kernel.padding[i] - span <= corner - 1:
            out.append(_diag(f"{prefix}.conv-extents", f"filter {w} = {extents[w]} with dilation "
                             f"{kernel.dilation[i]} and padding {kernel.padding[i]} spans {span + 1} elements: TMA "
                             f"im2col reaches offsets up to {offset_limit} and corners within ±{corner} for a "
                             f"{rank}-D conv", kernel.b.pos))
        if s in extents:
            n_out = output_extent(extents[s], extents[w], kernel.stride[i], kernel.padding[i], kernel.dilation[i])
            if n_out < 1:
                out.append(_diag(f"{prefix}.conv-extents", f"{s} = {extents[s]} with filter {w} = {extents[w]}, "
                                 f"padding {kernel.padding[i]}, dilation {kernel.dilation[i]} leaves no output {q}",
                                 kernel.a.pos))
    return out
