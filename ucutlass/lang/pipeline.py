"""Lowering of ``pipeline NAME { … }`` blocks: AST → :class:`ucutlass.ir.Pipeline`.

Names are resolved as far as the text alone allows: a call ``up(x, w)`` must name a kernel of the file; a dotted call
(``torch.nn.functional.rms_norm(…)``, ``F.silu(…)``) must be in the allow-list of torch steps
(:data:`ucutlass.ir.torch_ops.TORCH_FUNCTIONS`), a method (``x.transpose(1, 2)``) in
:data:`~ucutlass.ir.torch_ops.TENSOR_METHODS`, a dotted constant in :data:`~ucutlass.ir.torch_ops.CONSTANTS`; the
pipeline ends with one ``return``. Which names are problem inputs, whether shapes and dtypes flow and whether a
value is used before it is made is decided when the pipeline is bound to a problem (:mod:`ucutlass.bind.pipeline`).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import did_you_mean
from ..ir import Pos
from ..ir.pipeline import Arith, Call, Const, Index, ListOf, Pipeline, Ref, SliceOf, Step
from ..ir.torch_ops import CONSTANTS, LITERALS, TENSOR_METHODS, TORCH_FUNCTIONS, canonical
from .ast import KernelNode, PArith, PAttr, PCall, PIndex, PipelineNode, PKwarg, PList, PNum, PRef, PReturn, PSlice
from .lowering import Lowering

#: The roots of a dotted name that means torch (``torch.…``, ``F.…`` for ``torch.nn.functional``).
DOTTED_ROOTS = ("torch", "F")


def lower_pipelines(low: Lowering, nodes: Sequence[PipelineNode], kernels: Sequence[KernelNode]) -> tuple:
    """Each pipeline's AST → :class:`ucutlass.ir.Pipeline`; problems are collected in ``low.diags`` (codes
    ``duplicate-pipeline``, ``unknown-kernel``, ``not-allowed``, ``bad-call``, ``bad-return``)."""
    names = [k.name for k in kernels]
    seen: dict[str, Pos] = {}
    out = []
    for node in nodes:
        if node.name in seen:
            low.error("duplicate-pipeline", f"pipeline {node.name!r} is defined twice (first at line "
                      f"{seen[node.name].line})", node.name_pos)
        seen.setdefault(node.name, node.name_pos)
        lowered = _PipelineLowering(low, names).lower(node)
        if lowered is not None:
            out.append(lowered)
    return tuple(out)


def _dotted(node: Any) -> str | None:
    """``torch.nn.functional.silu`` for an attribute chain rooted at ``torch`` or ``F``, else None."""
    parts = []
    while isinstance(node, PAttr):
        parts.append(node.name)
        node = node.obj
    if isinstance(node, PRef) and node.name in DOTTED_ROOTS:
        return ".".join([node.name, *reversed(parts)])
    return None


class _PipelineLowering:
    def __init__(self, low: Lowering, kernels: Sequence[str]):
        self.low = low
        self.kernels = list(kernels)
        self.ok = True

    def error(self, code: str, message: str, pos: Pos, valid: Sequence[str] = ()) -> None:
        self.ok = False
        self.low.error(code, message, pos, tuple(valid))

    def lower(self, node: PipelineNode) -> Pipeline | None:
        steps, returns, return_pos = [], None, node.pos
        for item in node.items:
            if isinstance(item, PReturn):
                if returns is not None:
                    self.error("bad-return", f"pipeline {node.name} returns twice (first at line {return_pos.line})",
                               item.pos)
                    continue
                returns, return_pos = tuple(self.value(v) for v in item.values), item.pos
                continue
            if returns is not None:
                self.error("bad-return", f"a step after the return of pipeline {node.name}: return comes last",
                           item.pos)
            names = [t for t, _ in item.targets]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                self.error("bad-call", f"{', '.join(dup)} assigned twice in one step", item.pos)
            value = self.value(item.value)
            steps.append(Step(tuple(names), value, item.pos, tuple(p for _, p in item.targets)))
        if returns is None:
            self.error("bad-return", f"pipeline {node.name} has no return: end it with `return` and the problem's "
                       "outputs in order (return out, or return q, k, v)", node.name_pos)
        if not self.ok:
            return None
        return Pipeline(node.name, tuple(steps), returns or (), node.pos, return_pos)

    def value(self, node: Any) -> Any:
        if isinstance(node, PRef):
            if node.name in LITERALS:
                return Const(LITERALS[node.name], node.pos, node.name)
            return Ref(node.name, node.pos)
        if isinstance(node, PNum):
            text = node.text
            number = int(text) if text.isdigit() else float(text)
            return Const(number, node.pos, text)
        if isinstance(node, PList):
            return ListOf(tuple(self.value(v) for v in node.items), node.pos)
        if isinstance(node, PArith):
            lhs = None if node.op == "neg" else self.value(node.lhs)
            return Arith("-" if node.op == "neg" else node.op, lhs, self.value(node.rhs), node.pos)
        if isinstance(node, PAttr):
            dotted = _dotted(node)
            if dotted is not None and canonical(dotted) in CONSTANTS:
                return Const(canonical(dotted), node.pos, canonical(dotted))
            what = dotted or f".{node.name}"
            self.error("not-allowed", f"{what} is not a value a pipeline can name (constants: dtypes such as "
                       "torch.bfloat16; axes by their problem names; methods only as calls)", node.pos,
                       sorted(CONSTANTS))
            return Const(None, node.pos)
        if isinstance(node, PCall):
            return self.call(node)
        if isinstance(node, PIndex):
            items = []
            for item in node.items:
                if isinstance(item, PSlice):
                    items.append(SliceOf(None if item.start is None else self.value(item.start),
                                         None if item.stop is None else self.value(item.stop), item.ellipsis,
                                         item.pos))
                else:
                    items.append(self.value(item))
            return Index(self.value(node.obj), tuple(items), node.pos)
        if isinstance(node, PKwarg):
            self.error("bad-call", f"{node.name}=…: a keyword argument outside a call", node.pos)
            return Const(None, node.pos)
        raise TypeError(f"unexpected pipeline node {node!r}")

    def call(self, node: PCall) -> Call:
        args, kwargs = [], []
        for a in node.args:
            if isinstance(a, PKwarg):
                kwargs.append((a.name, self.value(a.value)))
            else:
                if kwargs:
                    self.error("bad-call", "a positional argument after a keyword argument", getattr(a, "pos", node.pos))
                args.append(self.value(a))
        func = node.func
        if isinstance(func, PRef):
            if func.name in self.kernels:
                return Call("kernel", func.name, tuple(args), tuple(kwargs), node.pos)
            self.error("unknown-kernel", f"{func.name}(…) calls no kernel of this file{did_you_mean(func.name, self.kernels)}"
                       " (torch steps are written in full: torch.nn.functional.silu(x), x.reshape(…))",
                       func.pos, self.kernels)
            return Call("kernel", func.name, tuple(args), tuple(kwargs), node.pos)
        if isinstance(func, PAttr):
            dotted = _dotted(func)
            if dotted is not None:
                name = canonical(dotted)
                if name not in TORCH_FUNCTIONS:
                    self.error("not-allowed", f"{dotted} is not an allowed torch step{did_you_mean(name, list(TORCH_FUNCTIONS))}"
                               " (tensor ops only: norms, softmax, elementwise, RoPE pieces, routing, cat/split, views;"
                               " GEMMs and attention are kernels)", func.pos, _near(name, list(TORCH_FUNCTIONS)))
                return Call("torch", name, tuple(args), tuple(kwargs), node.pos)
            if func.name not in TENSOR_METHODS:
                self.error("not-allowed", f".{func.name}() is not an allowed tensor method"
                           f"{did_you_mean(func.name, list(TENSOR_METHODS))}", func.pos, sorted(TENSOR_METHODS))
            return Call("method", func.name, (self.value(func.obj), *args), tuple(kwargs), node.pos)
        self.error("bad-call", "only kernels, torch functions and tensor methods can be called", node.pos)
        return Call("kernel", "?", tuple(args), tuple(kwargs), node.pos)


def _near(name: str, valid: Sequence[str]) -> list[str]:
    """The allowed spellings that share ``name``'s module (a short ``valid`` list for a refused torch step)."""
    module = name.rsplit(".", 1)[0]
    same = [v for v in valid if v.rsplit(".", 1)[0] == module]
    return same[:12] or list(valid)[:12]
