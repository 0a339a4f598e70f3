"""Recognise a blockwise-dequantised FP8 matmul operand in a captured graph (issue 17, the Quant_* problems).

SOL-ExecBench's FP8 references (``BlockwiseScaler`` / ``CuBLASRefBlockwiseGemm``) quantise to e4m3, then multiply
the *dequantised* f32 tensors: each operand of the f32 ``mm`` is ::

    reshape(mul(reshape(_to_copy(q, dtype=float32), [R/bm, bm, K/128, 128]),
                unsqueeze(unsqueeze(scale, 1), 3)), [R, K])

with ``q`` an FP8 ``[R, K]`` tensor and ``scale`` an f32 ``[R/bm, K/128]`` tensor (``bm`` = 1 for the 1x128
activation blocks, 128 for the 128x128 weight blocks). :func:`dequantised` finds ``(q, scale, bm)``; the partition
then calls a blockwise-scaled FP8 gemm on ``q`` and ``scale`` (docs/DSL.md, "FP8 and block-scaled GEMM": scale_a
``[M, K/128]``, scale_b ``[N/128, K/128]``) instead of a 3xTF32 gemm on the f32 copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .steps import UCUT_DTYPES, KernelSpec, dtype_name, node_val, packet

#: The K block of a blockwise scale (sm90.blockwise-tile: tile K = the scale block, a multiple of 128).
BLOCK_K = 128
#: aten ops that only reshape.
RESHAPES = ("view", "_unsafe_view", "reshape")


@dataclass
class Dequantised:
    """One operand read as ``q`` (FP8 ``[R, K]``) times ``scale`` (f32 ``[R/block_rows, K/128]``) per block."""

    q: Any
    scale: Any
    block_rows: int



def dequantised(node) -> Dequantised | None:
    """``(q, scale, block rows)`` when ``node`` (a 2-D f32 matmul operand) is a blockwise dequantisation of an FP8
    tensor in the layout above, else None."""
    import torch

    if packet(node) not in RESHAPES or node_val(node) is None or node_val(node).dim() != 2:
        return None
    mul = node.args[0]
    if packet(mul) != "mul" or len(mul.args) != 2:
        return None
    for blocks, scale4 in (mul.args, mul.args[::-1]):
        if packet(blocks) not in RESHAPES or packet(scale4) != "unsqueeze":
            continue
        cast = blocks.args[0]
        if packet(cast) != "_to_copy" or cast.kwargs.get("dtype") is not torch.float32:
            continue
        q = cast.args[0]
        inner = scale4.args[0]
        if packet(inner) != "unsqueeze" or scale4.args[1] % 4 != 3 or inner.args[1] % 3 != 1:
            continue
        scale = inner.args[0]
        qv, sv, bv = node_val(q), node_val(scale), node_val(blocks)
        if qv is None or sv is None or bv is None or qv.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            continue
        rows, k = qv.shape[-2:] if qv.dim() == 2 else (None, None)
        if rows is None or bv.dim() != 4 or bv.shape[3] != BLOCK_K or bv.shape[1] not in (1, BLOCK_K):
            continue
        bm = bv.shape[1]
        if sv.dtype != torch.float32 or tuple(sv.shape) != (rows // bm, k // BLOCK_K) or rows % bm or k % BLOCK_K:
            continue
        return Dequantised(q, scale, bm)
    return None


def bias_cast(node) -> tuple | None:
    """``(bias or None, [fused nodes], out dtype)`` when the f32 ``mm`` ``node`` is used only by ``.to(bf16/f16)``,
    or only by ``+ bias`` (``[N]``, bf16 or f16) used only by ``.to(the bias dtype)`` (``CuBLASRefBlockwiseGemm``'s
    ``(y + bias).to(output_dtype)``): the gemm's epilogue computes them (acc + bias in f32, rounded once, as the
    reference). Else None."""
    import torch

    users = list(node.users)
    if len(users) == 1 and packet(users[0]) == "_to_copy" and users[0].kwargs.get("dtype") in (torch.bfloat16,
                                                                                                torch.float16):
        return None, [users[0]], users[0].kwargs["dtype"]
    if len(users) != 1 or packet(users[0]) != "add" or len(users[0].args) != 2 or users[0].args[0] is not node \
            or users[0].kwargs.get("alpha", 1) != 1:
        return None
    add, bias = users[0], users[0].args[1]
    bv = node_val(bias) if hasattr(bias, "meta") else None
    casts = list(add.users)
    if bv is None or bv.dim() != 1 or bv.shape[0] != node_val(node).shape[1] or bv.dtype not in (
            torch.bfloat16, torch.float16) or len(casts) != 1 or packet(casts[0]) != "_to_copy" \
            or casts[0].kwargs.get("dtype") != bv.dtype:
        return None
    return bias, [add, casts[0]], bv.dtype


def write_scaled_call(tr: Any, node, a, b, shape: tuple, flops: int) -> bool:
    """An f32 ``mm`` of two blockwise-dequantised FP8 operands (a: 1x128 blocks, b read through ``.t()``:
    128x128 blocks): one blockwise-scaled FP8 gemm call (a step of the :class:`~.partition.Translator` ``tr``) on the
    FP8 tensors and their scales. False: not that."""
    if node_val(a).dtype != node_val(b).dtype or dtype_name(node_val(a).dtype) != "float32":
        return False
    if getattr(b, "op", None) != "call_function" or \
            getattr(b.target.overloadpacket, "__name__", "") not in ("t", "permute", "transpose"):
        return False
    da, db = dequantised(a), dequantised(b.args[0])
    if da is None or db is None or da.block_rows != 1 or db.block_rows != BLOCK_K:
        return False
    dtype = UCUT_DTYPES[dtype_name(node_val(da.q).dtype)]
    if UCUT_DTYPES[dtype_name(node_val(db.q).dtype)] != dtype:
        return False
    fused = bias_cast(node)  # (y + bias).to(out): acc + bias in f32 rounded once by the epilogue, as the reference
    bias, out = (fused[0], UCUT_DTYPES[dtype_name(fused[2])]) if fused else (None, "f32")
    tr.fused.update({n: node for n in (fused[1] if fused else ())})
    found = tr._kernel(KernelSpec("", False, dtype, out, True, bias is not None, scaled=True), shape)

    def operand(x):
        text = tr.fmt(x)
        return text if node_val(x).is_contiguous() else f"{text}.contiguous()"

    tr.kernel_flops += flops
    args = ", ".join(operand(x) for x in (da.q, db.q, da.scale, db.scale))
    if bias is not None:
        args += f", bias={tr.fmt(bias)}"
    tr.emit(node, f"{found.name}({args})", "kernel")
    return True
