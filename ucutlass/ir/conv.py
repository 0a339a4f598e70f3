"""The convolution kernel (CUTLASS 3.x implicit-GEMM fprop): D = epilogue(conv(A, B)), channels-last.

A convolution is a GEMM over the im2col view of its activation (CUTLASS ``cutlass/conv/detail.hpp``,
``get_transformed_problem_shape_MNKL``): GEMM M is every output pixel (N·Z·P·Q), GEMM N the output channels K and
GEMM K the filter window (C·T·R·S). So a :class:`ConvKernel` is a :class:`~ucutlass.ir.GemmKernel` whose operands
carry the convolution's dims and which adds the traversal: ``stride``, ``padding`` (the same below and above),
``dilation`` (one entry per spatial dim) and ``group_count`` (the setting ``groups``). Its epilogue is the GEMM's,
over [GEMM M, GEMM N]: a bias ``[K]`` is one value per output channel (a row vector, Sm90RowBroadcast).
"""

from __future__ import annotations

from dataclasses import dataclass

from .gemm import GemmKernel

#: Declared dims of each operand per number of spatial dims (CUTLASS's names: activation N, D, H, W, C; filter K, T, R,
#: S, C; output N, Z, P, Q, K). Channels last: NWC/NHWC/NDHWC activations, KSC/KRSC/KTRSC filters.
CONV_DIMS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"a": ("N", "W", "C"), "b": ("K", "S", "C"), "d": ("N", "Q", "K")},
    2: {"a": ("N", "H", "W", "C"), "b": ("K", "R", "S", "C"), "d": ("N", "P", "Q", "K")},
    3: {"a": ("N", "D", "H", "W", "C"), "b": ("K", "T", "R", "S", "C"), "d": ("N", "Z", "P", "Q", "K")},
}
#: The settings a conv adds to the GEMM's (fixed values, not search choices: they are the problem's meaning).
CONV_SETTINGS = ("stride", "padding", "dilation", "groups")


def spatial_of(dims: tuple[str, ...]) -> tuple[str, ...]:
    """The spatial dims of an operand's declared dims (all but the first and the last): ``("N", "H", "W", "C")`` →
    ``("H", "W")``."""
    return tuple(dims[1:-1])


def output_extent(size: int, window: int, stride: int, padding: int, dilation: int) -> int:
    """One output spatial extent, as torch and CUTLASS compute it: ``(size + 2·padding - dilation·(window-1) - 1) //
    stride + 1`` (may be ≤ 0: no output)."""
    return (size + 2 * padding - dilation * (window - 1) - 1) // stride + 1


@dataclass(frozen=True)
class ConvKernel(GemmKernel):
    """A forward convolution (fprop) as CUTLASS's implicit GEMM (``ConvUniversal``; sm90, sm100 compile-only).

    Operands (:data:`CONV_DIMS`): ``a`` the activation [N, (D, H,) W, C], ``b`` the filter [K, (T, R,) S, C], ``d`` the
    output [N, (Z, P,) Q, K] and optionally ``c``, a source shaped like ``d`` (read as ``c`` in the epilogue), all
    channels-last and packed, cross-correlation (as ``torch.nn.functional.conv*d``).
    ``stride``, ``padding``, ``dilation`` hold one whole number per spatial dim, outermost first; ``group_count``
    (the setting ``groups``) is 1 (the implicit-GEMM fprop builders read one group). The GEMM settings (tile
    M x N x K over the GEMM view above, cluster, schedule, stages) mean what they mean for a gemm.
    """

    stride: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0,)
    dilation: tuple[int, ...] = (1,)
    group_count: int = 1

    family = "conv"

    @property
    def rank(self) -> int:
        """Number of spatial dims: 1, 2 or 3."""
        return len(self.a.dims) - 2

    def config_name(self) -> str:
        """:meth:`GemmKernel.config_name` with ``conv{rank}d`` and the traversal, e.g.
        ``sub_conv1d_s2_p1_d1_sm90_bf16_bf16_bf16_f32_128x128x64_1x1x1_auto_persistent_sauto``."""
        def spell(t):
            return "x".join(str(v) for v in t)
        tag = f"conv{self.rank}d_s{spell(self.stride)}_p{spell(self.padding)}_d{spell(self.dilation)}"
        if self.group_count != 1:
            tag += f"_g{self.group_count}"
        return super().config_name().replace(self.name + "_", f"{self.name}_{tag}_", 1)
