"""Dense convolutions of a captured graph as ``conv`` kernels (issue 17: L2_015's, L2_055's and L2_078's
``F.conv1d`` / ``F.conv2d``).

``aten.convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)`` on channels-first
tensors (``[N, C, W]``, ``[N, C, H, W]``, ``[N, C, D, H, W]``) becomes a call of a ``conv`` kernel, which computes
channels last (docs/DSL.md, Convolution): the activation and the filter are permuted to ``[N, …, C]`` and
``[K, …, C]`` by torch steps (one copy each per call; a filter is an input, copied each call like the reference's own
casts), the bias is the epilogue's ``[K]`` vector, and the output ``[N, …, K]`` is viewed back as ``[N, K, …]`` (no
copy: a following conv's permute of that view is contiguous again). What the kernel cannot run is a torch step
``F.conv1d/2d/3d`` (exact, the reference's own call): a dtype other than bf16/f16 for both operands, channels whose
rows are not 16 bytes (``sm90.conv-align``: L2_015's one mel channel), a padding past TMA im2col's limit
(``sm90.conv-extents``). A transposed convolution is refused by name.
"""

from __future__ import annotations

import math

from .steps import UCUT_DTYPES, KernelSpec, Step, dtype_name, node_val, ref_line

#: Largest padding per spatial rank the SM90 conv kernel takes (:data:`ucutlass.arch.sm90_conv.PADDING_LIMIT`,
#: 2-D 128 by its im2col corners).
PADDING_LIMIT = {1: 65536, 2: 128, 3: 16}
#: Operand dims per spatial rank, as docs/DSL.md names them (a, b, d).
DIMS = {1: ("N, W, C", "K, S, C", "N, Q, K"), 2: ("N, H, W, C", "K, R, S, C", "N, P, Q, K"),
        3: ("N, D, H, W, C", "K, T, R, S, C", "N, Z, P, Q, K")}


def conv_step(tr, node) -> None:
    """Write ``node`` (an ``aten.convolution`` with groups 1) into ``tr`` (a :class:`~.partition.Translator`): a conv
    kernel call between permutes, or a torch step where the kernel cannot run it."""
    x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
    xv, wv, dv = node_val(x), node_val(w), node_val(node)
    rank = wv.dim() - 2
    if transposed or rank not in DIMS:  # no conv kernel runs it, and F.conv*d would compute something else
        tr._unplaced(node, "convolution", "a transposed convolution, or one of more than 3 spatial dims")
    flops = 2 * dv.numel() * math.prod(wv.shape[1:])
    tr.total_flops += flops
    dtype, out = UCUT_DTYPES.get(dtype_name(xv.dtype)), UCUT_DTYPES.get(dtype_name(dv.dtype))
    channels = [xv.shape[1], wv.shape[0]] + [d for o in tr.pairs.get(node, [])
                                            for d in (node_val(o.args[0]).shape[1], node_val(o.args[1]).shape[0])]
    fits = (groups == 1 and dtype in ("bf16", "f16") and out == dtype
            and dtype_name(wv.dtype) == dtype_name(xv.dtype)
            and (bias is None or dtype_name(node_val(bias).dtype) == dtype_name(dv.dtype))
            and all(c * xv.element_size() % 16 == 0 for c in channels)
            and all(p <= PADDING_LIMIT[rank] for p in padding))
    a = tr.args(node)
    if not fits:
        return tr.emit(node, f"F.conv{rank}d({', '.join(a[:6])}, {a[8]})", "torch")
    spec = KernelSpec("", False, dtype, out, False, bias is not None,
                      conv=(rank, tuple(stride), tuple(padding), tuple(dilation)))
    pixels = dv.shape[0] * math.prod(dv.shape[2:])
    found = tr._kernel(spec, (pixels, wv.shape[0], math.prod(wv.shape[1:])))
    last = (0, *range(2, rank + 2), 1)  # channels first → last
    line = ref_line(node, tr.problem.id)
    xn, wn, y = (tr.fresh(f"{node.name}_{s}", reserve=True) for s in ("x", "w", "channels_last"))
    tr.steps.append(Step(xn, f"{tr.fmt(x)}.permute{last}.contiguous()", "torch", line))
    tr.steps.append(Step(wn, f"{tr.fmt(w)}.permute{last}.contiguous()", "torch", line))
    call = [xn, wn] + ([tr.fmt(bias)] if bias is not None else [])
    tr.steps.append(Step(y, f"{found.name}({', '.join(call)})", "kernel", line))
    tr.kernel_flops += flops
    tr.emit(node, f"{y}.permute{(0, rank + 1, *range(1, rank + 1))}", "view")


def conv_kernel_text(spec: KernelSpec) -> str:
    """One ``kernel NAME : conv { … }`` block: channels-last operands, stride/padding/dilation, a tile per GEMM view
    (M the output pixels, N the output channels: docs/DSL.md), the bias in the epilogue."""
    rank, stride, padding, dilation = spec.conv
    a, b, d = DIMS[rank]

    def setting(values) -> str:
        return str(values[0]) if len(set(values)) == 1 else "x".join(str(v) for v in values)

    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k in dict.fromkeys(spec.shapes))
    lines = [f"# M (output pixels) x N (output channels) x K (C x window) at the captured workload: {shapes}",
             f"kernel {spec.name} : conv {{",
             f"  a : {spec.dtype}[{a}]   b : {spec.dtype}[{b}]   d : {spec.out}[{d}]",
             f"  stride = {setting(stride)}   padding = {setting(padding)}"
             + (f"   dilation = {setting(dilation)}" if set(dilation) != {1} else ""),
             "  tile = {128x128x64, 64x128x64, 128x64x64}"]
    if spec.bias:
        lines.append(f"  epilogue {{ bias : {spec.out}[K]   d = acc + bias }}")
    lines.append("}")
    return "\n".join(lines)
