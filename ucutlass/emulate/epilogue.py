"""The epilogue's expression tree (:mod:`ucutlass.ir.expr`) evaluated with torch ops, in f32.

This is what CUTLASS's EVT computes, node by node: the accumulator and every input read as f32 (the epilogue's
compute type, ``ElementCompute = float`` in the templates), activations as PyTorch defines them, ``cast`` a
round trip through its dtype, the result rounded once to the stored dtype by the caller.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import KernelRuntimeError
from ..ir import Acc, Binary, Cast, Const, Expr, Ref, Src, Unary
from .dtypes import torch_dtype


def activation(op: str, x):
    """The epilogue activation ``op`` (:data:`ucutlass.ir.UNARY_OPS`) of the f32 tensor ``x``, as CUTLASS's functor
    computes it (PyTorch's definition; ``gelu`` the erf form, ``gelu_tanh`` the tanh form)."""
    import torch.nn.functional as F

    if op == "relu":
        return F.relu(x)
    if op == "gelu":
        return F.gelu(x)  # erf form: CUTLASS's GELU
    if op == "gelu_tanh":
        return F.gelu(x, approximate="tanh")  # CUTLASS's GELU_taylor
    if op == "silu":
        return F.silu(x)
    if op == "sigmoid":
        return x.sigmoid()
    if op == "tanh":
        return x.tanh()
    raise KernelRuntimeError(f"emulation has no activation {op!r}")


def evaluate(expr: Expr, acc, src, refs: Mapping[str, Any]):
    """The value of ``expr`` (f32 tensors broadcast against the accumulator).

    Args:
        expr: the epilogue expression (or an extra output's stored value).
        acc: the accumulator, f32 [..., M, N].
        src: the source operand ``c`` as f32 in the accumulator's shape, or None when the kernel has none.
        refs: each epilogue input by name: an f32 tensor that broadcasts against ``acc``, or a Python number.
    """
    if isinstance(expr, Acc):
        return acc
    if isinstance(expr, Src):
        if src is None:
            raise KernelRuntimeError("the epilogue reads c, but the kernel has no c")
        return src
    if isinstance(expr, Ref):
        return refs[expr.name]
    if isinstance(expr, Const):
        return float(expr.value)
    if isinstance(expr, Unary):
        return activation(expr.op, _tensor(evaluate(expr.arg, acc, src, refs), acc))
    if isinstance(expr, Cast):
        x = _tensor(evaluate(expr.arg, acc, src, refs), acc)
        return x.to(torch_dtype(expr.dtype)).float()
    if isinstance(expr, Binary):
        lhs, rhs = evaluate(expr.lhs, acc, src, refs), evaluate(expr.rhs, acc, src, refs)
        if expr.op == "+":
            return lhs + rhs
        if expr.op == "-":
            return lhs - rhs
        if expr.op == "*":
            return lhs * rhs
    raise KernelRuntimeError(f"emulation cannot evaluate {expr!r}")


def _tensor(x, like):
    """A Python number as an f32 tensor on ``like``'s device (activations need tensors)."""
    import torch

    return x if isinstance(x, torch.Tensor) else torch.full((), float(x), dtype=torch.float32, device=like.device)
