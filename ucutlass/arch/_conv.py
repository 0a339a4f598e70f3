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
    channels, K the filter window), a bias [K] as a row vector over N, ``schedule`` (sm90's one, by default)."""
    fields = {f.name: getattr(kernel, f.name) for f in dataclasses.fields(GemmKernel)}
    inputs = tuple(dataclasses.replace(i, dims=("N",)) if i.kind is EpilogueInputKind.row_vector else i
                   for i in kernel.epilogue_inputs)

    def op(o: Operand, dims: tuple[str, str]) -> Operand:
        return dataclasses.replace(o, dims=dims, batch=(), slice=())

    fields.update(a=op(kernel.a, ("M", "K")), b=op(kernel.b, ("N", "K")), d=op(kernel.d, ("M", "N")),
                  c=op(kernel.c, ("M", "N")) if kernel.c is not None else None, epilogue_inputs=inputs,
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
            out.append(_diag(f"{prefix}.conv-scheduler", f"{name} = {_common.spell(getattr(kernel, name))} with conv: the "
                             "SM90 conv kernel walks its tiles in one plain order (no stream-K, split-K, raster or "
                             "swizzle)", _pos(kernel, name), (ok,)))
    if kernel.group_count != 1:
        out.append(_diag(f"{prefix}.conv-groups", f"groups = {kernel.group_count}: grouped and depthwise convolution are "
                         "not built (CUTLASS's SM90 fprop mainloop reads one group); keep groups = 1 and run a grouped "
                         "conv as a torch step", _pos(kernel, "groups"), ("1",)))
    inputs = (DType.bf16, DType.f16, DType.f32)
    for o in (kernel.a, kernel.b):
        if o.dtype not in inputs:
            out.append(_diag(f"{prefix}.conv-dtype", f"{o.name} is {o.dtype.value}: the conv template takes bf16, f16 or "
                             "f32 (tf32) inputs", _pos(kernel, f"{o.name}.dtype"), tuple(d.value for d in inputs)))
    if kernel.d.dtype not in inputs:
        out.append(_diag(f"{prefix}.conv-dtype", f"d is {kernel.d.dtype.value}: a conv writes bf16, f16 or f32",
                         _pos(kernel, "d.dtype"), tuple(d.value for d in inputs)))
    if kernel.alignment is not None:
        out.append(_diag(f"{prefix}.conv-alignment", f"alignment = {kernel.alignment} with conv: the SM90 conv mainloop "
                         "loads with TMA im2col, which needs 16-byte aligned channels", _pos(kernel, "alignment"),
                         ("auto",)))
    if kernel.swap_ab is True:
        out.append(_diag(f"{prefix}.conv-scheduler", "swap_ab = true with conv: the implicit GEMM is built as declared",
                         _pos(kernel, "swap_ab"), ("false", "auto")))
    return out


def check_extents(kernel: ConvKernel, extents: Mapping[str, int], prefix: str, padding_limit: int | None,
                  offset_limit: int) -> list[Diagnostic]:
    """Given extents: ``{prefix}.conv-align`` (C and K × element bytes multiples of 16) and ``.conv-extents`` (padding
    at most ``padding_limit`` when not None, the filter window's last offset (window-1)·dilation at most
    ``offset_limit``, an output extent ≥ 1)."""
    out: list[Diagnostic] = []
    rank = kernel.rank
    for o, dim in ((kernel.a, "C"), (kernel.b, "C"), (kernel.d, "K")):
        if dim in extents and (extents[dim] * o.dtype.bytes) % 16:
            per = 16 // o.dtype.bytes
            near = _common.nearest_multiples(extents[dim], per)
            out.append(_diag(f"{prefix}.conv-align", f"{o.name}: {dim} = {extents[dim]} {o.dtype.value} channels are not a "
                             f"multiple of {per} (16 bytes, TMA); pad the channels to "
                             f"{' or '.join(str(n) for n in near)}", o.pos, tuple(str(n) for n in near)))
    limit = padding_limit
    if limit is not None and any(p > limit for p in kernel.padding):
        out.append(_diag(f"{prefix}.conv-extents", f"padding {_common.spell(kernel.padding)}: TMA im2col takes padding up "
                         f"to {limit} for a {rank}-D conv", _pos(kernel, "padding"), (str(limit),)))
    windows = spatial_of(kernel.b.dims)
    sizes = spatial_of(kernel.a.dims)
    outs = spatial_of(kernel.d.dims)
    for i, (w, s, q) in enumerate(zip(windows, sizes, outs)):
        if w in extents and (extents[w] - 1) * kernel.dilation[i] > offset_limit:
            out.append(_diag(f"{prefix}.conv-extents", f"filter {w} = {extents[w]} with dilation {kernel.dilation[i]} spans "
                             f"{(extents[w] - 1) * kernel.dilation[i] + 1} elements; TMA im2col offsets reach "
                             f"{offset_limit} for a {rank}-D conv", kernel.b.pos))
        if w in extents and s in extents:
            n_out = output_extent(extents[s], extents[w], kernel.stride[i], kernel.padding[i], kernel.dilation[i])
            if n_out < 1:
                out.append(_diag(f"{prefix}.conv-extents", f"{s} = {extents[s]} with filter {w} = {extents[w]}, padding "
                                 f"{kernel.padding[i]}, dilation {kernel.dilation[i]} leaves no output {q}",
                                 kernel.a.pos))
    return out
