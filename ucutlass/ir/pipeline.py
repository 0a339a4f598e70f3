"""Pipeline IR: a file's kernels and torch steps wired into one callable (``pipeline NAME { … }`` in `.ucut`).

A :class:`Pipeline` is a list of :class:`Step` (``targets = value``) and the values it returns, in the problem's
output order. Values are small trees: :class:`Ref` (a problem input or axis, or an earlier step's result),
:class:`Const` (a number, list, flag or allowed constant), :class:`Arith` (``+ - * /``: a torch step on tensors,
arithmetic on axis values), :class:`Call` (a kernel of the file, an allow-listed torch function, or a tensor method:
:mod:`.torch_ops`) and :class:`Index` (``x[:, :64]``, a view). Shapes and dtypes are not in the IR: they flow when
the pipeline is bound to a problem (:mod:`ucutlass.bind.pipeline`), per workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import Pos


@dataclass(frozen=True)
class Ref:
    """A name: a problem input or axis, or a result of an earlier step."""

    name: str
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Const:
    """A literal: a number, ``True``/``False``/``None``, or an allowed constant (``torch.bfloat16``, kept as its
    spelling in ``name``)."""

    value: Any
    pos: Pos = field(default_factory=Pos, compare=False)
    name: str = ""


@dataclass(frozen=True)
class ListOf:
    """``[a, b, …]`` (a list argument: a normalized shape, a list of tensors for ``torch.cat``)."""

    items: tuple["PValue", ...]
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Arith:
    """``lhs op rhs`` (``op`` in ``+ - * / // %``), or ``-rhs`` when ``lhs`` is None."""

    op: str
    lhs: "PValue | None"
    rhs: "PValue"
    pos: Pos = field(default_factory=Pos, compare=False)


#: What a call calls: a kernel of the file, an allow-listed torch function, or a method of its first argument.
CALL_KINDS = ("kernel", "torch", "method")


@dataclass(frozen=True)
class Call:
    """A call. ``kind`` is one of :data:`CALL_KINDS`; ``target`` the kernel's name, the function's full dotted name
    (``torch.nn.functional.rms_norm``) or the method's name; for a method, ``args[0]`` is the tensor."""

    kind: str
    target: str
    args: tuple["PValue", ...]
    kwargs: tuple[tuple[str, "PValue"], ...] = ()
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class SliceOf:
    """``start:stop`` inside an index (either may be None); ``...`` is ``SliceOf(None, None, ellipsis=True)``."""

    start: "PValue | None"
    stop: "PValue | None"
    ellipsis: bool = False
    pos: Pos = field(default_factory=Pos, compare=False)


@dataclass(frozen=True)
class Index:
    """``obj[i, a:b, …]``: a view of a tensor (numbers and slices only)."""

    obj: "PValue"
    items: tuple["PValue | SliceOf", ...]
    pos: Pos = field(default_factory=Pos, compare=False)


PValue = Union[Ref, Const, ListOf, Arith, Call, Index]


@dataclass(frozen=True)
class Step:
    """``targets = value``: one name, or several for a call that gives several tensors (``q, k = x.chunk(2, -1)``,
    a kernel with extra outputs)."""

    targets: tuple[str, ...]
    value: PValue
    pos: Pos = field(default_factory=Pos, compare=False)
    target_pos: tuple[Pos, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Pipeline:
    """``pipeline NAME { steps  return values }``: the values returned are the problem's outputs, in order."""

    name: str
    steps: tuple[Step, ...]
    returns: tuple[PValue, ...]
    pos: Pos = field(default_factory=Pos, compare=False)
    return_pos: Pos = field(default_factory=Pos, compare=False)

    def kernel_names(self) -> list[str]:
        """The kernels its steps call, in order of first call."""
        out: list[str] = []
        for step in self.steps:
            for call in calls_in(step.value):
                if call.kind == "kernel" and call.target not in out:
                    out.append(call.target)
        return out


def calls_in(value: Any) -> list[Call]:
    """Every :class:`Call` in a value tree, innermost first."""
    found: list[Call] = []

    def walk(v: Any) -> None:
        if isinstance(v, Call):
            for a in v.args:
                walk(a)
            for _, a in v.kwargs:
                walk(a)
            found.append(v)
        elif isinstance(v, Arith):
            walk(v.lhs)
            walk(v.rhs)
        elif isinstance(v, ListOf):
            for a in v.items:
                walk(a)
        elif isinstance(v, Index):
            walk(v.obj)
            for a in v.items:
                walk(a)
        elif isinstance(v, SliceOf):
            walk(v.start)
            walk(v.stop)

    walk(value)
    return found


def names_in(value: Any) -> set[str]:
    """Every name a value tree reads (:class:`Ref`)."""
    if isinstance(value, Ref):
        return {value.name}
    if isinstance(value, Call):
        return set().union(*(names_in(a) for a in value.args), *(names_in(a) for _, a in value.kwargs))
    if isinstance(value, Arith):
        return names_in(value.lhs) | names_in(value.rhs)
    if isinstance(value, ListOf):
        return set().union(*(names_in(a) for a in value.items))
    if isinstance(value, Index):
        return names_in(value.obj).union(*(names_in(a) for a in value.items))
    if isinstance(value, SliceOf):
        return names_in(value.start) | names_in(value.stop)
    return set()


def value_text(value: Any) -> str:
    """A value tree back as `.ucut` text (for reports)."""
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Const):
        return value.name or repr(value.value)
    if isinstance(value, ListOf):
        return "[" + ", ".join(value_text(v) for v in value.items) + "]"
    if isinstance(value, Arith):
        if value.lhs is None:
            return f"-{value_text(value.rhs)}"
        return f"({value_text(value.lhs)} {value.op} {value_text(value.rhs)})"
    if isinstance(value, SliceOf):
        if value.ellipsis:
            return "..."
        return ("" if value.start is None else value_text(value.start)) + ":" + \
            ("" if value.stop is None else value_text(value.stop))
    if isinstance(value, Index):
        return f"{value_text(value.obj)}[{', '.join(value_text(v) for v in value.items)}]"
    if isinstance(value, Call):
        args = list(value.args[1:] if value.kind == "method" else value.args)
        text = ", ".join([value_text(a) for a in args] + [f"{k}={value_text(v)}" for k, v in value.kwargs])
        if value.kind == "method":
            return f"{value_text(value.args[0])}.{value.target}({text})"
        return f"{value.target}({text})"
    return str(value)
