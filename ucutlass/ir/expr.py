"""The epilogue's expression tree (the EVT CUTLASS builds from it): accumulator, source, references to
inputs, constants, unary and binary operations, casts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Union

from ..errors import Pos
from .values import DType

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
