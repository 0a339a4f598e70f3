"""FLOP formulas for the matmul-like ops that run on tensor cores, and the masked (causal) fraction.

One multiply-accumulate is 2 FLOP. Shapes are the shapes the op sees; a packed fp4 tensor
(``float4_e2m1fn_x2``, two values per element) has twice as many logical values along its last dim.
"""

from __future__ import annotations

import math
from typing import Sequence


def logical_last_dim(tensor) -> int:
    """The logical size of a tensor's last dim (×2 for ``float4_e2m1fn_x2``, which packs two values)."""
    k = int(tensor.shape[-1])
    return 2 * k if str(tensor.dtype).endswith("_x2") else k


def conv_flops(out_shape: Sequence[int], weight_shape: Sequence[int], in_shape: Sequence[int],
               transposed: bool) -> int:
    """FLOP of ``aten.convolution``: 2 per multiply-accumulate of every output (input, if transposed) element.

    A forward convolution's weight is ``[C_out, C_in/groups, *kernel]``: each output element takes
    ``C_in/groups · prod(kernel)`` MACs. A transposed one's weight is ``[C_in, C_out/groups, *kernel]``:
    each *input* element scatters ``C_out/groups · prod(kernel)`` MACs.
    """
    per = int(weight_shape[1]) * math.prod(int(s) for s in weight_shape[2:])
    return 2 * math.prod(int(s) for s in (in_shape if transposed else out_shape)) * per


def band_count(rows: int, cols: int, *, upper_from: int | None = None, lower_to: int | None = None) -> int:
    """How many (i, j) of a rows×cols grid satisfy ``j − i ≤ lower_to`` (or ``j − i ≥ upper_from``).

    ``lower_to = 0`` is the causal lower triangle including the diagonal, top-left aligned (PyTorch's
    ``is_causal``); ``lower_to = cols − rows`` is the bottom-right aligned one (FlashAttention's).
    """
    total = 0
    if lower_to is not None:
        # row i keeps j in [0, min(cols, i + lower_to + 1)).
        for i in range(rows):
            total += min(cols, max(0, i + lower_to + 1))
        return total
    if upper_from is not None:
        for i in range(rows):
            total += max(0, cols - max(0, i + upper_from))
        return total
    return rows * cols


def attention_flops(batch_heads: int, sq: int, sk: int, d_qk: int, d_v: int, kept: int | None = None) -> int:
    """FLOP of softmax(Q·Kᵀ)·V: ``2·BH·Sq·Sk·(d_qk + d_v)``, scaled to the ``kept`` (unmasked) score count.

    Args:
        batch_heads: product of the batch and query-head dims.
        sq, sk: query and key lengths.
        d_qk, d_v: head dims of Q/K and of V.
        kept: unmasked (i, j) pairs per (batch, head); ``None`` means all ``sq·sk``.
    """
    pairs = sq * sk if kept is None else kept
    return 2 * int(batch_heads) * int(pairs) * (int(d_qk) + int(d_v))
