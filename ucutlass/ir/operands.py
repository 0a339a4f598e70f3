"""Operands, scale factors and the epilogue's inputs and outputs: the tensors a kernel reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import Pos
from .values import DType, EpilogueInputKind, Layout, Setting

if TYPE_CHECKING:
    from .expr import Expr


@dataclass(frozen=True)
class Operand:
    """A GEMM operand: ``a`` (M×K), ``b`` (N×K or K×N), ``c`` (source, M×N) or ``d`` (output, M×N).

    ``dims`` are the declared mode names in declared order (e.g. ``("N", "K")``); ``layout`` says which of
    them is contiguous (``row``: the last). ``binding`` is the problem tensor it binds to, or None.
    Leading dimensions of the bound tensor fold into the first declared mode (M = batch·seq).
    """

    name: str
    dtype: Setting
    dims: tuple[str, ...]
    layout: Setting
    binding: str | None = None
    pos: Pos = field(default_factory=Pos, compare=False)
    #: leading batch dims (``("B", "H")`` for ``a : bf16[B, H, M, K]``), outermost: together they are CUTLASS's
    #: batch mode L (ProblemShape (M, N, K, L); its stride is read from the tensor at run time); ``layout`` applies
    #: to ``dims`` only. A batched kernel's b may have none (one b for every batch).
    batch: tuple[str, ...] = ()
    #: a view of the bound tensor, one entry per leading dim (``<- hidden_states[:, -keep:]``): ``":"`` (all),
    #: ``"NAME:"`` (from axis NAME on) or ``"-NAME:"`` (the last NAME); applied in :mod:`ucutlass.bind`
    slice: tuple[str, ...] = ()

    @property
    def contiguous_dim(self) -> str:
        """Name of the mode that is contiguous in memory (requires a concrete layout)."""
        return self.dims[-1] if self.layout is Layout.row else self.dims[0]


def split_dim(dim: str) -> tuple[str, int]:
    """``"K/128"`` -> ``("K", 128)``; a plain mode name ``"M"`` -> ``("M", 1)``."""
    name, _, div = dim.partition("/")
    return name, int(div) if div else 1


#: Scale-factor declarations and the operand each scales.
SCALE_OPERANDS = {"scale_a": "a", "scale_b": "b"}


@dataclass(frozen=True)
class Scale:
    """Scale factors of operand ``a`` or ``b``: the GEMM computes with dequantised inputs a·scale_a, b·scale_b.

    ``scale_a : f32 <- sa`` (no dims) is one per-tensor value read from device memory (a 1-element tensor),
    applied in the epilogue (acc × scale_a × scale_b, CUTLASS's Sm90ScalarBroadcast over the two pointers).
    ``scale_a : f32[M, K/128] row <- x_scale`` is blockwise: one value per 1×128 block of A; the divisors are
    CUTLASS's ScaleGranularityM/N/K (``cutlass/detail/blockwise_scale_layout.hpp``), and the mainloop applies
    them (sm90: MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8). On sm100 ``ue4m3[M, K/16]`` (NVFP4) and
    ``ue8m0[M, K/32]`` (MXFP8) scale factors feed the block-scaled tcgen05 MMA; they are stored in CUTLASS's
    interleaved 128×4 atom layout (``Sm1xxBlockScaledConfig``, ``cutlass/detail/sm100_blockscaled_layout.hpp``).

    ``dims`` keep their spelling (``("M", "K/128")``, see :func:`split_dim`); ``layout`` says which declared dim
    is contiguous, as for operands.
    """

    name: str  # scale_a | scale_b
    dtype: DType
    dims: tuple[str, ...] = ()
    layout: Layout = Layout.row
    binding: str | None = None
    pos: Pos = field(default_factory=Pos, compare=False)

    @property
    def operand(self) -> str:
        """The operand it scales: ``a`` or ``b``."""
        return SCALE_OPERANDS[self.name]

    @property
    def per_tensor(self) -> bool:
        """True for one value for the whole operand (no dims)."""
        return not self.dims

    @property
    def block(self) -> tuple[int, int]:
        """Elements per scale along the operand's (M or N, K) modes, e.g. (1, 128); (0, 0) when per-tensor."""
        if self.per_tensor:
            return (0, 0)
        divs = dict(split_dim(d) for d in self.dims)
        return divs.get("M", divs.get("N", 1)), divs.get("K", 1)

    @property
    def contiguous_dim(self) -> str:
        """The declared dim (with its divisor, ``"K/128"``) that is contiguous in memory."""
        return self.dims[-1] if self.layout is Layout.row else self.dims[0]


@dataclass(frozen=True)
class EpilogueInput:
    """An extra tensor or scalar read by the epilogue (``bias : bf16[N] <- q_bias``).

    ``value`` is a literal for a scalar given in the program (``alpha : f32 = 0.5``), else None.
    """

    name: str
    kind: EpilogueInputKind
    dtype: DType
    dims: tuple[str, ...] = ()
    layout: Layout = Layout.row
    binding: str | None = None
    value: float | None = None
    pos: Pos = field(default_factory=Pos, compare=False)
    #: leading batch dims: the kernel's batch dims (one vector or matrix per batch, strided by L) or
    #: () (one for all batches, broadcast over L with batch stride 0).
    batch: tuple[str, ...] = ()


@dataclass(frozen=True)
class EpilogueOutput:
    """An extra output the epilogue writes besides ``d`` (declared with ``->`` in the epilogue block).

    ``kind`` is ``matrix`` for a full M×N tensor (``pre : bf16[M, N] row -> pre_act``; CUTLASS Sm90AuxStore),
    ``col_vector`` for one value per row m (``[M]``, reduced over N; Sm90ColReduction) or ``row_vector`` for one
    value per column n (``[N]``, reduced over M; Sm90RowReduction). ``reduce`` is None for a matrix, else
    ``"sum"`` or ``"max"``; ``value`` is the expression stored (for a reduction: the one reduced), in f32.
    """

    name: str
    kind: EpilogueInputKind
    dtype: DType
    dims: tuple[str, ...]
    value: "Expr"
    reduce: str | None = None
    layout: Layout = Layout.row
    binding: str | None = None
    pos: Pos = field(default_factory=Pos, compare=False)
    #: batch dims, as :attr:`EpilogueInput.batch` (outputs of batched kernels are not supported yet: always ())
    batch: tuple[str, ...] = ()
