"""A ``kernel NAME : attention`` emulated with torch ops: O = softmax(mod(scale·Q·Kᵀ)) · V [, LSE].

``mod`` as the kernel's score modifier (:mod:`ucutlass.ir.attention`): softcap c·tanh(s / c), + bias (broadcast over
heads, and batches without B), causal and sliding-window masks (key j visible to query i when j ≤ i and
i − window ≤ j). ``scale`` / ``softcap`` bound to problem scalars come after the pointers (ABI order).

In f32 from the operands' exact values (TF32 off): query head h reads KV head h / (Hq / Hkv) (GQA), a causal
mask lets query i see keys j ≤ i (top-left aligned, as torch's ``is_causal``), ``scale`` None is 1/sqrt(D), and
LSE is the natural-log log-sum-exp of the scaled, masked scores per row, f32 [B, Hq, Sq] (:mod:`ucutlass.ir.attention`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..bind.attention import extents_of
from ..codegen import Abi, abi_of
from ..errors import KernelRuntimeError
from ..ir import AttentionKernel
from .gemm import exact_f32


class AttentionEmulator:
    """An attention kernel run as torch ops: ``call(values)`` with q, k, v, o[, lse] (ABI order)."""

    family = "attention"
    output = "o"

    def __init__(self, kernel: AttentionKernel):
        if not kernel.is_concrete():
            raise KernelRuntimeError(f"{kernel.name}: emulation needs a concrete kernel (open: "
                                     f"{', '.join(kernel.choices())})")
        self.kernel = kernel
        self.abi: Abi = abi_of(kernel)

    def call(self, values: Sequence[Any]) -> None:
        """Run on q, k, v, o[, lse][, bias][, scalars]; o (and lse) are written in place."""
        import torch

        k = self.kernel
        t = dict(zip(self.abi.ptr_names, values))
        given = dict(zip(self.abi.scalar_names, values[len(self.abi.ptr_names):]))
        ext, errors = extents_of(k, {n: tuple(t[n].shape) for n in self.abi.ptr_names})
        if errors:
            raise KernelRuntimeError(f"{k.name}: " + "; ".join(errors))

        def heads_first(x):  # [B, H, S, D] in f32
            return (x.transpose(1, 2) if k.layout == "bshd" else x).float()

        q, kk, v = heads_first(t["q"]), heads_first(t["k"]), heads_first(t["v"])
        group = ext["Hq"] // max(ext["Hkv"], 1)
        if group > 1:
            kk, v = kk.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scale = 1.0 / math.sqrt(k.head_dim) if k.scale is None else float(k.scale)
        scale = float(given.get("scale", scale))
        softcap = given.get("softcap", k.softcap)
        eager = k.scores == "eager"
        low = t["q"].dtype

        def r(x):  # eager scores: every step rounded to the operands' dtype
            return x.to(low).float() if eager else x

        with exact_f32():
            s = r(r(torch.matmul(q, kk.transpose(-1, -2))) * scale)
            if softcap is not None:
                s = r(r(torch.tanh(r(s / float(softcap)))) * float(softcap))
            if k.bias is not None:
                bias = t["bias"].float()
                if len(k.bias.dims) == 4:  # [B, 1, Sq, Sk]
                    bias = bias.squeeze(1)
                s = r(s + (bias.unsqueeze(1) if bias.dim() == 3 else bias))  # over heads (and batches)
            sq, sk = s.shape[-2:]
            i = torch.arange(sq, device=s.device).unsqueeze(1)
            j = torch.arange(sk, device=s.device).unsqueeze(0)
            keep = torch.ones(sq, sk, dtype=torch.bool, device=s.device)
            if str(getattr(k.mask, "value", k.mask)) == "causal":
                keep &= j <= i
            if k.window is not None:
                keep &= j >= i - int(k.window)
            if not bool(keep.all()):
                s = s.masked_fill(~keep, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            o = torch.matmul(torch.softmax(s, dim=-1).nan_to_num(0.0), v)
        out = o.transpose(1, 2) if k.layout == "bshd" else o
        t["o"].copy_(out.to(t["o"].dtype))
        if k.lse is not None:
            t["lse"].copy_(lse.reshape(t["lse"].shape).to(t["lse"].dtype))
