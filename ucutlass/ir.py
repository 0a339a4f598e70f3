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

    @property
    def bits(self) -> int:
        """Width of one element in bits."""
        return {"bf16": 16, "f16": 16, "f32": 32}[self.value]

    @property
    def bytes(self) -> int:
        """Width of one element in bytes."""
        return self.bits // 8

    @property
    def torch_name(self) -> str:
        """The `torch.dtype` attribute name (also the SOL-ExecBench `dtype` string)."""
        return {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[self.value]


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


class TileScheduler(enum.Enum):
    """CUTLASS tile scheduler: ``persistent`` (PersistentScheduler) or ``stream_k`` (StreamKScheduler)."""

    persistent = "persistent"
    stream_k = "stream_k"


class RasterOrder(enum.Enum):
    """Order in which the tile scheduler walks output tiles (CUTLASS RasterOrderOptions)."""

    auto = "auto"  # Heuristic
    along_m = "along_m"  # AlongM
    along_n = "along_n"  # AlongN


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

    @property
    def contiguous_dim(self) -> str:
        """Name of the mode that is contiguous in memory (requires a concrete layout)."""
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


Expr = Union[Acc, Src, Ref, Const, Unary, Binary]


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield every node of an epilogue expression, parents before children."""
    yield expr
    if isinstance(expr, Unary):
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
    return f"({expr_to_text(expr.lhs)} {expr.op} {expr_to_text(expr.rhs)})"


# --- kernels and programs ------------------------------------------------------------------------------

#: Settings of a GEMM kernel that may hold a :class:`Choice`, in report order.
GEMM_SETTINGS = ("target", "accum", "tile", "cluster", "schedule", "stages", "scheduler", "split_k", "raster",
                 "swizzle")
#: Settings passed to the kernel at run time (CUTLASS tile-scheduler arguments): they do not change the
#: compiled code, so configurations that differ only in them share one build.
RUNTIME_SETTINGS = ("split_k", "raster", "swizzle")
RUNTIME_DEFAULTS = {"split_k": 1, "raster": RasterOrder.auto, "swizzle": 1}


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM kernel: D = epilogue(A·B [, C, extra inputs]).

    Shapes: A is M×K, B is K×N (declared either as ``[N, K]`` or ``[K, N]``), C and D are M×N.
    ``tile`` and ``cluster`` are (M, N, K) triples (TileShape, ClusterShape; on sm100 ``tile`` is the MMA
    tile, MmaTileShape_MNK, which a ``warpspecialized_2sm`` kernel splits over two CTAs); ``stages`` is the
    mainloop pipeline depth or None for ``auto`` (StageCountAutoCarveout). ``split_k`` (> 1: split-K
    with the stream-K scheduler), ``raster`` and ``swizzle`` are tile-scheduler arguments given at run
    time (:data:`RUNTIME_SETTINGS`): :meth:`build_digest` ignores them.
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
    pos: Pos = field(default_factory=Pos, compare=False)
    # positions of each setting's value, for error messages about that setting
    setting_pos: Mapping[str, Pos] = field(default_factory=dict, compare=False, hash=False)
    # run-time settings (RUNTIME_SETTINGS): split-K factor, raster order, swizzle size
    split_k: Setting = 1
    raster: Setting = RasterOrder.auto
    swizzle: Setting = 1

    family = "gemm"

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The GEMM operands in ABI order: a, b, [c], d."""
        return tuple(op for op in (self.a, self.b, self.c, self.d) if op is not None)

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
        def spell(v: Any) -> str:
            if isinstance(v, Choice):
                return "{" + "|".join(v.spellings) + "}"
            if isinstance(v, enum.Enum):
                return v.value
            if isinstance(v, tuple):
                return "x".join(str(x) for x in v)
            return "auto" if v is None else str(v)

        parts = [self.name, spell(self.target)]
        parts += [spell(op.dtype) + ("t" if op.layout is Layout.col else "") for op in self.operands]
        parts += [spell(self.accum), spell(self.tile), spell(self.cluster), spell(self.schedule),
                  spell(self.scheduler), "s" + spell(self.stages)]
        runtime = {"split_k": "sk", "raster": "r", "swizzle": "sw"}
        parts += [tag + spell(getattr(self, key)) for key, tag in runtime.items()
                  if getattr(self, key) != RUNTIME_DEFAULTS[key]]
        return "_".join(parts)

    def build_config(self) -> "GemmKernel":
        """This kernel with the run-time settings at their defaults: what the compiled code depends on."""
        return dataclasses.replace(self, **RUNTIME_DEFAULTS)

    def digest(self) -> str:
        """Stable sha256 of the semantic fields (positions excluded)."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def build_digest(self) -> str:
        """:meth:`digest` of :meth:`build_config`: equal for kernels that share one compiled binary."""
        return self.build_config().digest()


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
                raise KeyError(f"no open choice {key!r}; open: {sorted(all_choices)}")
            choice = all_choices[key]
            if value in choice.spellings and value not in choice.options:
                value = choice.options[choice.spellings.index(value)]
            if value not in choice.options:
                raise ValueError(f"{key}: {value!r} is not one of {list(choice.spellings)}")
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
