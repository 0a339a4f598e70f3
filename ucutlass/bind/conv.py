"""The convolution family's binding: ``kernel NAME : conv``'s a (activation), b (filter), d (output) and epilogue
inputs ↔ a problem's tensors.

The operands are checked as a gemm's (:func:`ucutlass.bind.gemm.bind_operands`: names, dtypes, unused tensors, and
every dim's extent the same from every tensor on every workload: the filter's C is the activation's, a bias ``[K]``
has the output's channels). Then what only a convolution has: each output spatial extent is what stride, padding and
dilation make of the input's (``bind-extent``), and the target's rules hold for the workload's extents (channels
16-byte aligned, padding and window within TMA im2col's limits: :mod:`ucutlass.arch.sm90_conv`). The kernel is bound
as written (no ``alignment`` or ``swap_ab`` to decide).
"""

from __future__ import annotations

import dataclasses

from ..arch import check_kernel
from ..errors import CheckError, Diagnostic
from ..ir import ConvKernel, output_extent, spatial_of
from ..problem import Problem
from .gemm import Binding, bind_operands


def bind_conv(kernel: ConvKernel, problem: Problem) -> Binding:
    """Bind a conv kernel to ``problem`` and check the binding on every workload (:attr:`Binding.kernel` is
    ``kernel``).

    Raises:
        CheckError: as :func:`ucutlass.bind.gemm.bind_operands`; an output extent that stride, padding and dilation
            do not give (``bind-extent``); for a concrete kernel, a rule of the target the workload's extents break
            (its rule code).
    """
    try:
        binding, extents = bind_operands(kernel, problem)
    except CheckError as e:
        hint = _channels_first_hint(kernel, problem)
        if not hint:
            raise
        raise CheckError([dataclasses.replace(d, message=d.message + hint) if d.code in ("bind-extent", "bind-shape")
                          else d for d in e.diagnostics]) from None
    diags: list[Diagnostic] = []
    for workload, ext in zip(problem.workloads, extents):
        for i, (size, window, out) in enumerate(zip(spatial_of(kernel.a.dims), spatial_of(kernel.b.dims),
                                                    spatial_of(kernel.d.dims))):
            want = output_extent(ext[size], ext[window], kernel.stride[i], kernel.padding[i], kernel.dilation[i])
            if ext[out] != want:
                diags.append(Diagnostic(
                    f"d -> {kernel.d.binding}: {out} = {ext[out]}, but {size} = {ext[size]} with filter {window} = "
                    f"{ext[window]}, stride {kernel.stride[i]}, padding {kernel.padding[i]}, dilation "
                    f"{kernel.dilation[i]} gives {out} = ({ext[size]} + 2·{kernel.padding[i]} - "
                    f"{kernel.dilation[i]}·({ext[window]} - 1) - 1) // {kernel.stride[i]} + 1 = {want} (workload "
                    f"{workload.label()}); check stride, padding and dilation", kernel.d.pos, (str(want),),
                    code="bind-extent"))
        if kernel.is_concrete():  # an open kernel: `check` runs the rules over its combinations
            diags += [d for d in check_kernel(kernel, ext) if d.severity == "error" and d not in diags]
        if diags:
            break
    if diags:
        raise CheckError(diags)
    return binding


def _channels_first_hint(kernel: ConvKernel, problem: Problem) -> str:
    """A note for extents that disagree because the problem's tensors are channels first (torch's NCW/NCHW activation
    and [K, C, window] weight: their dim 1 agrees, their last dims do not), else ""."""
    ins = problem.inputs
    a, b = ins.get(kernel.a.binding or ""), ins.get(kernel.b.binding or "")
    if a is None or b is None or not problem.workloads:
        return ""
    axes = problem.resolve_axes(problem.workloads[0])
    sa, sb = problem.shape(a, axes), problem.shape(b, axes)
    if not sa or not sb or len(sa) != len(sb) or len(sa) < 3:
        return ""
    if sa[1] == sb[1] and sa[-1] != sb[-1]:
        return (f"; {kernel.a.binding} {list(sa)} and {kernel.b.binding} {list(sb)} look channels first (torch's "
                f"{'NCW' if len(sa) == 3 else 'NCHW' if len(sa) == 4 else 'NCDHW'} and [K, C, window]): a conv reads "
                "channels last, so they need a layout step (a permute to NWC/NHWC and KRSC) before it")
    return ""
