"""Kernel IR: frozen dataclasses that a parsed `.ucut` program lowers into.

The IR is the contract between the stages (DESIGN.md, "How data flows"): the DSL produces it, the arch
rules check it, codegen renders it, the runtime calls the result and the tuner resolves its choices.
Nothing in here knows C++ spellings (those live in ``ucutlass.codegen``) or problem files.

Vocabulary follows CUTLASS: TileShape (``tile``), ClusterShape (``cluster``), KernelSchedule
(``schedule``), pipeline ``stages``, tile scheduler, and the epilogue visitor tree (EVT).

A setting whose value is still a search choice holds a :class:`Choice`; :meth:`GemmKernel.is_concrete`
says whether any remain, and :meth:`Program.resolve` replaces them with picked values.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Union


class DType(enum.Enum):
    """Element types a `.ucut` operand may have. The value is the `.ucut` spelling."""

    bf16 = "bf16"
    f16 = "f16"
    f32 = "f32"
    f8e4m3 = "f8e4m3"  # cutlass::float_e4m3_t, torch.float8_e4m3fn (OCP FP8, max 448)
    f8e5m2 = "f8e5m2"  # cutlass::float_e5m2_t, torch.float8_e5m2
    e2m1 = "e2m1"  # cutlass::float_e2m1_t (FP4; sm100 NVFP4), two per byte: torch.float4_e2m1fn_x2
    ue8m0 = "ue8m0"  # cutlass::float_ue8m0_t, a power-of-two scale factor (MX formats), torch.float8_e8m0fnu
    ue4m3 = "ue4m3"  # cutlass::float_ue4m3_t, the NVFP4 scale factor (stored as torch.float8_e4m3fn)

    @property
    def bits(self) -> int:
        """Width of one element in bits."""
        return {"bf16": 16, "f16": 16, "f32": 32, "e2m1": 4}.get(self.value, 8)

    @property
    def bytes(self) -> int:
        """Width of one element in bytes (0 for the 4-bit e2m1: use :attr:`bits` where it can occur)."""
        return self.bits // 8

    @property
    def is_fp8(self) -> bool:
        """True for the 8-bit float operand types f8e4m3 and f8e5m2 (wgmma/tcgen05 FP8 inputs)."""
        return self in (DType.f8e4m3, DType.f8e5m2)

    @property
    def torch_name(self) -> str:
        """The `torch.dtype` attribute name (also the SOL-ExecBench `dtype` string)."""
        return {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn",
                "f8e5m2": "float8_e5m2", "e2m1": "float4_e2m1fn_x2", "ue8m0": "float8_e8m0fnu",
                "ue4m3": "float8_e4m3fn"}[self.value]


class Layout(enum.Enum):
    """Memory order of an operand's shape *as declared*: ``row`` = last dim contiguous."""

    row = "row"
    col = "col"


class Target(enum.Enum):
    """GPU architecture a kernel is generated for (``sm90a`` / ``sm100a`` nvcc targets)."""

    sm90 = "sm90"
    sm100 = "sm100"


class Schedule(enum.Enum):
    """Mainloop KernelSchedule. ``auto`` lets the arch rules pick (``ucutlass.arch.sm90`` / ``.sm100``).

    The names are CUTLASS's type names without ``Kernel``, ``Tma`` and the arch suffix. sm90 takes
    ``cooperative``, ``pingpong`` and ``warpspecialized``; sm100 takes ``warpspecialized_1sm`` and
    ``warpspecialized_2sm`` (one tcgen05 MMA per SM, or one MMA over the two SMs of a CTA pair).
    """

    auto = "auto"
    cooperative = "cooperative"  # sm90 KernelTmaWarpSpecializedCooperative
    pingpong = "pingpong"  # sm90 KernelTmaWarpSpecializedPingpong
    warpspecialized = "warpspecialized"  # sm90 KernelTmaWarpSpecialized (not persistent)
    warpspecialized_1sm = "warpspecialized_1sm"  # sm100 KernelTmaWarpSpecialized1SmSm100
    warpspecialized_2sm = "warpspecialized_2sm"  # sm100 KernelTmaWarpSpecialized2SmSm100
    # sm90 FP8 inputs without the mainloop's periodic promotion of the wgmma accumulators to f32 (faster, less
    # exact over long K): KernelTmaWarpSpecialized{Cooperative,Pingpong,}FP8FastAccum
    cooperative_fp8_fastaccum = "cooperative_fp8_fastaccum"
    pingpong_fp8_fastaccum = "pingpong_fp8_fastaccum"
    warpspecialized_fp8_fastaccum = "warpspecialized_fp8_fastaccum"

    @property
    def base(self) -> "Schedule":
        """The schedule without its FP8 fast-accumulation variant (``cooperative_fp8_fastaccum`` -> ``cooperative``)."""
        return Schedule(self.value.replace("_fp8_fastaccum", ""))

    @property
    def fp8_fastaccum(self) -> bool:
        """True for the ``*_fp8_fastaccum`` schedules."""
        return self.value.endswith("_fp8_fastaccum")


class TileScheduler(enum.Enum):
    """CUTLASS tile scheduler: ``persistent`` (PersistentScheduler) or ``stream_k`` (StreamKScheduler)."""

    persistent = "persistent"
    stream_k = "stream_k"


class RasterOrder(enum.Enum):
    """Order in which the tile scheduler walks output tiles (CUTLASS RasterOrderOptions)."""

    auto = "auto"  # Heuristic
    along_m = "along_m"  # AlongM
    along_n = "along_n"  # AlongN


class ReductionMode(enum.Enum):
    """How the stream-K scheduler's CTAs that share an output tile (split-K or stream-K) add their partial sums
    (CUTLASS ``cutlass::gemm::kernel::detail::ReductionMode``, ``tile_scheduler_detail.hpp``)."""

    deterministic = "deterministic"  # Deterministic: in K order, each split waits for the one before (a turnstile)
    nondeterministic = "nondeterministic"  # Nondeterministic: after the first split, the others add at once


class EpilogueInputKind(enum.Enum):
    """How an extra epilogue input broadcasts over the M×N output tile.

    Named as CUTLASS names the broadcasts: ``row_vector`` is one row [N] repeated down the tile (a bias;
    Sm90RowBroadcast), ``col_vector`` one column [M] repeated across it (a per-row scale; Sm90ColBroadcast),
    ``matrix`` is a full M×N tensor (a residual; Sm90AuxLoad),
    ``scalar`` one value (alpha, beta; Sm90ScalarBroadcast).
    """

    row_vector = "row_vector"
    col_vector = "col_vector"
    matrix = "matrix"
    scalar = "scalar"


@dataclass(frozen=True)
class Pos:
    """A place in a `.ucut` source: 1-based line and column (Lark's convention)."""

    file: str = "<string>"
    line: int = 0
    column: int = 0
    end_line: int = 0
    end_column: int = 0
    start: int = -1  # character offsets into the source, -1 when unknown
    end: int = -1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Choice:
    """An open search choice ``{a, b, …}``: the tuner picks one of ``options``.

    ``options`` hold already-typed values (e.g. ``Schedule.pingpong`` or ``(128, 128, 64)``);
    ``spellings`` hold their `.ucut` text, in the same order, for reports and Optuna (whose categorical
    distributions want plain strings).
    """

    options: tuple[Any, ...]
    spellings: tuple[str, ...]
    pos: Pos = field(default_factory=Pos, compare=False)
    positions: tuple[Pos, ...] = field(default=(), compare=False)  # of each option, for diagnostics


Setting = Union[Any, Choice]


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


# --- epilogue expressions ------------------------------------------------------------------------------

UNARY_OPS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
BINARY_OPS = ("+", "-", "*")


@dataclass(frozen=True)
class Acc:
    """The accumulator tile (A·B in ``accum`` precision)."""

    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Src:
    """The source operand ``c`` (loaded by the epilogue's own TMA pipeline)."""

    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Ref:
    """A named epilogue input."""

    name: str
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Const:
    """A numeric literal, computed in the epilogue's compute type (f32)."""

    value: float
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Unary:
    """An activation applied elementwise: one of :data:`UNARY_OPS`."""

    op: str
    arg: "Expr"
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Binary:
    """``lhs op rhs`` elementwise, ``op`` in :data:`BINARY_OPS`."""

    op: str
    lhs: "Expr"
    rhs: "Expr"
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Cast:
    """``cast(x, bf16)``: ``arg`` rounded to ``dtype`` (round to nearest even) and read back as f32,
    as a PyTorch reference that stores an intermediate in ``dtype`` would (CUTLASS NumericConverter)."""

    dtype: DType
    arg: "Expr"
    pos: Pos = field(default_factory=Pos, compare=False)


Expr = Union[Acc, Src, Ref, Const, Unary, Binary, Cast]


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield every node of an epilogue expression, parents before children."""
    yield expr
    if isinstance(expr, (Unary, Cast)):
        yield from walk(expr.arg)
    elif isinstance(expr, Binary):
        yield from walk(expr.lhs)
        yield from walk(expr.rhs)


def expr_to_text(expr: Expr) -> str:
    """Render an epilogue expression back to `.ucut` syntax (fully parenthesised binaries)."""
    if isinstance(expr, Acc):
        return "acc"
    if isinstance(expr, Src):
        return "c"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, Unary):
        return f"{expr.op}({expr_to_text(expr.arg)})"
    if isinstance(expr, Cast):
        return f"cast({expr_to_text(expr.arg)}, {expr.dtype.value})"
    return f"({expr_to_text(expr.lhs)} {expr.op} {expr_to_text(expr.rhs)})"


def linear_combination(expr: Expr, scalars: Mapping[str, float] | None = None) -> tuple[float, float] | None:
    """``(alpha, beta)`` when ``expr`` is alpha·acc + beta·c with constant alpha, beta, else None.

    That is the only epilogue CUTLASS's SM90 no-smem epilogue runs (``fusion::LinearCombination`` on
    ``collective::DefaultEpilogue``, ``cutlass/epilogue/collective/builders/sm90_builder.inl``, "No-smem
    builder"), the one epilogue that writes C/D aligned to less than 16 bytes. ``scalars`` maps the names
    of literal scalar inputs (``alpha : f32 = 0.5``) to their values; any other input makes it None.
    """
    scalars = scalars or {}

    def const(e: Expr) -> float | None:
        if isinstance(e, Const):
            return e.value
        if isinstance(e, Ref) and e.name in scalars:
            return scalars[e.name]
        if isinstance(e, Binary) and e.op == "*":
            lhs, rhs = const(e.lhs), const(e.rhs)
            return None if lhs is None or rhs is None else lhs * rhs
        return None

    def lin(e: Expr) -> tuple[float, float] | None:
        if isinstance(e, Acc):
            return (1.0, 0.0)
        if isinstance(e, Src):
            return (0.0, 1.0)
        if isinstance(e, Binary) and e.op in ("+", "-"):
            lhs, rhs = lin(e.lhs), lin(e.rhs)
            if lhs is None or rhs is None:
                return None
            sign = 1.0 if e.op == "+" else -1.0
            return (lhs[0] + sign * rhs[0], lhs[1] + sign * rhs[1])
        if isinstance(e, Binary) and e.op == "*":
            for k, x in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
                factor, term = const(k), lin(x)
                if factor is not None and term is not None:
                    return (factor * term[0], factor * term[1])
        return None

    return lin(expr)


# --- kernels and programs ------------------------------------------------------------------------------

#: Settings of a GEMM kernel that may hold a :class:`Choice`, in report order.
GEMM_SETTINGS = ("target", "accum", "tile", "cluster", "schedule", "stages", "scheduler", "split_k", "raster",
                 "swizzle", "reduction_mode", "alignment", "swap_ab")
#: ``alignment`` values (elements per access of every operand's contiguous dim, capped at 16 bytes).
ALIGNMENTS = (8, 4, 2, 1)
#: Settings passed to the kernel at run time (CUTLASS tile-scheduler arguments): they do not change the
#: compiled code, so configurations that differ only in them share one build.
RUNTIME_SETTINGS = ("split_k", "raster", "swizzle", "reduction_mode")
RUNTIME_DEFAULTS = {"split_k": 1, "raster": RasterOrder.auto, "swizzle": 1,
                    "reduction_mode": ReductionMode.deterministic}
#: The name every GEMM is compiled under (:meth:`GemmKernel.build_config`): a kernel's name changes nothing in
#: its binary, so the same configuration under two names is one build.
BUILD_NAME = "kernel"


def spell_setting(v: Any) -> str:
    """A setting's value as it appears in a procedural kernel name: ``{a|b}`` for an open choice, the enum's
    spelling, ``128x128x64`` for a shape, ``1``/``0`` for a flag, ``auto`` for None."""
    if isinstance(v, Choice):
        return "{" + "|".join(v.spellings) + "}"
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, tuple):
        return "x".join(str(x) for x in v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return "auto" if v is None else str(v)


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM kernel: D = epilogue(A·B [, C, extra inputs]).

    Shapes: A is M×K, B is K×N (declared either as ``[N, K]`` or ``[K, N]``), C and D are M×N.
    ``tile`` and ``cluster`` are (M, N, K) triples (TileShape, ClusterShape; on sm100 ``tile`` is the MMA
    tile, MmaTileShape_MNK, which a ``warpspecialized_2sm`` kernel splits over two CTAs); ``stages`` is the
    mainloop pipeline depth or None for ``auto`` (StageCountAutoCarveout). ``split_k`` (> 1: split-K
    with the stream-K scheduler), ``raster``, ``swizzle`` and ``reduction_mode`` are tile-scheduler arguments given
    at run time (:data:`RUNTIME_SETTINGS`): :meth:`build_digest` ignores them.
    """

    name: str
    target: Setting
    a: Operand
    b: Operand
    d: Operand
    c: Operand | None
    accum: Setting
    tile: Setting
    cluster: Setting
    schedule: Setting
    stages: Setting
    scheduler: Setting
    epilogue_inputs: tuple[EpilogueInput, ...] = ()
    epilogue: Expr = field(default_factory=Acc)
    #: extra outputs the epilogue stores or reduces into besides d, in declaration order (:class:`EpilogueOutput`)
    epilogue_outputs: tuple[EpilogueOutput, ...] = ()
    pos: Pos = field(default_factory=Pos, compare=False)
    # positions of each setting's value, for error messages about that setting
    setting_pos: Mapping[str, Pos] = field(default_factory=dict, compare=False, hash=False)
    # run-time settings (RUNTIME_SETTINGS): split-K factor, raster order, swizzle size, how splits add up
    split_k: Setting = 1
    raster: Setting = RasterOrder.auto
    swizzle: Setting = 1
    reduction_mode: Setting = ReductionMode.deterministic
    # elements per global access of each operand's contiguous dim (capped at 16 bytes); None = auto (16
    # bytes, TMA; ucutlass.bind lowers it to what a problem's extents allow)
    alignment: Setting = None
    #: swap AB: the kernel computes Dᵀ = B·Aᵀ (:func:`transposed`), so that the problem's N runs along the tile's M
    #: (the MMA's M side) and its few rows M (decode tokens) along the tile's N. None = auto (the target's rules
    #: decide: :func:`ucutlass.arch.resolve_swap_ab`), True or False.
    swap_ab: Setting = None

    # scale factors of a and b (FP8 per-tensor or blockwise, sm100 block-scaled), see Scale
    scale_a: Scale | None = None
    scale_b: Scale | None = None
    #: ``when M <= 64`` as ``("M", 64)``: the calls this kernel serves in a dispatch (:meth:`Program.dispatch`);
    #: None for the fallback and for a kernel alone. Not compared: which calls a kernel serves changes neither its
    #: code nor :meth:`digest` (the build cache key and the kernel cache see the same kernel).
    when: tuple[str, int] | None = field(default=None, compare=False)

    family = "gemm"

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The GEMM operands in ABI order: a, b, [c], d."""
        return tuple(op for op in (self.a, self.b, self.c, self.d) if op is not None)

    @property
    def scales(self) -> tuple[Scale, ...]:
        """The declared scale factors, scale_a before scale_b."""
        return tuple(s for s in (self.scale_a, self.scale_b) if s is not None)

    @property
    def blockwise(self) -> bool:
        """True when a scale is per block (the mainloop applies it), not per tensor (the epilogue does)."""
        return any(not s.per_tensor for s in self.scales)

    @property
    def batch(self) -> tuple[str, ...]:
        """The batch dims shared by a, b and d (CUTLASS's batch mode L = their product); () when not batched."""
        return self.a.batch

    def alignment_of(self, dtype: DType) -> int:
        """Elements per access for an operand of ``dtype``: ``alignment`` capped at 16 bytes (auto: 16 bytes)."""
        full = 128 // dtype.bits  # 16 bytes (32 for the 4-bit e2m1)
        return full if self.alignment is None else min(int(self.alignment), full)

    def choices(self) -> dict[str, Choice]:
        """Open choices of this kernel, keyed by setting name (``tile``, ``a.layout``, …)."""
        found: dict[str, Choice] = {}
        for key in GEMM_SETTINGS:
            value = getattr(self, key)
            if isinstance(value, Choice):
                found[key] = value
        for op in self.operands:
            for attr in ("dtype", "layout"):
                value = getattr(op, attr)
                if isinstance(value, Choice):
                    found[f"{op.name}.{attr}"] = value
        return found

    def is_concrete(self) -> bool:
        """True when no setting holds a :class:`Choice`."""
        return not self.choices()

    def resolve(self, picks: Mapping[str, Any]) -> "GemmKernel":
        """Replace choices by picked values (typed values, not spellings); unknown keys raise KeyError."""
        kernel = self
        updates: dict[str, Any] = {}
        op_updates: dict[str, dict[str, Any]] = {}
        open_ = self.choices()
        for key, value in picks.items():
            if key not in open_:
                raise KeyError(f"kernel {self.name!r} has no open choice {key!r}; open: {sorted(open_)}")
            if "." in key:
                opname, attr = key.split(".", 1)
                op_updates.setdefault(opname, {})[attr] = value
            else:
                updates[key] = value
        for opname, attrs in op_updates.items():
            updates[opname] = dataclasses.replace(getattr(kernel, opname), **attrs)
        return dataclasses.replace(kernel, **updates)

    def config_name(self) -> str:
        """CUTLASS-style procedural name derived from the fields, e.g.
        ``up_proj_sm90_bf16_bf16_bf16_f32_128x256x64_2x1x1_cooperative_persistent_sauto``."""
        spell = spell_setting
        parts = [self.name, spell(self.target)]
        parts += [spell(op.dtype) + ("t" if op.layout is Layout.col else "") for op in self.operands]
        parts += [spell(self.accum), spell(self.tile), spell(self.cluster), spell(self.schedule),
                  spell(self.scheduler), "s" + spell(self.stages)]
        parts += [f"{s.name}{s.dtype.value}" + ("x".join(str(b) for b in s.block) if not s.per_tensor else "")
                  for s in self.scales]
        if self.batch:
            parts.append("batched")
        if self.alignment is not None:
            parts.append("align" + spell(self.alignment))
        if self.swap_ab is True:
            parts.append("swapab")
        elif isinstance(self.swap_ab, Choice):
            parts.append("swapab" + spell(self.swap_ab))
        runtime = {"split_k": "sk", "raster": "r", "swizzle": "sw", "reduction_mode": "red"}
        parts += [tag + spell(getattr(self, key)) for key, tag in runtime.items()
                  if getattr(self, key) != RUNTIME_DEFAULTS[key]]
        return "_".join(parts)

    def build_config(self) -> "GemmKernel":
        """This kernel with the run-time settings at their defaults and the name :data:`BUILD_NAME`: what the
        compiled code depends on (the kernels of a dispatch, renamed copies of tuned ones, share their builds)."""
        return dataclasses.replace(self, name=BUILD_NAME, **RUNTIME_DEFAULTS)

    def digest(self) -> str:
        """Stable sha256 of the semantic fields (positions excluded)."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def build_digest(self) -> str:
        """:meth:`digest` of :meth:`build_config`: equal for kernels that share one compiled binary."""
        return self.build_config().digest()


#: What the operand and scale names of a :func:`transposed` kernel stand for in the kernel it came from.
SWAPPED_NAMES = {"a": "b", "b": "a", "scale_a": "scale_b", "scale_b": "scale_a"}
_SWAPPED_MODES = {"M": "N", "N": "M"}
_FLIPPED_KIND = {EpilogueInputKind.row_vector: EpilogueInputKind.col_vector,
                 EpilogueInputKind.col_vector: EpilogueInputKind.row_vector}


def _swap_modes(dims: tuple[str, ...]) -> tuple[str, ...]:
    """``("M", "K")`` -> ``("N", "K")``; a scale's ``"N/128"`` -> ``"M/128"``; batch and other names unchanged."""
    out = []
    for dim in dims:
        name, _, div = dim.partition("/")
        name = _SWAPPED_MODES.get(name, name)
        out.append(f"{name}/{div}" if div else name)
    return tuple(out)


def transposed(kernel: GemmKernel) -> GemmKernel:
    """The same GEMM written as Dᵀ = B·Aᵀ: what a ``swap_ab`` kernel gives CUTLASS.

    CUTLASS's M is the problem's N and its N the problem's M: the returned kernel's ``a`` is the problem's b and its
    ``b`` the problem's a (:data:`SWAPPED_NAMES`), and M and N are exchanged in the dims of every operand, epilogue
    input and output, so each declaration keeps its memory and its layout reads the other way: ``d : bf16[M, N] row``
    becomes ``[N, M] row`` (CUTLASS's column-major D), a bias ``[N]`` (a row vector, Sm90RowBroadcast) becomes ``[M]``
    (a column vector, Sm90ColBroadcast), an ``[M]`` reduction over N (Sm90ColReduction) one over CUTLASS's M
    (Sm90RowReduction). The epilogue expression, the tile and every other setting are unchanged, and ``swap_ab`` is
    False: the result is an ordinary kernel that the rules and templates take as it is.
    """
    def flip(x):
        kind = getattr(x, "kind", None)
        changes: dict[str, Any] = {"dims": _swap_modes(x.dims)}
        if kind in _FLIPPED_KIND:
            changes["kind"] = _FLIPPED_KIND[kind]
        return dataclasses.replace(x, **changes)

    def rename(x, name):
        return None if x is None else dataclasses.replace(flip(x), name=name)

    setting_pos = {}
    for key, where in (kernel.setting_pos or {}).items():
        head, dot, rest = key.partition(".")
        setting_pos[(SWAPPED_NAMES.get(head, head) + dot + rest) if dot else key] = where
    return dataclasses.replace(
        kernel, a=rename(kernel.b, "a"), b=rename(kernel.a, "b"), c=flip(kernel.c) if kernel.c else None,
        d=flip(kernel.d), epilogue_inputs=tuple(flip(i) for i in kernel.epilogue_inputs),
        epilogue_outputs=tuple(flip(o) for o in kernel.epilogue_outputs),
        scale_a=rename(kernel.scale_b, "scale_a"), scale_b=rename(kernel.scale_a, "scale_b"),
        swap_ab=False, setting_pos=setting_pos)


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


Kernel = GemmKernel


@dataclass(frozen=True)
class Program:
    """A parsed `.ucut` file: its kernels, plus the source text for reports and concrete re-rendering."""

    kernels: tuple[Kernel, ...]
    source: str = ""
    file: str = "<string>"

    def kernel(self, name: str | None = None) -> Kernel:
        """The kernel called ``name``, or the only kernel when ``name`` is None.

        Raises:
            KeyError: no such kernel, or ``name`` is None and the program has several.
        """
        if name is None:
            if len(self.kernels) != 1:
                raise KeyError(f"{self.file} has {len(self.kernels)} kernels; name one of "
                               f"{[k.name for k in self.kernels]}")
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in {self.file}; kernels: {[k.name for k in self.kernels]}")

    def dispatch(self) -> tuple[Kernel, ...]:
        """The kernels of a dispatch in the order a call tries them, or () when no kernel has ``when``.

        A program in which a kernel has ``when MODE <= NUMBER`` is one solution: each call runs the first kernel
        whose condition holds for the call's (M, N, K), the last kernel (no ``when``) every other call
        (:func:`ucutlass.dispatch.pick`). The lowering checked that every kernel is a gemm binding the same
        tensors, that only the last lacks ``when`` and that each can run (:mod:`ucutlass.dispatch`).
        """
        if not any(getattr(k, "when", None) for k in self.kernels):
            return ()
        return self.kernels

    def choices(self) -> dict[str, Choice]:
        """All open choices, keyed ``kernel.setting`` (e.g. ``up_proj.tile``)."""
        return {f"{k.name}.{key}": c for k in self.kernels for key, c in k.choices().items()}

    def is_concrete(self) -> bool:
        """True when no kernel has an open choice."""
        return all(k.is_concrete() for k in self.kernels)

    def resolve(self, picks: Mapping[str, Any]) -> "Program":
        """Pick values for choices keyed ``kernel.setting``; returns a new Program with new source text.

        ``picks`` values may be typed values or their `.ucut` spellings. The returned program's
        ``source`` has each resolved ``{…}`` replaced by the picked spelling, so comments survive.
        """
        all_choices = self.choices()
        per_kernel: dict[str, dict[str, Any]] = {}
        replacements: list[tuple[int, int, str]] = []
        for key, value in picks.items():
            if key not in all_choices:
                raise KeyError(f"no open choice {key!r} (valid: {', '.join(sorted(all_choices))})")
            choice = all_choices[key]
            if value in choice.spellings and value not in choice.options:
                value = choice.options[choice.spellings.index(value)]
            if value not in choice.options:
                raise ValueError(f"{key} = {value} is not one of the options (valid: {', '.join(choice.spellings)})")
            spelling = choice.spellings[choice.options.index(value)]
            kname, setting = key.split(".", 1)
            per_kernel.setdefault(kname, {})[setting] = value
            if choice.pos.start >= 0:
                replacements.append((choice.pos.start, choice.pos.end, spelling))
        kernels = tuple(k.resolve(per_kernel.get(k.name, {})) for k in self.kernels)
        if not self.source:
            return dataclasses.replace(self, kernels=kernels)
        source = self.source
        for start, end, text in sorted(replacements, reverse=True):
            source = source[:start] + text + source[end:]
        # Re-parse so that the choices still open carry offsets into the new text.
        from .dsl import parse

        resolved = parse(source, self.file)
        if resolved.kernels != kernels:
            raise AssertionError("resolving the source text and the IR disagree; please report this")
        return resolved


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Pos):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__type__": type(value).__name__}
        for f in dataclasses.fields(value):
            if f.compare:
                out[f.name] = _jsonable(getattr(value, f.name))
        return out
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def canonical_json(value: Any) -> str:
    """Sorted, position-free JSON of an IR value: the input of every digest."""
    return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"))


def to_dict(value: Any) -> Any:
    """Plain JSON-able view of an IR value (positions dropped), for ``--json`` output and workers."""
    return _jsonable(value)
