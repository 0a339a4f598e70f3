"""The grouped GEMM kernel (CUTLASS ptr-array grouped GEMM) and its group operand's index types."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .gemm import GemmKernel
from .operands import Operand


class IndexType(enum.Enum):
    """Integer element types of a grouped GEMM's group operand (``m_sizes : i32[G]``)."""

    i32 = "i32"
    i64 = "i64"

    @property
    def bits(self) -> int:
        """Width of one element in bits."""
        return 32 if self is IndexType.i32 else 64

    @property
    def bytes(self) -> int:
        """Width of one element in bytes."""
        return self.bits // 8

    @property
    def torch_name(self) -> str:
        """The `torch.dtype` attribute name (also the SOL-ExecBench `dtype` string)."""
        return "int32" if self is IndexType.i32 else "int64"


#: Names of a grouped GEMM's group operand and what its G values hold: ``m_sizes`` the rows of each group
#: (``torch.bincount`` of the expert ids), ``m_offsets`` the cumulative row ends (``m_sizes.cumsum(0)``,
#: the ``offs`` of ``torch._grouped_mm``).
GROUP_OPERANDS = ("m_sizes", "m_offsets")


@dataclass(frozen=True)
class GroupedGemmKernel(GemmKernel):
    """A grouped GEMM (CUTLASS ptr-array grouped GEMM): one GEMM per group g, D_g = epilogue(A_g · B_gᵀ).

    Rows of ``a`` ([M, K] row, M = all groups' rows, sorted by group) and ``d`` ([M, N] row) are split into G
    consecutive groups by ``groups`` (``m_sizes`` or ``m_offsets``, :data:`GROUP_OPERANDS`, an
    :class:`IndexType` vector of G values read on the device at run time); ``b`` is declared ``[G, N, K]`` or
    ``[G, K, N]`` (one weight per group, stacked, row-major). Groups may have 0 rows. Epilogue inputs:
    ``[N]`` (one row for all groups), ``[G, N]`` (one row per group), ``[M]`` (one value per row) and scalars.
    """

    groups: Operand | None = None

    family = "grouped_gemm"

    def config_name(self) -> str:
        """:meth:`GemmKernel.config_name` with ``grouped`` and the group operand, e.g.
        ``experts_grouped_m_sizes_i32_sm90_bf16_bf16_bf16_f32_128x128x64_1x1x1_cooperative_persistent_sauto``."""
        base = super().config_name()
        tag = f"grouped_{self.groups.name}_{getattr(self.groups.dtype, 'value', self.groups.dtype)}" \
            if self.groups is not None else "grouped"
        return base.replace(self.name + "_", f"{self.name}_{tag}_", 1)
