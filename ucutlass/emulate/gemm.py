"""A ``kernel NAME : gemm`` emulated with torch ops: D = epilogue(A·B [, C, inputs]) and the extra outputs.

The emulator takes the arguments a compiled kernel takes (:class:`ucutlass.codegen.Abi` order: pointers, then
scalars), so a binding (:meth:`ucutlass.bind.Binding.callable`) and a dispatch call it as they call the compiled
kernel. Shapes follow the declaration as the launcher reads them (:class:`ucutlass.runtime.CompiledKernel`): a
``row`` operand's leading dims fold into its first mode, a ``col`` operand has its declared 2-D shape, a batched
operand leads with its batch dims. The product is taken in f32 from the operands' values (TF32 off) and
rounded to ``accum`` when that is narrower; f32 a and b are first rounded to TF32 under ``math = tf32`` (what the
tensor cores read) and kept as they are under ``math = 3xtf32`` (its three MMAs are about fp32:
:func:`tf32_rounded`); scales dequantise as CUTLASS applies them (per tensor: on the
accumulator; blockwise: per block of the operands). Nothing here depends on tile, schedule, swap AB or split-K:
they change how a kernel computes, not what.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..codegen import Abi, abi_of
from ..errors import KernelRuntimeError
from ..ir import DType, EpilogueInputKind, GemmKernel, Layout, Math, split_dim
from .dtypes import torch_dtype
from .epilogue import evaluate


def matrix(t, dims: Sequence[str], layout: Layout, batched: bool):
    """The tensor bound to a 2-D declaration (``dims``, plus leading batch dims when ``batched``) as a tensor of
    shape [L, dims[0], dims[1]] (batched) or [dims[0], dims[1]]: a row-major one folds its leading dims into the
    first mode, a column-major one already has the declared logical shape."""
    if batched:
        return t.reshape(-1, *t.shape[-2:])
    if layout is Layout.row and t.dim() != 2:
        return t.reshape(-1, t.shape[-1])
    return t


def oriented(m, dims: Sequence[str], want: Sequence[str]):
    """``m`` (last two dims named ``dims``) with its last two dims in the order ``want``."""
    names = [split_dim(d)[0] for d in dims][-2:]
    if names == list(want):
        return m
    if names == list(reversed(want)):
        return m.transpose(-1, -2)
    raise KernelRuntimeError(f"emulation cannot read dims {list(dims)} as {list(want)}")


def blocks(scale, dims: Sequence[str], layout: Layout, want: Sequence[str], extents: Sequence[int]):
    """Blockwise scale factors expanded to one per element of an operand of ``extents`` (in ``want`` order)."""
    s = oriented(matrix(scale.float(), dims, layout, False), dims, want)
    divs = dict(split_dim(d) for d in dims)
    for axis, (name, size) in enumerate(zip(want, extents)):
        s = s.repeat_interleave(divs.get(name, 1), dim=axis).narrow(axis, 0, size)
    return s


def store(out, value, dims: Sequence[str], want: Sequence[str] = ("M", "N")) -> None:
    """Write ``value`` (f32, last dims in ``want`` order) into ``out`` as declared (``dims``), rounded once."""
    x = oriented(value, want, [split_dim(d)[0] for d in dims]) if len(dims) == 2 else value
    out.copy_(x.reshape(out.shape).to(out.dtype))


class GemmEmulator:
    """A GEMM kernel run as torch ops: ``call(values)`` with the compiled kernel's arguments (ABI order).

    Attributes:
        kernel: the kernel as bound to the problem; ``abi``: its argument order (:func:`ucutlass.codegen.abi_of`).
    """

    family = "gemm"
    output = "d"

    def __init__(self, kernel: GemmKernel):
        if not kernel.is_concrete():
            raise KernelRuntimeError(f"{kernel.name}: emulation needs a concrete kernel (open: "
                                     f"{', '.join(kernel.choices())})")
        block_scaled = [s.name for s in kernel.scales if s.dtype in (DType.ue4m3, DType.ue8m0)]
        if block_scaled:  # stored in CUTLASS's interleaved 128x4 atoms (Sm1xxBlockScaledConfig), not as declared
            raise KernelRuntimeError(f"{kernel.name}: emulation does not read sm100 block-scaled factors "
                                     f"({', '.join(block_scaled)}: CUTLASS's interleaved 128x4 layout) yet")
        self.kernel = kernel
        self.abi: Abi = abi_of(kernel)

    def named(self, values: Sequence[Any]) -> dict[str, Any]:
        """The arguments by name (pointers and scalars), checked for count."""
        names = self.abi.ptr_names + self.abi.scalar_names
        if len(values) != len(names):
            raise KernelRuntimeError(f"{self.kernel.name}: expected {len(names)} arguments ({', '.join(names)}), "
                                     f"got {len(values)}")
        return dict(zip(names, values))

    def operands(self, args: Mapping[str, Any]):
        """A as f32 [L?, M, K] and B as f32 [L?, N, K] (or [N, K] when shared by every batch), dequantised."""
        k = self.kernel
        batched = bool(k.batch)
        a = oriented(matrix(args["a"], k.a.dims, k.a.layout, batched), k.a.dims, ("M", "K")).float()
        b = oriented(matrix(args["b"], k.b.dims, k.b.layout, batched and bool(k.b.batch)), k.b.dims,
                     ("N", "K")).float()
        if getattr(k, "math", Math.tf32) is Math.tf32:  # TF32 tensor cores read 10 bits of mantissa
            a = tf32_rounded(a) if k.a.dtype is DType.f32 else a
            b = tf32_rounded(b) if k.b.dtype is DType.f32 else b
        for s in k.scales:
            if s.per_tensor:
                continue
            if s.operand == "a":
                a = a * blocks(args[s.name], s.dims, s.layout, ("M", "K"), a.shape[-2:])
            else:
                b = b * blocks(args[s.name], s.dims, s.layout, ("N", "K"), b.shape[-2:])
        return a, b

    def accumulate(self, a, b, args: Mapping[str, Any]):
        """A·Bᵀ in f32 with the per-tensor scales, rounded to ``accum`` when narrower than f32."""
        import torch

        with exact_f32():
            acc = torch.matmul(a, b.transpose(-1, -2))
        for s in self.kernel.scales:
            if s.per_tensor:
                acc = acc * args[s.name].float().reshape(())
        return self.rounded(acc)

    def rounded(self, acc):
        """The f32 accumulator rounded to ``accum`` when that is narrower (f16 accumulation)."""
        accum = self.kernel.accum
        if isinstance(accum, DType) and accum is not DType.f32:
            return acc.to(torch_dtype(accum)).float()
        return acc

    def refs(self, args: Mapping[str, Any], batched: bool) -> dict[str, Any]:
        """Every epilogue input, broadcastable against the accumulator [L?, M, N] (scalars as numbers)."""
        out: dict[str, Any] = {}
        for inp in self.kernel.epilogue_inputs:
            if inp.kind is EpilogueInputKind.scalar:
                out[inp.name] = float(inp.value if inp.value is not None else args[inp.name])
                continue
            t = args[inp.name].float()
            lead = (-1,) if batched and inp.batch else ()
            if inp.kind is EpilogueInputKind.row_vector:  # [N]: one value per column
                out[inp.name] = t.reshape(*lead, 1, t.shape[-1])
            elif inp.kind is EpilogueInputKind.col_vector:  # [M]: one value per row
                out[inp.name] = t.reshape(*lead, t.shape[-1], 1) if lead else t.reshape(-1, 1)
            else:
                out[inp.name] = oriented(matrix(t, inp.dims, inp.layout, batched and bool(inp.batch)), inp.dims,
                                         ("M", "N"))
        return out

    def epilogue(self, acc, args: Mapping[str, Any], batched: bool) -> None:
        """Evaluate D and every extra output from ``acc`` and write them into their tensors."""
        import torch

        k = self.kernel
        src = None
        if k.c is not None:
            src = oriented(matrix(args["c"], k.c.dims, k.c.layout, batched), k.c.dims, ("M", "N")).float()
        refs = self.refs(args, batched)

        def full(expr):  # an expression's value over the whole accumulator (a lone input broadcasts)
            return torch.broadcast_to(torch.as_tensor(evaluate(expr, acc, src, refs), device=acc.device), acc.shape)

        for o in k.epilogue_outputs:
            v = full(o.value)
            if o.reduce is None:
                store(args[o.name], v, o.dims)
            else:
                axis = -1 if o.kind is EpilogueInputKind.col_vector else -2  # [M]: over N; [N]: over M
                r = v.sum(axis) if o.reduce == "sum" else v.amax(axis)
                args[o.name].copy_(r.reshape(args[o.name].shape).to(args[o.name].dtype))
        store(args["d"], full(k.epilogue), k.d.dims)

    def call(self, values: Sequence[Any]) -> None:
        """Run on the arguments in ABI order; ``d`` and the extra outputs are written in place."""
        args = self.named(values)
        a, b = self.operands(args)
        acc = self.accumulate(a, b, args)
        self.epilogue(acc, args, bool(self.kernel.batch))

    def modes(self, values: Sequence[Any]) -> dict[str, int]:
        """The GEMM modes ``{"M", "N", "K"}`` of a call (leading dims folded into M), as the launcher gives them."""
        args = self.named(values)
        k = self.kernel
        a = oriented(matrix(args["a"], k.a.dims, k.a.layout, bool(k.batch)), k.a.dims, ("M", "K"))
        b = oriented(matrix(args["b"], k.b.dims, k.b.layout, bool(k.batch and k.b.batch)), k.b.dims, ("N", "K"))
        m = a.shape[-2] if a.dim() == 2 or a.shape[0] else 0
        return {"M": int(m), "N": int(b.shape[-2]), "K": int(a.shape[-1])}


def tf32_rounded(x):
    """f32 tensor ``x`` rounded to TF32 (8-bit exponent, 10-bit mantissa: the low 13 mantissa bits cleared), to
    nearest, ties to even; inf and nan unchanged. Shape and dtype (f32) are kept.

    The tensor cores multiply TF32 values (CUTLASS ``cutlass::tfloat32_t``; a ``math = tf32`` GEMM on f32 operands);
    hardware that truncates instead differs by at most one TF32 unit in the last place per operand.
    """
    import torch

    bits = x.contiguous().view(torch.int32)
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
    out = rounded.view(torch.float32)
    return torch.where(torch.isfinite(x), out, x)


class exact_f32:
    """Matmuls in full f32 (no TF32, no reduced-precision reductions) for the block: the compiled kernel
    accumulates the operands' exact products in f32."""

    def __enter__(self):
        import torch

        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return self

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


__all__ = ["GemmEmulator", "matrix", "oriented", "blocks", "store", "exact_f32", "tf32_rounded"]
