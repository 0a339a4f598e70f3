"""The `.ucut` AST: the parse tree as small frozen dataclasses, still in source spellings, with positions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from ..ir import Pos


@dataclass(frozen=True)
class Atom:
    kind: str  # "shape" | "number" | "name"
    text: str
    pos: Pos


@dataclass(frozen=True)
class ChoiceNode:
    items: tuple[Atom, ...]
    pos: Pos


Value = Union[Atom, ChoiceNode]


@dataclass(frozen=True)
class SourceNode:
    kind: str  # "in" (<-) | "out" (->) | "literal" (= number)
    text: str
    pos: Pos
    slice: "SliceNode | None" = None  # <- x[:, -keep:]


@dataclass(frozen=True)
class SliceNode:
    """``[:, -keep:]`` after a bound name: per leading dim of the tensor, (start, stop, pos) ("" when not written)."""

    dims: tuple[tuple[str, str, Pos], ...]
    pos: Pos


@dataclass(frozen=True)
class Dims:
    names: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True)
class Decl:
    name: str
    name_pos: Pos
    dtype: Value
    dims: Dims | None
    layout: Value | None
    source: SourceNode | None
    pos: Pos


@dataclass(frozen=True)
class SettingNode:
    name: str
    name_pos: Pos
    value: Value
    pos: Pos


@dataclass(frozen=True)
class Num:
    text: str
    pos: Pos


@dataclass(frozen=True)
class NameNode:
    name: str
    pos: Pos


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class BinOp:
    op: str
    lhs: Any
    rhs: Any
    pos: Pos


@dataclass(frozen=True)
class Neg:
    arg: Any
    pos: Pos


@dataclass(frozen=True)
class Assign:
    name: str
    name_pos: Pos
    expr: Any
    pos: Pos


@dataclass(frozen=True)
class EpilogueNode:
    items: tuple[Union[Decl, Assign], ...]
    pos: Pos


@dataclass(frozen=True)
class When:
    """``when M <= 64`` in a kernel's header (a dispatch condition; lowered in :mod:`ucutlass.lang.dispatch`)."""

    mode: str
    mode_pos: Pos
    bound: str
    bound_pos: Pos
    pos: Pos


@dataclass(frozen=True)
class KernelNode:
    name: str
    name_pos: Pos
    family: str
    family_pos: Pos
    items: tuple[Union[SettingNode, Decl, EpilogueNode], ...]
    pos: Pos
    when: When | None = None


# --- pipelines (lowered in :mod:`ucutlass.lang.pipeline`) ---------------------------------------------------

@dataclass(frozen=True)
class PRef:
    name: str
    pos: Pos


@dataclass(frozen=True)
class PNum:
    text: str
    pos: Pos


@dataclass(frozen=True)
class PList:
    items: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class PArith:
    op: str  # + - * /, or "neg" (lhs None)
    lhs: Any
    rhs: Any
    pos: Pos


@dataclass(frozen=True)
class PAttr:
    obj: Any
    name: str
    pos: Pos


@dataclass(frozen=True)
class PKwarg:
    name: str
    value: Any
    pos: Pos


@dataclass(frozen=True)
class PCall:
    func: Any  # PRef (a kernel), PAttr (torch.… or a method)
    args: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class PSlice:
    start: Any
    stop: Any
    pos: Pos
    ellipsis: bool = False


@dataclass(frozen=True)
class PIndex:
    obj: Any
    items: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class PStep:
    targets: tuple[tuple[str, Pos], ...]
    value: Any
    pos: Pos


@dataclass(frozen=True)
class PReturn:
    values: tuple[Any, ...]
    pos: Pos


@dataclass(frozen=True)
class PipelineNode:
    name: str
    name_pos: Pos
    items: tuple[Any, ...]
    pos: Pos
