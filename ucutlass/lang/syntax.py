"""Text → AST with Lark (LALR, ``grammar/ucut.lark``, cached), syntax errors in words, and :func:`parse` /
:func:`parse_file`: text → AST → IR (:mod:`ucutlass.lang.lower`)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from ..errors import Diagnostic, UcutSyntaxError, did_you_mean, excerpt
from ..ir import Pos, Program
from .ast import (Assign, Atom, BinOp, Call, ChoiceNode, Decl, Dims, EpilogueNode, KernelNode, NameNode, Neg, Num,
                  PArith, PAttr, PCall, PIndex, PipelineNode, PKwarg, PList, PNum, PRef, PReturn, PSlice, PStep,
                  SettingNode, SliceNode, SourceNode, When)
from .limits import MAX_FILE_BYTES, check_text, check_tree
from .lower import lower_program
from .lowering import Lowering
from .vocabulary import LAYOUTS

# --- the parser ------------------------------------------------------------------------------------------

@functools.cache
def parser() -> Lark:
    """The LALR parser for ``ucut.lark``, built once per process."""
    text = (resources.files("ucutlass.grammar") / "ucut.lark").read_text(encoding="utf-8")
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=True)


def _token_pos(tok: Token, file: str) -> Pos:
    return Pos(file, tok.line or 0, tok.column or 0, tok.end_line or 0, tok.end_column or 0,
               tok.start_pos if tok.start_pos is not None else -1, tok.end_pos if tok.end_pos is not None else -1)


def _meta_pos(meta: Any, file: str) -> Pos:
    if getattr(meta, "empty", True):
        return Pos(file)
    return Pos(file, meta.line, meta.column, meta.end_line, meta.end_column, meta.start_pos, meta.end_pos)


@v_args(meta=True)
class ToAst(Transformer):
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
        return KernelNode(str(name), self._t(name), str(family), self._t(family), tuple(items), self._p(meta), when)

    def when(self, meta, children):
        mode, _le, bound = children
        return When(str(mode), self._t(mode), str(bound), self._t(bound), self._p(meta))

    def setting(self, meta, children):
        name, value = children
        return SettingNode(str(name), self._t(name), value, self._p(meta))

    def decl(self, meta, children):
        name, dtype, dims, layout, source = children
        return Decl(str(name), self._t(name), dtype, dims, layout, source, self._p(meta))

    def dims(self, meta, children):
        return Dims(tuple(str(c) for c in children), self._p(meta))

    def scaled_dim(self, meta, children):
        name, number = children
        return f"{name}/{number}"

    def layout(self, meta, children):
        (item,) = children
        if isinstance(item, Token):
            return Atom("name", str(item), self._t(item))
        return item

    def bind_in(self, meta, children):
        return SourceNode("in", str(children[1]), self._p(meta), children[2])

    def bind_out(self, meta, children):
        return SourceNode("out", str(children[1]), self._p(meta), children[2])

    def slice(self, meta, children):
        return SliceNode(tuple(children), self._p(meta))

    def slice_dim(self, meta, children):
        start, stop = children
        return (start or "", stop or "", self._p(meta))

    def slice_bound(self, meta, children):
        return "".join(str(c) for c in children if c is not None)

    def literal(self, meta, children):
        return SourceNode("literal", children[0], self._p(meta))

    def signed_number(self, meta, children):
        return "".join(str(c) for c in children if c is not None)

    def epilogue(self, meta, children):
        return EpilogueNode(tuple(children), self._p(meta))

    def assign(self, meta, children):
        name, expr = children
        return Assign(str(name), self._t(name), expr, self._p(meta))

    def choice(self, meta, children):
        return ChoiceNode(tuple(children), self._p(meta))

    def shape(self, meta, children):
        return Atom("shape", str(children[0]), self._t(children[0]))

    def number(self, meta, children):
        return Atom("number", str(children[0]), self._t(children[0]))

    def name(self, meta, children):
        return Atom("name", str(children[0]), self._t(children[0]))

    def _binop(op):  # noqa: N805 - a factory used in the class body
        def method(self, meta, children):
            lhs, *_, rhs = children  # sub carries its MINUS token in the middle
            return BinOp(op, lhs, rhs, self._p(meta))
        return method

    add = _binop("+")
    sub = _binop("-")
    mul = _binop("*")
    div = _binop("/")
    del _binop

    def neg(self, meta, children):
        return Neg(children[-1], self._p(meta))

    def num(self, meta, children):
        return Num(str(children[0]), self._t(children[0]))

    def ref(self, meta, children):
        return NameNode(str(children[0]), self._t(children[0]))

    def call(self, meta, children):
        name, *args = children
        return Call(str(name), tuple(a for a in args if a is not None), self._t(name))

    # pipelines (ucutlass/lang/pipeline.py lowers them)
    def pipeline(self, meta, children):
        name, *items = children
        return PipelineNode(str(name), self._t(name), tuple(items), self._p(meta))

    def pipe_step(self, meta, children):
        *targets, value = children
        return PStep(tuple((str(t), self._t(t)) for t in targets), value, self._p(meta))

    def pipe_return(self, meta, children):
        return PReturn(tuple(children), self._p(meta))

    def _parith(op):  # noqa: N805 - a factory used in the class body
        def method(self, meta, children):
            lhs, *_, rhs = children
            return PArith(op, lhs, rhs, self._p(meta))
        return method

    p_add = _parith("+")
    p_sub = _parith("-")
    p_mul = _parith("*")
    p_div = _parith("/")
    p_floordiv = _parith("//")
    p_mod = _parith("%")
    del _parith

    def p_neg(self, meta, children):
        return PArith("neg", None, children[-1], self._p(meta))

    def p_attr(self, meta, children):
        obj, name = children
        return PAttr(obj, str(name), self._p(meta))

    def p_call(self, meta, children):
        func, *args = children
        return PCall(func, tuple(a for a in args if a is not None), self._p(meta))

    def p_index(self, meta, children):
        obj, *items = children
        return PIndex(obj, tuple(items), self._p(meta))

    def p_ref(self, meta, children):
        return PRef(str(children[0]), self._t(children[0]))

    def p_num(self, meta, children):
        return PNum(str(children[0]), self._t(children[0]))

    def p_list(self, meta, children):
        return PList(tuple(c for c in children if c is not None), self._p(meta))

    def p_kwarg(self, meta, children):
        name, value = children
        return PKwarg(str(name), value, self._t(name))

    def p_slice(self, meta, children):
        start, stop = children
        return PSlice(start, stop, self._p(meta))

    def p_ellipsis(self, meta, children):
        return PSlice(None, None, self._p(meta), ellipsis=True)


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
        pattern = parser().get_terminal(name).pattern
    except KeyError:
        return name
    return repr(pattern.value) if pattern.type == "str" else name.lower()


def _terminal_spelling(name: str) -> str | None:
    try:
        pattern = parser().get_terminal(name).pattern
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


def _open_choice(stack: list) -> Token | None:
    """The ``{`` of a choice still open at the top of Lark's value stack (``name = {a, b`` so far), else None."""
    for item in reversed(stack[-64:]):
        if isinstance(item, Token) and item.type == "LBRACE":
            return item
        if isinstance(item, Token) and item.type in ("EQUAL", "RBRACE", "COLON"):
            return None  # back past the choice's start: not inside a choice's list
    return None


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
    elif ("RBRACE" in expected and "COMMA" in expected and (opened := _open_choice(stack)) is not None
          and tok.line > opened.line):
        # cluster = {1x1x1, 2x1x1   (no '}'): name the '{' left open, not only the token that follows it
        message = (f"the choice {{…}} opened at {opened.line}:{opened.column} is not closed: expected ',' or '}}', "
                   f"found {_found(tok)}")
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
            message = f"{str(prev)!r} is not a layout{did_you_mean(str(prev), LAYOUTS)}"
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
    elif tok.type == "MINUS" and isinstance(prev, Token) and prev.type == "EQUAL":  # window = -1
        name = stack[-2] if len(stack) >= 2 and isinstance(stack[-2], Token) else None
        message = (f"a setting's value is never negative{f' ({str(name)!r})' if name is not None else ''}: settings "
                   "take a name, a number, a shape or a {choice}; to turn an optional setting off, leave it out")
        valid, code = (), "bad-value"
    elif tok.type == "LSQB":
        message = "unexpected '[': dims follow the dtype of a declaration, as in a : bf16[M, K] (declarations " \
                  "use ':', settings use '=')"
        valid = (":",)
    moved = at_end or pos.start != tok.start_pos  # the diagnostic points at an earlier token
    context = excerpt(text, pos) if moved else e.get_context(text)
    return UcutSyntaxError([Diagnostic(message, pos, valid, code=code)], context)


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
            breaks a limit of :mod:`ucutlass.lang.limits` (empty, too large, an expression too deep or too long,
            a number too long or out of range), or does not lower (every problem found: unknown setting, dtype
            or function, bad dims or value, undefined or unused name, duplicates, missing operands, …); at most
            :data:`~ucutlass.errors.MAX_DIAGNOSTICS` are listed.
    """
    check_text(text, file)
    try:
        tree = parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text, file) from None
    except RecursionError:  # not expected (LALR builds the tree without recursion): still an error in words
        raise UcutSyntaxError([Diagnostic("the program nests too deeply to parse", Pos(file, 1, 1),
                                          code="too-deep")]) from None
    broken = check_tree(tree, file)
    if broken:
        raise UcutSyntaxError(broken, source=text)
    try:
        blocks = ToAst(file).transform(tree)
    except VisitError as e:
        meta = getattr(e.obj, "meta", None)
        pos = _meta_pos(meta, file) if meta is not None else Pos(file)
        raise UcutSyntaxError([Diagnostic(f"cannot read {e.rule}: {e.orig_exc}", pos, code="syntax")],
                              excerpt(text, pos)) from e.orig_exc
    kernels = [b for b in blocks if isinstance(b, KernelNode)]
    pipelines = [b for b in blocks if isinstance(b, PipelineNode)]
    lowering = Lowering(file)
    program = lower_program(lowering, kernels, text, pipelines)
    if lowering.diags:
        diags = sorted(lowering.diags, key=lambda d: (d.pos.line, d.pos.column))
        raise UcutSyntaxError(diags, source=text)
    return program


def parse_file(path: str | Path) -> Program:
    """Read and :func:`parse` a `.ucut` file; positions name the file as given.

    Raises:
        UcutSyntaxError: as :func:`parse`; a file over :data:`~ucutlass.lang.limits.MAX_FILE_BYTES` is refused
            having read only that many bytes.
        OSError, UnicodeDecodeError: the file cannot be read, or is not UTF-8 (the CLI words them).
    """
    path = Path(path)
    with path.open("rb") as f:  # at most one byte past the limit is read (a pipe or /dev/zero has no size)
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        size = path.stat().st_size
        held = f"{size} bytes" if size > MAX_FILE_BYTES else f"more than {MAX_FILE_BYTES} bytes"
        raise UcutSyntaxError([Diagnostic(f"the file holds {held}; a .ucut program may hold at most "
                                          f"{MAX_FILE_BYTES} ({MAX_FILE_BYTES // 1024} KiB)", Pos(str(path), 1, 1),
                                          code="too-large")])
    return parse(data.decode("utf-8"), file=str(path))
