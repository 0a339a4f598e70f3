"""The `.ucut` language: parse text into :class:`ucutlass.ir.Program` and check it against the arch rules.

Three steps, each a plain function of the one before (DESIGN.md, "How data flows"):

1. **parse** — Lark (LALR) with ``grammar/ucut.lark``, loaded through :mod:`importlib.resources` and cached;
   positions are propagated so that every node knows its line, column and character offsets.
2. **AST** — a :class:`lark.Transformer`, run as a separate step, turns the tree into small frozen
   dataclasses that still hold source spellings and positions.
3. **lower** — names are resolved against the tables below (settings, dtypes, schedules, activations, …),
   defaults filled in, epilogue intermediates inlined, and every problem found is collected as a
   :class:`~ucutlass.errors.Diagnostic`; if any, :class:`~ucutlass.errors.UcutSyntaxError` is raised with
   all of them.

:func:`check` then runs the architecture rules of each kernel's target (:func:`ucutlass.arch.check_kernel`:
:mod:`~ucutlass.arch.sm90` or :mod:`~ucutlass.arch.sm100`) on a lowered kernel, and on a kernel with open
``{…}`` choices checks every combination (:func:`legal_combinations`).

Example:
    >>> from ucutlass import dsl
    >>> prog = dsl.parse('''
    ... kernel k : gemm {
    ...   a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
    ...   tile = {128x128x64, 64x128x64}
    ... }''')
    >>> sorted(prog.choices())
    ['k.tile']
    >>> dsl.check(prog)[0].message
    '2 of 2 combinations of the open choices (tile) pass the sm90 rules'
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from . import ir
from .errors import Diagnostic, UcutSyntaxError, excerpt
from .errors import did_you_mean as _did_you_mean  # the name the family modules import
from .ir import (Acc, Binary, Cast, Choice, Const, DType, EpilogueInput, EpilogueInputKind, EpilogueOutput, Expr,
                 GemmKernel, RasterOrder, ReductionMode,
                 Layout, Operand, Pos, Program, Ref, Schedule, Src, Target, TileScheduler, Unary)

__all__ = [
    "parse", "parse_file", "check", "legal_combinations", "distinct_combinations",
    "FAMILIES", "TARGETS", "DTYPES", "LAYOUTS", "SCHEDULES", "SCHEDULERS", "RASTERS", "REDUCTION_MODES", "ACTIVATIONS", "REDUCTIONS", "FUNCTIONS", "SETTINGS",
    "DEFAULTS", "ERROR_CODES", "OPERAND_DIMS", "EPILOGUE_DIMS", "KEYWORDS", "SettingSpec",
]

# --- the vocabulary: every word the lowering accepts, in one place --------------------------------------

#: Kernel families (``kernel NAME : FAMILY``): GEMM, attention (FMHA) and grouped GEMM (ucutlass.grouped).
FAMILIES = ("gemm", "attention", "grouped_gemm",)
#: ``target`` values (:class:`ucutlass.ir.Target`).
TARGETS = tuple(t.value for t in Target)
#: Element types of operands, epilogue inputs and ``accum`` (:class:`ucutlass.ir.DType`).
DTYPES = tuple(d.value for d in DType)
#: Scale-factor-only dtypes (sm100 block-scaled); the dtypes an error lists for an operand and for a scale.
SCALE_ONLY_DTYPES = ("ue8m0", "ue4m3")
OPERAND_DTYPES = tuple(d for d in DTYPES if d not in SCALE_ONLY_DTYPES)
SCALE_DTYPES = ("f32",) + SCALE_ONLY_DTYPES
#: Operand layouts: ``row`` = the last declared dim is contiguous, ``col`` = the first.
LAYOUTS = tuple(lay.value for lay in Layout)
#: ``schedule`` values (:class:`ucutlass.ir.Schedule`).
SCHEDULES = tuple(s.value for s in Schedule)
#: ``scheduler`` values (:class:`ucutlass.ir.TileScheduler`).
SCHEDULERS = tuple(s.value for s in TileScheduler)
#: ``raster`` values (:class:`ucutlass.ir.RasterOrder`).
RASTERS = tuple(r.value for r in RasterOrder)
#: ``reduction_mode`` values (:class:`ucutlass.ir.ReductionMode`).
REDUCTION_MODES = tuple(r.value for r in ReductionMode)
#: Functions an epilogue expression may call, each with one argument.
ACTIVATIONS = ir.UNARY_OPS
#: Reductions an epilogue output statement may call: ``_n`` reduces over N into an ``[M]`` output (one value
#: per row; CUTLASS Sm90ColReduction), ``_m`` over M into an ``[N]`` output (Sm90RowReduction).
REDUCTIONS: dict[str, tuple[str, str]] = {"sum_n": ("sum", "M"), "max_n": ("max", "M"), "sum_m": ("sum", "N"),
                                          "max_m": ("max", "N")}
#: Every function an epilogue expression may call: the activations, ``cast(x, DTYPE)`` and the reductions.
FUNCTIONS = ACTIVATIONS + ("cast",) + tuple(REDUCTIONS)
#: Words with a fixed meaning: block keywords, layouts, ``auto``, and the epilogue's ``acc`` and ``c``.
KEYWORDS = ("kernel", "when", "epilogue", "row", "col", "auto", "acc", "c")

#: GEMM operands and the dim names each must be declared over (in either order).
OPERAND_DIMS: dict[str, tuple[str, str]] = {"a": ("M", "K"), "b": ("N", "K"), "c": ("M", "N"), "d": ("M", "N")}
_REQUIRED_OPERANDS = ("a", "b", "d")
#: The entries of a slice of a bound input (``a : bf16[B, M, K] row <- hidden_states[:, -keep:]``).
SLICE_FORMS = (":", "NAME:", "-NAME:")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")

#: Epilogue input dims and the broadcast kind they lower to (no dims: a scalar).
EPILOGUE_DIMS: dict[tuple[str, ...], EpilogueInputKind] = {
    ("N",): EpilogueInputKind.row_vector,
    ("M",): EpilogueInputKind.col_vector,
    ("M", "N"): EpilogueInputKind.matrix,
    ("N", "M"): EpilogueInputKind.matrix,
    (): EpilogueInputKind.scalar,
}


#: Diagnostic codes of :func:`parse` and :func:`check` (arch rule codes are in ``ucutlass.arch.RULES``).
ERROR_CODES: dict[str, str] = {
    "syntax": "the text does not parse",
    "unknown-family": "kernel family other than gemm",
    "unknown-setting": "a setting name that does not exist",
    "duplicate-setting": "a setting given twice",
    "bad-value": "a setting value of the wrong kind",
    "duplicate-option": "the same option twice in {…}",
    "unknown-dtype": "a dtype other than bf16, f16, f32",
    "bad-layout": "a layout other than row or col, or a layout on a vector or scalar",
    "unknown-operand": "a kernel-level declaration other than a, b, c, d",
    "duplicate-operand": "an operand declared twice",
    "missing-operand": "a, b or d not declared",
    "bad-dims": "dims that do not fit the operand or input",
    "bad-binding": "'<-' on d, '->' on an input, a value on a tensor, or a slice other than ':', 'NAME:', '-NAME:' "
                   "or not on a, b, c",
    "bad-output": "an extra output (->) not over [M, N], [M] or [N], a non-f32 reduction, or a misused reduction",
    "reads-output": "a statement reads a reduction output (complete only after the kernel)",
    "duplicate-epilogue": "two epilogue blocks",
    "duplicate-kernel": "two kernels with one name",
    "bad-when": "a dispatch condition other than when M, N or K <= a whole number, or on a kernel other than gemm",
    "dispatch-order": "a dispatch kernel that can never run (after the fallback, or bounds not increasing), or "
                      "a last kernel with when",
    "dispatch-mismatch": "dispatch kernels that bind other tensors or compute another epilogue, or are not gemms",
    "duplicate-input": "an epilogue input declared twice",
    "bad-name": "an epilogue input named acc, a, b, c, d or like a function",
    "choice-not-allowed": "{…} in an epilogue input",
    "unsupported": "'/', and extra outputs of a batched kernel (later)",
    "bad-assignment": "an assignment to a reserved or input name, twice, or after d",
    "missing-output": "no d = … in the epilogue, or a declared output never assigned",
    "unused-acc": "the epilogue does not read acc",
    "unused-input": "a declared input (or c) the epilogue never reads",
    "unused-name": "an intermediate never used",
    "undefined-name": "a name that is not acc, c, an input or an earlier intermediate",
    "unknown-function": "a call of something other than the activations",
    "bad-call": "a function called with the wrong arguments",
    "choices": "check's summary of the combinations of open choices",
    "dead-option": "a warning: an option of {…} that no legal combination uses",
}


class _Bad(Exception):
    """A value that does not fit where it is written: message and the valid spellings."""

    def __init__(self, message: str, valid: Sequence[str] = (), code: str = "bad-value"):
        super().__init__(message)
        self.message = message
        self.valid = tuple(valid)
        self.code = code


def _enum_converter(setting: str, enum_type: type, names: Sequence[str], what: str) -> Callable[["_Atom"], Any]:
    def convert(atom: _Atom) -> Any:
        if atom.kind == "name" and atom.text in names:
            return enum_type(atom.text)
        code = "unknown-dtype" if enum_type is DType else "bad-value"
        raise _Bad(f"{setting} = {atom.text} is not {what}{_did_you_mean(atom.text, names)}", names, code)
    return convert


def _shape_converter(setting: str, example: str) -> Callable[["_Atom"], tuple[int, int, int]]:
    def convert(atom: _Atom) -> tuple[int, int, int]:
        if atom.kind == "shape":
            parts = tuple(int(p) for p in atom.text.split("x"))
            if len(parts) == 3 and all(p > 0 for p in parts):
                return parts  # type: ignore[return-value]
        raise _Bad(f"{setting} = {atom.text} is not a shape M x N x K with positive extents, e.g. {example}")
    return convert


def _whole_number(setting: str, examples: Sequence[str]) -> Callable[["_Atom"], int]:
    def convert(atom: _Atom) -> int:
        if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
            return int(atom.text)
        raise _Bad(f"{setting} = {atom.text} is not a whole number > 0", examples)
    return convert


def _alignment(atom: _Atom) -> int | None:
    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) in ir.ALIGNMENTS:
        return int(atom.text)
    raise _Bad(f"alignment = {atom.text} is neither auto nor elements per access 8, 4, 2 or 1",
               ("auto",) + tuple(str(a) for a in ir.ALIGNMENTS))


#: Spellings of a flag setting that the rules may decide (``swap_ab``) and the IR value of each.
FLAGS = {"auto": None, "true": True, "false": False}


def _flag(setting: str) -> Callable[["_Atom"], bool | None]:
    def convert(atom: _Atom) -> bool | None:
        if atom.kind == "name" and atom.text in FLAGS:
            return FLAGS[atom.text]
        raise _Bad(f"{setting} = {atom.text} is not one of auto, true, false{_did_you_mean(atom.text, tuple(FLAGS))}",
                   tuple(FLAGS))
    return convert


def _stages(atom: _Atom) -> int | None:
    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
        return int(atom.text)
    raise _Bad(f"stages = {atom.text} is neither auto nor a whole number of pipeline stages", ("auto", "2", "3", "4"))


@dataclass(frozen=True)
class SettingSpec:
    """One kernel setting: its name, what it holds, its default and how a written value is read.

    Attributes:
        name: the setting's name in `.ucut` (also the :class:`~ucutlass.ir.GemmKernel` field).
        doc: one line for the card and error messages.
        valid: the valid spellings when the set is closed, else examples.
        default: the spelling used when the setting is absent.
        convert: reads one atom into the typed IR value, raising ``_Bad``.
    """

    name: str
    doc: str
    valid: tuple[str, ...]
    default: str
    convert: Callable[["_Atom"], Any]


#: Settings of a ``gemm`` kernel, in :data:`ucutlass.ir.GEMM_SETTINGS` order.
SETTINGS: dict[str, SettingSpec] = {s.name: s for s in (
    SettingSpec("target", "GPU architecture", TARGETS, "sm90",
                _enum_converter("target", Target, TARGETS, "a known target")),
    SettingSpec("accum", "accumulator type of A·B", DTYPES, "f32",
                _enum_converter("accum", DType, DTYPES, "a dtype")),
    SettingSpec("tile", "CTA tile M x N x K (CUTLASS TileShape)", ("128x128x64", "128x256x64", "64x128x64"),
                "128x128x64", _shape_converter("tile", "128x128x64")),
    SettingSpec("cluster", "thread-block cluster M x N x K (CUTLASS ClusterShape)", ("1x1x1", "2x1x1", "1x2x1"),
                "1x1x1", _shape_converter("cluster", "2x1x1")),
    SettingSpec("schedule", "mainloop kernel schedule", SCHEDULES, "auto",
                _enum_converter("schedule", Schedule, SCHEDULES, "a schedule")),
    SettingSpec("stages", "mainloop pipeline stages: auto or a number", ("auto", "2", "3", "4"), "auto", _stages),
    SettingSpec("scheduler", "tile scheduler", SCHEDULERS, "persistent",
                _enum_converter("scheduler", TileScheduler, SCHEDULERS, "a tile scheduler")),
    SettingSpec("split_k", "split-K factor, > 1 needs scheduler stream_k (given at run time)",
                ("1", "2", "4", "8"), "1", _whole_number("split_k", ("1", "2", "4", "8"))),
    SettingSpec("raster", "order the tile scheduler walks output tiles (given at run time)", RASTERS, "auto",
                _enum_converter("raster", RasterOrder, RASTERS, "a raster order")),
    SettingSpec("swizzle", "tile-scheduler swizzle size (given at run time)", ("1", "2", "4", "8"), "1",
                _whole_number("swizzle", ("1", "2", "4", "8"))),
    SettingSpec("reduction_mode", "how split-K / stream-K partial sums add up (given at run time)", REDUCTION_MODES,
                "deterministic", _enum_converter("reduction_mode", ReductionMode, REDUCTION_MODES, "a reduction mode")),
    SettingSpec("alignment", "elements per access of each operand's contiguous dim (auto: 16 bytes, TMA)",
                ("auto", "8", "4", "2", "1"), "auto", _alignment),
    SettingSpec("swap_ab", "compute Dᵀ = B·Aᵀ: the tile's M runs along N, its N along the (few) rows M",
                tuple(FLAGS), "auto", _flag("swap_ab")),
)}
assert tuple(SETTINGS) == ir.GEMM_SETTINGS


def _schedule_converter(k: "_Kernel", rules: Mapping[Target, Any]) -> Callable[["_Atom"], Any]:
    """The ``schedule`` converter of kernel ``k``: its valid list names the schedules of the kernel's target
    (``rules[target].SCHEDULES``; sm90 when no target is written) first; all of them when the target is open."""
    written = [it.value for it in k.items if isinstance(it, _Setting) and it.name == "target"]
    target = written[0].text if written and isinstance(written[0], _Atom) else None if written else "sm90"
    if target not in TARGETS:
        return SETTINGS["schedule"].convert
    own = tuple(s.value for s in rules[Target(target)].SCHEDULES)
    return _enum_converter("schedule", Schedule, own + tuple(s for s in SCHEDULES if s not in own), "a schedule")


# --- the parser ------------------------------------------------------------------------------------------

@functools.cache
def _parser() -> Lark:
    """The LALR parser for ``ucut.lark``, built once per process."""
    text = (resources.files("ucutlass.grammar") / "ucut.lark").read_text(encoding="utf-8")
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=True)


# --- AST: the parse tree as small dataclasses, still in source spellings ----------------------------------

@dataclass(frozen=True)
class _Atom:
    kind: str  # "shape" | "number" | "name"
    text: str
    pos: Pos


@dataclass(frozen=True)
class _Choice:
    items: tuple[_Atom, ...]
    pos: Pos


_Value = Union[_Atom, _Choice]


@dataclass(frozen=True)
class _Source:
    kind: str  # "in" (<-) | "out" (->) | "literal" (= number)
    text: str
    pos: Pos
    slice: "_Slice | None" = None  # <- x[:, -keep:]


@dataclass(frozen=True)
class _Slice:
    """``[:, -keep:]`` after a bound name: per leading dim of the tensor, (start, stop, pos) ("" when not written)."""

    dims: tuple[tuple[str, str, Pos], ...]
    pos: Pos


@dataclass(frozen=True)
class _Dims:
    names: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True)
class _Decl:
    name: str
    name_pos: Pos
    dtype: _Value
    dims: _Dims | None
    layout: _Value | None
    source: _Source | None
    pos: Pos


@dataclass(frozen=True)
class _Setting:
    name: str
    name_pos: Pos
    value: _Value
    pos: Pos


@dataclass(frozen=True)
class _Num:
    text: str
    pos: Pos


@dataclass(frozen=True)
class _Name:
    name: str
    pos: Pos


@dataclass(frozen=True)
class _Call:
    name: str
    args: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class _BinOp:
    op: str
    lhs: Any
    rhs: Any
    pos: Pos


@dataclass(frozen=True)
class _Neg:
    arg: Any
    pos: Pos


@dataclass(frozen=True)
class _Assign:
    name: str
    name_pos: Pos
    expr: Any
    pos: Pos


@dataclass(frozen=True)
class _Epilogue:
    items: tuple[Union[_Decl, _Assign], ...]
    pos: Pos


@dataclass(frozen=True)
class _When:
    """``when M <= 64`` in a kernel's header (a dispatch condition; lowered in :mod:`ucutlass.dispatch`)."""

    mode: str
    mode_pos: Pos
    bound: str
    bound_pos: Pos
    pos: Pos


@dataclass(frozen=True)
class _Kernel:
    name: str
    name_pos: Pos
    family: str
    family_pos: Pos
    items: tuple[Union[_Setting, _Decl, _Epilogue], ...]
    pos: Pos
    when: _When | None = None


def _atom_of(text: str) -> _Atom:
    kind = "shape" if text[:1].isdigit() and "x" in text else "number" if text.isdigit() else "name"
    return _Atom(kind, text, Pos())


#: The typed value of each setting when a kernel does not set it.
DEFAULTS: dict[str, Any] = {name: spec.convert(_atom_of(spec.default)) for name, spec in SETTINGS.items()}


def _token_pos(tok: Token, file: str) -> Pos:
    return Pos(file, tok.line or 0, tok.column or 0, tok.end_line or 0, tok.end_column or 0,
               tok.start_pos if tok.start_pos is not None else -1, tok.end_pos if tok.end_pos is not None else -1)


def _meta_pos(meta: Any, file: str) -> Pos:
    if getattr(meta, "empty", True):
        return Pos(file)
    return Pos(file, meta.line, meta.column, meta.end_line, meta.end_column, meta.start_pos, meta.end_pos)


@v_args(meta=True)
class _ToAst(Transformer):
    """Parse tree → AST dataclasses. Run after parsing (not inside the parser) so ``meta`` is filled."""

    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _p(self, meta: Any) -> Pos:
        return _meta_pos(meta, self.file)

    def _t(self, tok: Token) -> Pos:
        return _token_pos(tok, self.file)

    def start(self, meta, children):
        return tuple(children)

    def kernel(self, meta, children):
        name, family, when, *items = children
        return _Kernel(str(name), self._t(name), str(family), self._t(family), tuple(items), self._p(meta), when)

    def when(self, meta, children):
        mode, _le, bound = children
        return _When(str(mode), self._t(mode), str(bound), self._t(bound), self._p(meta))

    def setting(self, meta, children):
        name, value = children
        return _Setting(str(name), self._t(name), value, self._p(meta))

    def decl(self, meta, children):
        name, dtype, dims, layout, source = children
        return _Decl(str(name), self._t(name), dtype, dims, layout, source, self._p(meta))

    def dims(self, meta, children):
        return _Dims(tuple(str(c) for c in children), self._p(meta))

    def scaled_dim(self, meta, children):
        name, number = children
        return f"{name}/{number}"

    def layout(self, meta, children):
        (item,) = children
        if isinstance(item, Token):
            return _Atom("name", str(item), self._t(item))
        return item

    def bind_in(self, meta, children):
        return _Source("in", str(children[1]), self._p(meta), children[2])

    def bind_out(self, meta, children):
        return _Source("out", str(children[1]), self._p(meta), children[2])

    def slice(self, meta, children):
        return _Slice(tuple(children), self._p(meta))

    def slice_dim(self, meta, children):
        start, stop = children
        return (start or "", stop or "", self._p(meta))

    def slice_bound(self, meta, children):
        return "".join(str(c) for c in children if c is not None)

    def literal(self, meta, children):
        return _Source("literal", children[0], self._p(meta))

    def signed_number(self, meta, children):
        return "".join(str(c) for c in children if c is not None)

    def epilogue(self, meta, children):
        return _Epilogue(tuple(children), self._p(meta))

    def assign(self, meta, children):
        name, expr = children
        return _Assign(str(name), self._t(name), expr, self._p(meta))

    def choice(self, meta, children):
        return _Choice(tuple(children), self._p(meta))

    def shape(self, meta, children):
        return _Atom("shape", str(children[0]), self._t(children[0]))

    def number(self, meta, children):
        return _Atom("number", str(children[0]), self._t(children[0]))

    def name(self, meta, children):
        return _Atom("name", str(children[0]), self._t(children[0]))

    def _binop(op):  # noqa: N805 - a factory used in the class body
        def method(self, meta, children):
            lhs, *_, rhs = children  # sub carries its MINUS token in the middle
            return _BinOp(op, lhs, rhs, self._p(meta))
        return method

    add = _binop("+")
    sub = _binop("-")
    mul = _binop("*")
    div = _binop("/")
    del _binop

    def neg(self, meta, children):
        return _Neg(children[-1], self._p(meta))

    def num(self, meta, children):
        return _Num(str(children[0]), self._t(children[0]))

    def ref(self, meta, children):
        return _Name(str(children[0]), self._t(children[0]))

    def call(self, meta, children):
        name, *args = children
        return _Call(str(name), tuple(a for a in args if a is not None), self._t(name))


# --- syntax errors in words ------------------------------------------------------------------------------

_TERMINAL_WORDS = {
    "NAME": "a name",
    "SHAPE": "a shape like 128x128x64",
    "NUMBER": "a number",
    "$END": "the end of the file",
}


def _terminal_word(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name
    return repr(pattern.value) if pattern.type == "str" else name.lower()


def _terminal_spelling(name: str) -> str | None:
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return None
    return pattern.value if pattern.type == "str" else None


def _found(tok: Token) -> str:
    if tok.type == "$END":
        return "the end of the file"
    kind = {"NAME": "name ", "SHAPE": "shape ", "NUMBER": "number "}.get(tok.type, "")
    return f"{kind}{str(tok)!r}"


def _words(names: Sequence[str]) -> str:
    words = sorted({_terminal_word(n) for n in names}, key=lambda w: (w.startswith("'"), w))
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


def _end_pos(text: str, file: str) -> Pos:
    stripped = text.rstrip()
    line = stripped.count("\n") + 1
    column = len(stripped) - (stripped.rfind("\n") + 1) + 1
    return Pos(file, line, column, line, column, len(stripped), len(stripped))


_WHEN_FORM = ("a dispatch condition is when MODE <= NUMBER, MODE one of M, N, K "
              "(kernel decode : gemm when M <= 64 { … })")


def _syntax_error(e: UnexpectedInput, text: str, file: str) -> UcutSyntaxError:
    """Turn Lark's exception into a Diagnostic that says, in words, what was expected."""
    if isinstance(e, UnexpectedCharacters):
        pos = Pos(file, e.line, e.column, e.line, e.column + 1, e.pos_in_stream, e.pos_in_stream + 1)
        char = text[e.pos_in_stream] if 0 <= e.pos_in_stream < len(text) else ""
        expected = sorted(e.allowed or ())
        message, valid, code = f"unexpected character {char!r}", (), "syntax"
        if "LE" in expected:  # when M < 64, when M >= 64
            message, valid, code = f"{message}: {_WHEN_FORM}", ("<=",), "bad-when"
        elif expected:
            message += f": expected {_words(expected)}"
        return UcutSyntaxError([Diagnostic(message, pos, valid, code=code)], e.get_context(text))

    assert isinstance(e, (UnexpectedToken, UnexpectedEOF))
    tok: Token = e.token
    expected = sorted(getattr(e, "accepts", None) or e.expected or ())
    at_end = tok.type == "$END"
    pos = _end_pos(text, file) if at_end else _token_pos(tok, file)
    stack = list(getattr(e.state, "value_stack", None) or ())
    prev = stack[-1] if stack else None
    valid = tuple(s for s in (_terminal_spelling(n) for n in expected) if s)
    message = f"expected {_words(expected)}, found {_found(tok)}"
    code = "syntax"

    if at_end and "RBRACE" in expected:
        message = "the file ends before a block is closed: expected '}'"
        valid = ("}",)
    elif tok.type == "KERNEL" and "RBRACE" in expected:
        message = "a new 'kernel' starts before the previous block is closed: expected '}'"
        valid = ("}",)
    elif isinstance(prev, Token) and prev.type == "NAME" and "COLON" in expected and "EQUAL" in expected:
        before = stack[-2] if len(stack) >= 2 else None
        if isinstance(before, Tree) and str(before.data).startswith("__") and before.children:
            before = before.children[-1]  # the item lists (kernel_item*, epi_item*) are folded trees
        if str(prev) == "kernel" and tok.type == "NAME":
            message = "a new 'kernel' starts before the previous block is closed: expected '}'"
            valid = ("}",)
            pos = _token_pos(prev, file)
        elif tok.type == "LBRACE":
            message = f"{str(prev)!r} does not open a block: the block in a kernel is 'epilogue'"
            valid = ("epilogue",)
            pos = _token_pos(prev, file)
        elif isinstance(before, Tree) and before.data == "decl" and before.children[3:] == [None, None]:
            message = f"{str(prev)!r} is not a layout{_did_you_mean(str(prev), LAYOUTS)}"
            valid = LAYOUTS
            pos = _token_pos(prev, file)
            code = "bad-layout"
        else:
            message = (f"expected '=' (a setting: {prev} = value) or ':' (a declaration: {prev} : bf16[M, N]) "
                       f"after {str(prev)!r}, found {_found(tok)}")
    elif any(isinstance(t, Token) and t.type == "WHEN" for t in stack[-3:]):  # when M = 64, when 64 <= M
        message = f"found {_found(tok)}: {_WHEN_FORM}"
        valid = ("<=",) if "LE" in expected else ("M", "N", "K") if "NAME" in expected else valid
        code = "bad-when"
    elif tok.type == "LSQB":
        message = "unexpected '[': dims follow the dtype of a declaration, as in a : bf16[M, K] (declarations " \
                  "use ':', settings use '=')"
        valid = (":",)
    moved = at_end or pos.start != tok.start_pos  # the diagnostic points at an earlier token
    context = excerpt(text, pos) if moved else e.get_context(text)
    return UcutSyntaxError([Diagnostic(message, pos, valid, code=code)], context)


# --- lowering: AST → IR ----------------------------------------------------------------------------------

class _Lowering:
    """Resolves names and fills defaults, collecting every Diagnostic instead of stopping at the first."""

    def __init__(self, file: str):
        self.file = file
        self.diags: list[Diagnostic] = []

    def error(self, code: str, message: str, pos: Pos, valid: Sequence[str] = ()) -> None:
        self.diags.append(Diagnostic(message, pos, tuple(valid), code=code))

    def atom(self, atom: _Atom, convert: Callable[[_Atom], Any], failed: Any = None) -> Any:
        """One atom → its typed value; ``failed`` (None unless given) after reporting why it does not fit."""
        try:
            return convert(atom)
        except _Bad as bad:
            self.error(bad.code, bad.message, atom.pos, bad.valid)
            return failed

    def fixed(self, value: _Value, convert: Callable[[_Atom], Any], choice_message: str) -> Any:
        """One atom → its typed value where choices ``{…}`` are not allowed; None after reporting a choice
        (``choice-not-allowed`` with ``choice_message``) or a value that does not fit."""
        if isinstance(value, _Choice):
            self.error("choice-not-allowed", choice_message, value.pos)
            return None
        return self.atom(value, convert)

    def fixed_layout(self, d: _Decl, applies: bool, misplaced: str, choice_message: str) -> Layout | None:
        """``d``'s layout (row when none is written); None after reporting one written where it does not apply
        (``bad-layout`` with ``misplaced``), a choice or an unknown layout."""
        if d.layout is None:
            return Layout.row
        if not applies:
            self.error("bad-layout", misplaced, d.layout.pos)
            return None
        return self.fixed(d.layout, _layout_converter(d.name), choice_message)

    # program and kernels

    def program(self, kernels: Sequence[_Kernel], source: str) -> Program:
        lowered = []
        seen: dict[str, Pos] = {}
        for k in kernels:
            if k.name in seen:
                self.error("duplicate-kernel", f"kernel {k.name!r} is defined twice (first at line "
                           f"{seen[k.name].line})", k.name_pos)
            seen.setdefault(k.name, k.name_pos)
            lowered.append(self.kernel(k))
        if any(k.when is not None for k in kernels):  # a dispatch (`when M <= 64`): checked in its own module
            from .dispatch import lower_dispatch
            lowered = lower_dispatch(self, kernels, lowered)
        return Program(tuple(k for k in lowered if k is not None), source=source, file=self.file)

    def kernel(self, k: _Kernel) -> GemmKernel | None:
        errors_before = len(self.diags)
        self.misplaced_slices(k)
        if k.family == "attention":  # attention (FMHA) lowers in its own module
            from .attention import lower_attention
            return lower_attention(self, k)
        if k.family == "grouped_gemm":  # grouped GEMM (ptr-array, MoE experts) lowers in its own module
            from .grouped import lower_grouped
            return lower_grouped(self, k)
        if k.family not in FAMILIES:
            self.error("unknown-family", f"kernel family {k.family!r} is not supported yet", k.family_pos, FAMILIES)
            return None
        values: dict[str, Any] = {}
        setting_pos: dict[str, Pos] = {}
        first_at: dict[str, Pos] = {}
        operands: dict[str, Operand] = {}
        declared: set[str] = set()
        epilogue: _Epilogue | None = None
        scales: dict[str, ir.Scale] = {}
        for item in k.items:
            if isinstance(item, _Decl) and item.name in ir.SCALE_OPERANDS:
                if not self.first_declaration(item, item.name, declared, first_at):
                    continue
                scale = self.scale(item)
                if scale is not None:
                    scales[item.name] = scale
                continue
            if isinstance(item, _Setting):
                if item.name not in SETTINGS:
                    hint = (f"; {item.name} is an operand: declare it with ':' ({item.name} : bf16[...])"
                            if item.name in OPERAND_DIMS else _did_you_mean(item.name, list(SETTINGS)))
                    self.error("unknown-setting", f"unknown setting {item.name!r}{hint}", item.name_pos,
                               tuple(SETTINGS))
                    continue
                if item.name in first_at:
                    self.error("duplicate-setting", f"{item.name} is set twice (first at line "
                               f"{first_at[item.name].line})", item.name_pos)
                    continue
                first_at[item.name] = item.name_pos
                convert = SETTINGS[item.name].convert
                if item.name == "schedule":
                    from .arch import TARGET_RULES
                    convert = _schedule_converter(k, TARGET_RULES)
                value = self.value(item.name, item.value, convert)
                setting_pos[item.name] = item.value.pos
                if value is not _FAILED:
                    values[item.name] = value
            elif isinstance(item, _Decl):
                if item.name not in OPERAND_DIMS:
                    if item.name in SETTINGS:
                        msg = f"{item.name} is a setting: write {item.name} = value"
                        self.error("syntax", msg, item.name_pos, (f"{item.name} =",))
                    else:
                        msg = (f"{item.name!r} is not a GEMM operand; extra inputs of the epilogue are declared "
                               f"inside epilogue {{ }}")
                        self.error("unknown-operand", msg, item.name_pos, tuple(OPERAND_DIMS))
                    continue
                if not self.first_declaration(item, f"operand {item.name}", declared, first_at):
                    continue
                op = self.operand(item, setting_pos)
                if op is not None:
                    operands[item.name] = op
            else:
                if epilogue is not None:
                    self.error("duplicate-epilogue", f"a kernel has one epilogue block (first at line "
                               f"{epilogue.pos.line})", item.pos)
                    continue
                epilogue = item

        missing = [n for n in _REQUIRED_OPERANDS if n not in declared]
        if missing:
            examples = {"a": "a : bf16[M, K] row", "b": "b : bf16[N, K] row", "d": "d : bf16[M, N] row"}
            self.error("missing-operand", f"kernel {k.name} needs operands a, b and d; missing: "
                       f"{', '.join(missing)}", k.name_pos, tuple(examples[n] for n in missing))
        inputs, expr, outputs = self.epilogue(epilogue, c_pos=first_at.get(".c"))
        if outputs and "a" in operands and operands["a"].batch:
            self.error("unsupported", "extra epilogue outputs (->) of a batched kernel are not supported yet",
                       outputs[0].pos)
        self.check_batch(operands, inputs)
        if scales and "a" in operands and operands["a"].batch:
            self.error("unsupported", "scale_a / scale_b of a batched kernel are not supported yet",
                       next(iter(scales.values())).pos)
        if len(self.diags) > errors_before:
            return None
        for name in SETTINGS:
            values.setdefault(name, DEFAULTS[name])
        return GemmKernel(
            name=k.name, a=operands["a"], b=operands["b"], c=operands.get("c"), d=operands["d"],
            epilogue_inputs=inputs, epilogue=expr, epilogue_outputs=outputs, pos=k.name_pos, setting_pos=setting_pos,
            scale_a=scales.get("scale_a"), scale_b=scales.get("scale_b"), **values)

    def first_declaration(self, item: _Decl, what: str, declared: set[str], first_at: dict[str, Pos]) -> bool:
        """Records the declaration of an operand or scale (in ``declared`` and at ``first_at['.' + name]``); False
        after reporting ``duplicate-operand`` (``what`` names it in the message) when it was declared before."""
        if item.name in declared:
            self.error("duplicate-operand", f"{what} is declared twice (first at line "
                       f"{first_at['.' + item.name].line})", item.name_pos)
            return False
        declared.add(item.name)
        first_at["." + item.name] = item.name_pos
        return True

    def check_batch(self, operands: Mapping[str, Operand], inputs: Sequence[EpilogueInput]) -> None:
        """Batch dims (CUTLASS's mode L): a, b, d (and c) declare the same ones; epilogue inputs the same or none.

        Leading dims that only a and d would have are not declared: a row-major ``a : bf16[M, K]`` takes a
        ``[batch, seq, K]`` tensor and folds its leading dims into M.
        """
        if "a" not in operands:
            return  # a did not lower: its error says why
        batch = operands["a"].batch
        for op in operands.values():
            if op.batch != batch and not (op.name == "b" and not op.batch):  # b without batch dims: shared
                self.error("bad-dims", f"{op.name} has batch dims [{', '.join(op.batch)}] but a has "
                           f"[{', '.join(batch)}]: a, b, c and d declare the same batch dims in the same order "
                           "(together the batch mode L; b may have none: one b for every batch); a leading dim of a "
                           "and d alone is not declared, it folds into M (a : bf16[M, K] row takes a [batch, seq, K] "
                           "tensor)", op.pos, (f"[{', '.join(batch + op.dims)}]",))
        for inp in inputs:
            if inp.batch and inp.batch != batch:
                self.error("bad-dims", f"epilogue input {inp.name} has batch dims [{', '.join(inp.batch)}]; it takes "
                           f"the kernel's batch dims [{', '.join(batch)}] (one per batch) or none (shared by all "
                           "batches)", inp.pos, (f"[{', '.join(batch + inp.dims)}]", f"[{', '.join(inp.dims)}]"))

    def scale(self, d: _Decl) -> ir.Scale | None:
        """``scale_a : f32 <- sa`` (per tensor) or ``scale_a : f32[M, K/128] row <- x_scale`` (per 1x128 block)."""
        name = d.name
        mn = "M" if name == "scale_a" else "N"
        example = f"{name} : f32[{mn}, K/128] row" if name == "scale_a" else f"{name} : f32[N/128, K/128] row"
        no_choice = f"{name}: choices {{…}} are not allowed in scale factors"
        dtype = self.fixed(d.dtype, _dtype_converter(name), no_choice)
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        if dims:
            parts = []
            for dim in dims:
                base, _, div = dim.partition("/")
                parts.append(base)
                if div and (not div.isdigit() or int(div) < 1):
                    self.error("bad-dims", f"{name}: {dim}: a block size is a whole number > 0, as in K/128",
                               d.dims.pos, ("K/128",))
                    ok = False
            if sorted(parts) != sorted((mn, "K")):
                self.error("bad-dims", f"{name} is declared over [{', '.join(dims)}]; a scale of "
                           f"{ir.SCALE_OPERANDS[name]} is over [{mn}/BLOCK, K/BLOCK] (either order; no divisor: a "
                           f"block of 1), e.g. {example}, or has no dims (one scale for the tensor)",
                           d.dims.pos, (f"[{mn}, K/128]", f"[{mn}/128, K/128]", "no dims"))
                ok = False
        layout = self.fixed_layout(d, bool(dims), f"{name}: a per-tensor scale (no dims) has no layout", no_choice)
        ok &= layout is not None
        binding = None
        if d.source is not None:
            if d.source.kind != "in":
                self.error("bad-binding", f"{name} is an input: bind it with '<-' ({name} : ... <- NAME)",
                           d.source.pos, ("<-",))
                ok = False
            else:
                binding = d.source.text
        if not ok:
            return None
        return ir.Scale(name, dtype, tuple(dims), layout, binding, d.pos)  # type: ignore[arg-type]

    # values and choices

    def value(self, what: str, value: _Value, convert: Callable[[_Atom], Any]) -> Any:
        """One atom → typed value; a choice → :class:`Choice`. Returns ``_FAILED`` after reporting."""
        if isinstance(value, _Atom):
            return self.atom(value, convert, _FAILED)
        options, spellings, positions, ok = [], [], [], True
        for atom in value.items:
            typed = self.atom(atom, convert, _FAILED)
            if typed is _FAILED:
                ok = False
                continue
            if atom.text in spellings or typed in options:
                self.error("duplicate-option", f"{atom.text} is listed twice in the choice for {what}", atom.pos)
                ok = False
                continue
            options.append(typed)
            spellings.append(atom.text)
            positions.append(atom.pos)
        return Choice(tuple(options), tuple(spellings), value.pos, tuple(positions)) if ok else _FAILED

    # operands

    def operand(self, d: _Decl, setting_pos: dict[str, Pos]) -> Operand | None:
        ok = True
        name = d.name
        expected = OPERAND_DIMS[name]
        dtype = self.value(f"{name}.dtype", d.dtype, _dtype_converter(name))
        setting_pos[f"{name}.dtype"] = d.dtype.pos
        ok &= dtype is not _FAILED
        example = f"{name} : bf16[{', '.join(expected)}] row"
        if d.dims is None:
            self.error("bad-dims", f"{name} needs its dims, e.g. {example}", d.dtype.pos,
                       (f"[{', '.join(expected)}]",))
            ok = False
        elif sorted(d.dims.names[-2:]) != sorted(expected) or not _batch_ok(d.dims.names[:-2]):
            valid = (f"[{', '.join(expected)}]", f"[{', '.join(reversed(expected))}]")
            self.error("bad-dims", f"{name} is declared over [{', '.join(d.dims.names)}]; {name} must be over "
                       f"{valid[0]} or {valid[1]}, after any batch dims ([B, H, {', '.join(expected)}]: distinct "
                       "names other than M, N, K)", d.dims.pos, valid)
            ok = False
        layout: Any = Layout.row
        if d.layout is not None:
            layout = self.value(f"{name}.layout", d.layout, _layout_converter(name))
            setting_pos[f"{name}.layout"] = d.layout.pos
            ok &= layout is not _FAILED
        binding = None
        if d.source is not None:
            binding = d.source.text
            if d.source.kind == "literal":
                self.error("bad-binding", f"operand {name} is a tensor; only an epilogue scalar takes a value",
                           d.source.pos)
                ok = False
            elif name == "d" and d.source.kind == "in":
                self.error("bad-binding", f"d is the output: bind it with '->' (d : ... -> {binding})",
                           d.source.pos, ("->",))
                ok = False
            elif name != "d" and d.source.kind == "out":
                self.error("bad-binding", f"{name} is an input: bind it with '<-' ({name} : ... <- {binding})",
                           d.source.pos, ("<-",))
                ok = False
        view = self.slice(d.source) if d.source is not None and d.source.kind == "in" else ()
        if not ok or view is None:
            return None
        names = d.dims.names  # type: ignore[union-attr]
        return Operand(name, dtype, names[-2:], layout, binding, d.pos, batch=names[:-2], slice=view)

    def slice(self, source: _Source) -> tuple[str, ...] | None:
        """``<- x[:, -keep:]`` → ``(":", "-keep:")`` (() when there is no slice); None after reporting an entry
        other than ``:``, ``NAME:`` or ``-NAME:`` (NAME an axis of the problem)."""
        if source.slice is None:
            return ()
        entries, ok = [], True
        for start, stop, pos in source.slice.dims:
            written = f"{start}:{stop}"
            if stop or (start and not _NAME_RE.fullmatch(start.lstrip("-"))):
                self.error("bad-binding", f"slice entry {written!r} of {source.text}[...] is not supported; an entry "
                           "is ':' (the whole dim), 'NAME:' (from axis NAME to the end) or '-NAME:' (the last NAME), "
                           "NAME an axis of the problem", pos, SLICE_FORMS)
                ok = False
            entries.append(written)
        return tuple(entries) if ok else None

    def misplaced_slices(self, k: _Kernel) -> None:
        """A slice (``<- x[...]``) binds a GEMM's a, b or c only: report it anywhere else (``bad-binding``)."""
        decls = [it for it in k.items if isinstance(it, _Decl)]
        epilogue = [it for e in k.items if isinstance(e, _Epilogue) for it in e.items if isinstance(it, _Decl)]
        for d, kernel_level in [(d, True) for d in decls] + [(d, False) for d in epilogue]:
            if d.source is None or d.source.slice is None:
                continue
            if k.family == "gemm" and kernel_level and d.name in ("a", "b", "c"):
                continue
            where = "an output" if d.source.kind == "out" else f"{d.name} of a {k.family} kernel" if kernel_level \
                else f"epilogue input {d.name}"
            self.error("bad-binding", f"a slice (<- NAME[...]) binds a gemm kernel's a, b or c only, not {where}",
                       d.source.slice.pos, ("a", "b", "c"))

    # epilogue

    def epilogue(self, epi: _Epilogue | None, c_pos: Pos | None
                 ) -> tuple[tuple[EpilogueInput, ...], Expr, tuple[EpilogueOutput, ...]]:
        """The epilogue block → (inputs, the expression of d, extra outputs); errors are collected."""
        has_c = c_pos is not None
        if epi is None:
            if has_c:
                self.error("unused-input", "c is declared but there is no epilogue to read it: add "
                           "epilogue { d = acc + c }", c_pos)
            return (), Acc(), ()
        inputs: dict[str, EpilogueInput] = {}
        decl_pos: dict[str, Pos] = {}
        out_decls: dict[str, EpilogueOutput] = {}  # declared outputs (value not yet known)
        for item in epi.items:
            if isinstance(item, _Decl) and item.source is not None and item.source.kind == "out":
                out = self.epilogue_output(item, decl_pos, out_decls)
                if out is not None:
                    out_decls[item.name] = out
            elif isinstance(item, _Decl):
                inp = self.epilogue_input(item, decl_pos)
                if inp is not None:
                    inputs[item.name] = inp
        out_env: dict[str, Expr] = {}  # an assigned [M, N] output: what later statements read
        outputs: dict[str, EpilogueOutput] = {}
        reserved = {"acc": "the accumulator", "a": "an operand", "b": "an operand", "c": "an operand",
                    "d": "the output"}
        env: dict[str, Expr] = {}
        env_pos: dict[str, Pos] = {}
        assigned_later = {item.name for item in epi.items if isinstance(item, _Assign)}
        used_inputs: set[str] = set()
        used_names: set[str] = set()
        failed: set[str] = set()  # intermediates whose expression had an error (already reported)
        final: Expr | None = None
        for item in epi.items:
            if not isinstance(item, _Assign):
                continue
            if final is not None:
                self.error("bad-assignment", f"d must be the last assignment of the epilogue; {item.name} is "
                           "assigned after it", item.name_pos)
                continue
            ctx = _ExprContext(has_c, inputs, decl_pos, env, assigned_later, used_inputs, used_names, failed,
                               out_decls, out_env)
            if item.name in out_decls:
                self.output_statement(item, out_decls[item.name], ctx, outputs, out_env)
                continue
            expr = self.expr(item.expr, ctx)
            if item.name == "d":
                final = expr if expr is not None else Acc()
                continue
            if item.name in reserved:
                self.error("bad-assignment", f"{item.name} is {reserved[item.name]}; assign intermediate "
                           "values to new names and the result to d", item.name_pos)
            elif item.name in inputs or item.name in decl_pos:
                self.error("bad-assignment", f"{item.name} is an epilogue input (line {decl_pos[item.name].line}); "
                           "assign to a new name", item.name_pos)
            elif item.name in FUNCTIONS:
                self.error("bad-assignment", f"{item.name} is a function name", item.name_pos)
            elif item.name in env:
                self.error("bad-assignment", f"{item.name} is assigned twice (first at line "
                           f"{env_pos[item.name].line})", item.name_pos)
            elif expr is not None:
                env[item.name] = expr
                env_pos[item.name] = item.name_pos
            else:
                failed.add(item.name)
        if final is None:
            self.error("missing-output", "the epilogue never assigns d: end it with d = <expression of acc>",
                       epi.pos, ("d = acc",))
            return (), Acc(), ()
        for name, out in out_decls.items():
            if name not in outputs and name not in failed:
                self.error("missing-output", f"{name} is declared as an output but never assigned: write "
                           f"{name} = <expression> before d", out.pos)
        if not any(isinstance(node, Acc) for e in (final, *(o.value for o in outputs.values()))
                   for node in ir.walk(e)):
            self.error("unused-acc", "the epilogue never reads acc (the A·B product)", _expr_pos(final, epi.pos))
        for name, pos in decl_pos.items():
            if name not in used_inputs:
                self.error("unused-input", f"{name} is declared but the epilogue never reads it", pos)
        if c_pos is not None and "c" not in used_inputs:
            self.error("unused-input", "c is declared but the epilogue never reads it (e.g. d = acc + c)", c_pos)
        for name, pos in env_pos.items():
            if name not in used_names:
                self.error("unused-name", f"{name} is computed but never used", pos)
        return tuple(inputs.values()), final, tuple(outputs[n] for n in out_decls if n in outputs)

    def epilogue_output(self, d: _Decl, decl_pos: Mapping[str, Pos],
                        out_decls: Mapping[str, EpilogueOutput]) -> EpilogueOutput | None:
        """An epilogue declaration with ``->``: an extra [M, N] output (Sm90AuxStore) or an [M] / [N]
        reduction output (Sm90ColReduction / Sm90RowReduction, f32 only). Its value is set by its statement."""
        name = d.name
        if name in ("acc", "a", "b", "c", "d") or name in FUNCTIONS:
            what = "a function" if name in FUNCTIONS else "reserved in the epilogue (acc, a, b, c, d)"
            self.error("bad-name", f"{name!r} is {what}; name the output something else", d.name_pos)
            return None
        first = decl_pos.get(name) or (out_decls[name].pos if name in out_decls else None)
        if first is not None:
            self.error("duplicate-input", f"{name} is declared twice (first at line {first.line})", d.name_pos)
            return None
        if isinstance(d.dtype, _Choice) or isinstance(d.layout, _Choice):
            where = d.dtype.pos if isinstance(d.dtype, _Choice) else d.layout.pos  # type: ignore[union-attr]
            self.error("choice-not-allowed", f"{name}: choices {{…}} are not allowed in epilogue outputs", where)
            return None
        dtype = self.atom(d.dtype, _dtype_converter(name))  # type: ignore[arg-type]
        if dtype is None:
            return None
        dims = d.dims.names if d.dims is not None else ()
        kind = EPILOGUE_DIMS.get(dims)
        valid = ("[M, N]", "[N, M]", "[M]", "[N]")
        if kind is None or kind is EpilogueInputKind.scalar:
            self.error("bad-output", f"epilogue output {name} is over [{', '.join(dims)}]; an extra output is "
                       "[M, N] (stored like d), [M] (a reduction over N: one value per row) or [N] (a reduction "
                       "over M: one value per column)", d.dims.pos if d.dims else d.pos, valid)
            return None
        layout = self.fixed_layout(d, kind is EpilogueInputKind.matrix,
                                   f"{name}: a layout applies to [M, N] outputs only",
                                   f"{name}: choices {{…}} are not allowed in epilogue outputs")
        if layout is None:
            return None
        if kind is not EpilogueInputKind.matrix and dtype is not DType.f32:
            self.error("bad-output", f"{name} is a reduction output ([{dims[0]}]): CUTLASS's reductions "
                       f"accumulate and store in f32; declare {name} : f32[{dims[0]}]", d.dtype.pos, ("f32",))
            return None
        return EpilogueOutput(name, kind, dtype, dims, Const(0.0), None, layout, d.source.text,  # type: ignore
                              d.pos)

    def output_statement(self, item: _Assign, out: EpilogueOutput, ctx: "_ExprContext",
                         outputs: dict[str, EpilogueOutput], out_env: dict[str, Expr]) -> None:
        """``name = expr`` for a declared output: store (an [M, N] output) or reduce (``sum_n`` / ``max_n`` into
        [M], ``sum_m`` / ``max_m`` into [N]). Later statements read an [M, N] output as stored (rounded to its
        dtype, as a PyTorch reference that keeps it would); a reduction cannot be read."""
        name = item.name
        if name in outputs:
            self.error("bad-assignment", f"output {name} is assigned twice", item.name_pos)
            return
        node = item.expr
        if out.kind is EpilogueInputKind.matrix:
            value = self.expr(node, ctx)
            if value is None:
                ctx.failed.add(name)
                return
            if out.dtype is not DType.f32:
                value = Cast(out.dtype, value, _expr_pos(value, item.pos))
            out_env[name] = value
            outputs[name] = dataclasses.replace(out, value=value)
            return
        dim = out.dims[0]
        want = [f for f, (_, into) in REDUCTIONS.items() if into == dim]
        if not (isinstance(node, _Call) and node.name in REDUCTIONS):
            self.error("bad-output", f"{name} is a [{dim}] reduction output: assign it a reduction, e.g. "
                       f"{name} = {want[1]}(y)", item.name_pos, tuple(want))
            ctx.failed.add(name)
            return
        op, into = REDUCTIONS[node.name]
        if into != dim:
            self.error("bad-output", f"{node.name} gives one value per {'row' if into == 'M' else 'column'} "
                       f"([{into}]) but {name} is declared [{dim}]: use {want[0]} or {want[1]}", node.pos, tuple(want))
            ctx.failed.add(name)
            return
        if len(node.args) != 1:
            self.error("bad-call", f"{node.name} takes one argument, got {len(node.args)}", node.pos)
            ctx.failed.add(name)
            return
        value = self.expr(node.args[0], ctx)
        if value is None:
            ctx.failed.add(name)
            return
        outputs[name] = dataclasses.replace(out, value=value, reduce=op)

    def epilogue_input(self, d: _Decl, decl_pos: dict[str, Pos]) -> EpilogueInput | None:
        name = d.name
        if name in ("acc", "a", "b", "c", "d") or name in ACTIVATIONS:
            what = "a function" if name in ACTIVATIONS else "reserved in the epilogue (acc, a, b, c, d)"
            self.error("bad-name", f"{name!r} is {what}; name the input something else", d.name_pos)
            return None
        if name in decl_pos:
            self.error("duplicate-input", f"{name} is declared twice (first at line {decl_pos[name].line})",
                       d.name_pos)
            return None
        decl_pos[name] = d.name_pos
        no_choice = f"{name}: choices {{…}} are not allowed in epilogue inputs yet"
        dtype = self.fixed(d.dtype, _dtype_converter(name), no_choice)
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        kind = EPILOGUE_DIMS.get(dims)
        batch: tuple[str, ...] = ()
        for n in (2, 1):  # leading batch dims before [M, N], [N] or [M]
            if kind is None and len(dims) > n and dims[-n:] in EPILOGUE_DIMS and _batch_ok(dims[:-n]):
                kind, batch, dims = EPILOGUE_DIMS[dims[-n:]], dims[:-n], dims[-n:]
        if kind is None:
            self.error("bad-dims", f"epilogue input {name} is over [{', '.join(dims)}]; inputs are [N] (one value "
                       "per column), [M] (per row), [M, N] (a matrix) or no dims (a scalar)",
                       d.dims.pos if d.dims else d.pos, ("[N]", "[M]", "[M, N]", "[N, M]", "no dims"))
            ok = False
        layout = self.fixed_layout(d, kind is EpilogueInputKind.matrix,
                                   f"{name}: a layout applies to [M, N] inputs only", no_choice)
        ok &= layout is not None
        binding, value = None, None
        if d.source is not None:
            if d.source.kind == "out":
                self.error("unsupported", f"{name}: extra epilogue outputs (->) come later; bind inputs with '<-'",
                           d.source.pos, ("<-",))
                ok = False
            elif d.source.kind == "in":
                binding = d.source.text
            elif kind is not EpilogueInputKind.scalar:
                self.error("bad-binding", f"{name} is a tensor; only a scalar (no dims) takes a literal value",
                           d.source.pos)
                ok = False
            else:
                value = float(d.source.text)
        if not ok:
            return None
        return EpilogueInput(name, kind, dtype, dims, layout, binding, value, d.pos,  # type: ignore[arg-type]
                             batch=batch)

    def expr(self, node: Any, ctx: "_ExprContext") -> Expr | None:
        """AST expression → IR expression with intermediates inlined; None after reporting an error."""
        if isinstance(node, _Num):
            return Const(float(node.text), node.pos)
        if isinstance(node, _Name):
            return self.name(node, ctx)
        if isinstance(node, _Neg):
            arg = self.expr(node.arg, ctx)
            if arg is None:
                return None
            if isinstance(arg, Const):
                return Const(-arg.value, node.pos)
            return Binary("*", Const(-1.0, node.pos), arg, node.pos)
        if isinstance(node, _Call):
            if node.name == "cast":
                return self.cast(node, ctx)
            if node.name in REDUCTIONS:
                into = REDUCTIONS[node.name][1]
                self.error("bad-call", f"{node.name} reduces a whole {'row' if into == 'M' else 'column'}: use it only "
                           f"as the value of an output declared [{into}], e.g. r : f32[{into}] -> r_out then "
                           f"r = {node.name}(y)", node.pos)
                return None
            args = [self.expr(a, ctx) for a in node.args]
            if node.name not in ACTIVATIONS:
                self.error("unknown-function", f"unknown function {node.name!r}"
                           f"{_did_you_mean(node.name, FUNCTIONS)}", node.pos, FUNCTIONS)
                return None
            if len(node.args) != 1:
                self.error("bad-call", f"{node.name} takes one argument, got {len(node.args)}", node.pos)
                return None
            return Unary(node.name, args[0], node.pos) if args[0] is not None else None
        assert isinstance(node, _BinOp)
        lhs, rhs = self.expr(node.lhs, ctx), self.expr(node.rhs, ctx)
        if node.op == "/":
            self.error("unsupported", "'/' is not supported yet: multiply by the reciprocal (x * 0.125)",
                       node.pos, ir.BINARY_OPS)
            return None
        if lhs is None or rhs is None:
            return None
        return Binary(node.op, lhs, rhs, node.pos)

    def cast(self, node: _Call, ctx: "_ExprContext") -> Expr | None:
        """``cast(x, DTYPE)``: x rounded to DTYPE (a no-op for f32)."""
        to = node.args[1] if len(node.args) == 2 else None
        if not isinstance(to, _Name) or to.name not in DTYPES:
            self.error("bad-call", "cast takes an expression and a dtype, as in cast(acc + bias, bf16)",
                       to.pos if isinstance(to, (_Name, _Num)) else node.pos, DTYPES)
            return None
        arg = self.expr(node.args[0], ctx)
        if arg is None:
            return None
        if to.name == "f32" or (isinstance(arg, Cast) and arg.dtype.value == to.name):
            return arg  # f32 is the compute type; a second rounding to the same type changes nothing
        return Cast(DType(to.name), arg, node.pos)

    def name(self, node: _Name, ctx: "_ExprContext") -> Expr | None:
        name = node.name
        if name == "acc":
            return Acc(node.pos)
        if name == "c":
            if ctx.has_c:
                ctx.used_inputs.add("c")
                return Src(node.pos)
            self.error("undefined-name", "c is not declared: declare the source operand in the kernel, e.g. "
                       "c : bf16[M, N] row <- residual", node.pos)
            return None
        if name in ctx.inputs or name in ctx.decl_pos:
            ctx.used_inputs.add(name)
            return Ref(name, node.pos) if name in ctx.inputs else None
        if name in ctx.env:
            ctx.used_names.add(name)
            return ctx.env[name]
        if name in ctx.out_env:
            return ctx.out_env[name]
        if name in ctx.outputs and ctx.outputs[name].kind is not EpilogueInputKind.matrix:
            self.error("reads-output", f"{name} is a reduction output, complete only when the kernel ends: no "
                       "statement can read it (reduce the value you need into another output)", node.pos)
            return None
        if name in ctx.outputs and name not in ctx.assigned_later and name not in ctx.failed:
            self.error("undefined-name", f"{name} is an output read before it is assigned: write {name} = … "
                       "before this statement", node.pos)
            return None
        if name in ctx.failed:
            return None
        if name in ctx.assigned_later:
            self.error("undefined-name", f"{name} is used before it is assigned", node.pos)
            return None
        if name in ACTIVATIONS:
            self.error("undefined-name", f"{name} is a function: call it, as in {name}(acc)", node.pos)
            return None
        if name in ("a", "b", "d"):
            self.error("undefined-name", f"{name} is a GEMM operand; the epilogue reads acc (= A·B) and c",
                       node.pos)
            return None
        known = ["acc"] + (["c"] if ctx.has_c else []) + list(ctx.decl_pos) + list(ctx.env)
        self.error("undefined-name", f"{name!r} is not defined{_did_you_mean(name, known)}", node.pos, known)
        return None


@dataclass
class _ExprContext:
    has_c: bool
    inputs: Mapping[str, EpilogueInput]
    decl_pos: Mapping[str, Pos]
    env: Mapping[str, Expr]
    assigned_later: set[str]
    used_inputs: set[str]
    used_names: set[str]
    failed: set[str]
    outputs: Mapping[str, EpilogueOutput] = dataclasses.field(default_factory=dict)  # declared outputs
    out_env: Mapping[str, Expr] = dataclasses.field(default_factory=dict)  # assigned [M, N] outputs' values


_FAILED = object()


def _batch_ok(names: Sequence[str]) -> bool:
    """Batch dims are distinct names other than the GEMM modes M, N, K."""
    return len(set(names)) == len(names) and not set(names) & {"M", "N", "K"} and \
        all(isinstance(n, str) and not n[:1].isdigit() for n in names)


def _dtype_converter(owner: str) -> Callable[[_Atom], DType]:
    def convert(atom: _Atom) -> DType:
        if atom.kind == "name" and atom.text in DTYPES:
            return DType(atom.text)
        valid = SCALE_DTYPES if owner in ir.SCALE_OPERANDS else OPERAND_DTYPES
        raise _Bad(f"unknown dtype {atom.text!r} for {owner}{_did_you_mean(atom.text, valid)}", valid,
                   "unknown-dtype")
    return convert


def _layout_converter(owner: str) -> Callable[[_Atom], Layout]:
    def convert(atom: _Atom) -> Layout:
        if atom.kind == "name" and atom.text in LAYOUTS:
            return Layout(atom.text)
        raise _Bad(f"{atom.text!r} is not a layout for {owner}", LAYOUTS, "bad-layout")
    return convert


def _expr_pos(expr: Expr, default: Pos) -> Pos:
    pos = getattr(expr, "pos", None)
    return pos if isinstance(pos, Pos) and pos.line else default


# --- public API ------------------------------------------------------------------------------------------

def parse(text: str, file: str = "<string>") -> Program:
    """Parse `.ucut` text and lower it to the IR.

    Args:
        text: the program.
        file: the name shown in positions and diagnostics.

    Returns:
        The :class:`~ucutlass.ir.Program`; its kernels may still hold open :class:`~ucutlass.ir.Choice` values.

    Raises:
        UcutSyntaxError: the text does not parse (one diagnostic, with the line and a caret in ``context``),
            or does not lower (every problem found: unknown setting, dtype or function, bad dims or value,
            undefined or unused name, duplicates, missing operands, …).
    """
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text, file) from None
    try:
        kernels = _ToAst(file).transform(tree)
    except VisitError as e:
        meta = getattr(e.obj, "meta", None)
        pos = _meta_pos(meta, file) if meta is not None else Pos(file)
        raise UcutSyntaxError([Diagnostic(f"cannot read {e.rule}: {e.orig_exc}", pos, code="syntax")],
                              excerpt(text, pos)) from e.orig_exc
    lowering = _Lowering(file)
    program = lowering.program(kernels, text)
    if lowering.diags:
        diags = sorted(lowering.diags, key=lambda d: (d.pos.line, d.pos.column))
        raise UcutSyntaxError(diags, source=text)
    return program


def parse_file(path: str | Path) -> Program:
    """Read and :func:`parse` a `.ucut` file; positions name the file as given."""
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), file=str(path))


def legal_combinations(kernel: GemmKernel, extents: Mapping[str, int] | None = None
                       ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], list[Diagnostic]]]]:
    """Check every combination of a kernel's open choices against the arch rules.

    Args:
        kernel: a kernel, usually with open choices (a concrete one gives one empty combination).
        extents: optional problem extents (``{"M": 4096, ...}``) for the alignment rules.

    Returns:
        ``(legal, rejected)``: ``legal`` lists the picks (keys as :meth:`GemmKernel.choices`, values typed,
        e.g. ``{"tile": (128, 128, 64), "schedule": Schedule.pingpong}``) that pass; ``rejected`` pairs each
        other pick with the errors it breaks. Both in the order of the product of the options.
    """
    from .arch import check_kernel

    choices = kernel.choices()
    keys = list(choices)
    legal: list[dict[str, Any]] = []
    rejected: list[tuple[dict[str, Any], list[Diagnostic]]] = []
    for combo in itertools.product(*(choices[k].options for k in keys)):
        picks = dict(zip(keys, combo))
        errors = [d for d in check_kernel(kernel.resolve(picks), extents) if d.severity == "error"]
        (rejected.append((picks, errors)) if errors else legal.append(picks))
    return legal, rejected


def distinct_combinations(kernel: GemmKernel, picks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of ``picks`` (e.g. the ``legal`` of :func:`legal_combinations`), the first of each kernel: combinations
    that :func:`ucutlass.arch.canonical` makes equal (an ``auto`` setting the rules decide) build one kernel."""
    from .arch import canonical

    first: dict[str, Mapping[str, Any]] = {}
    for p in picks:
        first.setdefault(canonical(kernel.resolve(p)).digest(), p)
    return list(first.values())


def check(program_or_kernel: Program | GemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Run the architecture rules on a program or one kernel.

    A concrete kernel gets the rule violations of :func:`ucutlass.arch.check_kernel`. A kernel with
    open choices is checked in every combination: each rule that *every* combination breaks is reported
    as an error, each option that no legal combination uses as a warning (``dead-option``, at the option),
    both in source order and followed by a summary (severity ``note`` when some combinations are legal, ``error``
    when none is) that counts the legal combinations and names the rules that rejected the others.

    Args:
        program_or_kernel: a :class:`~ucutlass.ir.Program` (all its kernels) or a single kernel.
        extents: optional problem extents by dim name, for the 16-byte alignment rule.

    Returns:
        The diagnostics; no ``error`` among them means every kernel (or some combination) is legal.
    """
    from .arch import check_kernel

    kernels = program_or_kernel.kernels if isinstance(program_or_kernel, Program) else (program_or_kernel,)
    out: list[Diagnostic] = []
    for kernel in kernels:
        if kernel.is_concrete():
            out.extend(sorted(check_kernel(kernel, extents), key=_source_order))
            continue
        legal, rejected = legal_combinations(kernel, extents)
        total = len(legal) + len(rejected)
        keys = ", ".join(kernel.choices())
        found: list[Diagnostic] = _dead_options(kernel, legal, rejected)
        if not legal:
            common = set.intersection(*({d.code for d in errs} for _, errs in rejected))
            for d in rejected[0][1]:
                if d.code in common:
                    found.append(Diagnostic(f"{d.message} (this rule rejects every combination of the open "
                                            "choices)", d.pos, d.valid, d.code, d.severity))
        out.extend(sorted(found, key=_source_order))
        counts: dict[str, int] = {}
        for _, errs in rejected:  # by the first rule each breaks, as `tune --dry-run` counts them
            counts[errs[0].code] = counts.get(errs[0].code, 0) + 1
        targets = kernel.target.options if isinstance(kernel.target, ir.Choice) else (kernel.target,)
        rules = "/".join(t.value for t in targets)
        message = f"{len(legal)} of {total} combinations of the open choices ({keys}) pass the {rules} rules"
        distinct = len(distinct_combinations(kernel, legal))
        if distinct < len(legal):
            message += f" ({distinct} distinct kernels: an auto setting makes some combinations the same kernel)"
        if counts:
            message += "; rejected (by the first rule each breaks): " + ", ".join(f"{code} ({n})"
                                                                             for code, n in counts.items())
        out.append(Diagnostic(message, kernel.pos, code="choices", severity="note" if legal else "error"))
    return out


def _source_order(d: Diagnostic) -> tuple:
    return d.pos.line, d.pos.column


def _dead_options(kernel, legal: list[dict[str, Any]],
                  rejected: list[tuple[dict[str, Any], list[Diagnostic]]]) -> list[Diagnostic]:
    """A warning at each option of a ``{…}`` choice that no legal combination uses, with a rule that rejects
    every combination holding it (else the first rule of the first) and the options that some legal one uses.
    None when nothing is legal: the summary is an error then."""
    out: list[Diagnostic] = []
    if not legal:
        return out
    for key, choice in kernel.choices().items():
        used = [any(p[key] == option for p in legal) for option in choice.options]
        valid = tuple(s for s, ok in zip(choice.spellings, used) if ok)
        for i, (option, ok) in enumerate(zip(choice.options, used)):
            if ok:
                continue
            with_it = [errs for picks, errs in rejected if picks[key] == option]
            common = set.intersection(*({d.code for d in errs} for errs in with_it))
            why = next((d for d in with_it[0] if d.code in common), with_it[0][0])  # the rule it always breaks
            pos = choice.positions[i] if i < len(choice.positions) else choice.pos
            out.append(Diagnostic(f"{key} = {choice.spellings[i]} is in no legal combination: {why.message}", pos,
                                  valid, code="dead-option", severity="warning"))
    return out
