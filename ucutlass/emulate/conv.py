"""A ``kernel NAME : conv`` emulated with torch ops: ``torch.nn.functional.conv1d/2d/3d`` in f32, then the GEMM's
epilogue over [output pixels, output channels].

Operands are channels last, as the compiled kernel takes them: ``a`` [N, (D, H,) W, C], ``b`` [K, (T, R,) S, C],
``d`` [N, (Z, P,) Q, K] (:class:`ucutlass.ir.ConvKernel`); they are moved to torch's channels-first order for the
convolution (cross-correlation, as CUTLASS's ``kCrossCorrelation``), computed from the operands' exact values in f32
(TF32 off), rounded to ``accum`` when narrower, and the result is read back as the implicit GEMM's accumulator
[N·Z·P·Q, K] for the epilogue (:class:`ucutlass.emulate.gemm.GemmEmulator`).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..arch.sm90_conv import gemm_view
from ..ir import ConvKernel
from .gemm import GemmEmulator, exact_f32


class ConvEmulator(GemmEmulator):
    """A convolution run as torch ops: ``call(values)`` with the compiled kernel's arguments (ABI order).

    The epilogue is the GEMM emulator's on the implicit GEMM (:func:`ucutlass.arch.sm90_conv.gemm_view`: ``c`` and
    ``d`` read as [M, N] = [output pixels, output channels], views of the packed channels-last tensors)."""

    family = "conv"

    def __init__(self, kernel: ConvKernel):
        super().__init__(kernel)
        self.gemm = GemmEmulator(gemm_view(kernel))

    def call(self, values: Sequence[Any]) -> None:
        """Run on the arguments in ABI order; ``d`` is written in place."""
        import torch.nn.functional as F

        k = self.kernel
        args = self.named(values)
        rank = k.rank
        x = args["a"].float().movedim(-1, 1)  # [N, C, (D, H,) W]
        w = args["b"].float().movedim(-1, 1)  # [K, C, (T, R,) S]
        conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
        with exact_f32():
            y = conv(x, w, stride=k.stride, padding=k.padding, dilation=k.dilation, groups=k.group_count)
        acc = y.movedim(1, -1).reshape(-1, y.shape[1])  # [N·Z·P·Q, K]: the implicit GEMM's M x N
        flat = dict(args)
        for name in ("c", "d"):
            if name in flat:
                flat[name] = flat[name].view(-1, flat[name].shape[-1])  # d: a view, written through
        self.gemm.epilogue(self.rounded(acc), flat, False)

    def modes(self, values: Sequence[Any]) -> dict[str, int]:
        """The implicit GEMM's modes: ``M`` output pixels, ``N`` output channels, ``K`` = C × filter window."""
        args = self.named(values)
        d, b = args["d"], args["b"]
        return {"M": int(d.numel() // max(1, d.shape[-1])), "N": int(b.shape[0]), "K": int(b[0].numel())}
