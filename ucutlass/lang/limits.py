"""Bounds on a `.ucut` text, checked while parsing so that no input can hang, exhaust memory or raise anything
but :class:`~ucutlass.errors.UcutSyntaxError`.

General limits, not special cases (issue 19): the size of the file, the nesting depth and node count of an
epilogue expression (in the text and after intermediates are inlined: the EVT tree CUTLASS builds), the length of
a number literal, integer settings and extents within ``int32`` (what the C++ side stores), floating constants
finite in f32 (the epilogue's compute type), and an empty program. The parse tree is walked without recursion, so
a 20,000-term sum is refused with a position instead of a ``RecursionError``. Each error names the line and column
and the limit. The number of diagnostics printed and the width of each source excerpt are bounded in
:mod:`ucutlass.errors` (:data:`MAX_DIAGNOSTICS`, :data:`~ucutlass.errors.MAX_EXCERPT_CHARS`).
"""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from .. import ir
from ..errors import MAX_DIAGNOSTICS, Diagnostic, Pos

#: Largest `.ucut` file, in bytes (the shipped programs are under 4 KiB).
MAX_FILE_BYTES = 256 * 1024
#: Deepest nesting of an epilogue expression (calls, unary minus, operators), in the text and once inlined.
MAX_DEPTH = 32
#: Most nodes (operators, calls, names, numbers) in one epilogue expression, in the text and once inlined.
MAX_EXPRESSION_NODES = 256
#: Longest number literal, in characters.
MAX_NUMBER_CHARS = 40
#: Largest integer of a setting, a dim, a shape, a slice or a ``when`` bound (C++ ``int``).
MAX_INT = 2**31 - 1
#: Largest magnitude of a floating constant (f32's largest finite value).
MAX_F32 = 3.4028234663852886e38

#: Parse-tree nodes of epilogue expressions (the labels of ``?expr`` … ``?primary`` in grammar/ucut.lark).
EXPRESSION_NODES = frozenset({"add", "sub", "mul", "div", "neg", "call", "num", "ref"})
#: Parents whose NUMBER is a floating constant (an epilogue number, a scalar's literal value).
_FLOAT_PARENTS = frozenset({"num", "signed_number"})

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_EXPRESSION_NODES", "MAX_NUMBER_CHARS", "MAX_INT", "MAX_F32",
           "MAX_DIAGNOSTICS", "check_text", "check_tree", "check_expression"]


def check_text(text: str, file: str) -> None:
    """The whole text: at most :data:`MAX_FILE_BYTES`.

    Args:
        text: the program.
        file: its name in positions.

    Raises:
        UcutSyntaxError: code ``too-large``, at 1:1.
    """
    from ..errors import UcutSyntaxError

    size = len(text) if len(text) * 4 <= MAX_FILE_BYTES else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        raise UcutSyntaxError([Diagnostic(f"the file holds {size} bytes; a .ucut program may hold at most "
                                          f"{MAX_FILE_BYTES} ({MAX_FILE_BYTES // 1024} KiB)", Pos(file, 1, 1),
                                          code="too-large")])


def check_tree(tree: Tree, file: str) -> list[Diagnostic]:
    """Every limit on a Lark parse tree (before it is turned into the AST), walked with an explicit stack.

    Args:
        tree: the tree of :func:`ucutlass.lang.syntax.parser`'s ``parse``.
        file: the name in positions.

    Returns:
        One diagnostic per broken limit (code ``empty``, ``too-deep``, ``too-large`` or ``bad-number``), in source order;
        an expression too deep or too large is reported once, at its start, and not walked further.
    """
    if not tree.children:  # no kernel: an empty file, or only blanks and comments
        return [Diagnostic("the file holds no kernel (it is empty or only comments): a program is one or more "
                           "blocks kernel NAME : FAMILY { … }", Pos(file, 1, 1), ("kernel",), code="empty")]
    diags: list[Diagnostic] = []
    stack: list[tuple[Any, str, bool]] = [(tree, "", False)]  # node, its parent's label, inside an expression
    while stack:
        node, parent, inside = stack.pop()
        if isinstance(node, Token):
            if node.type == "NUMBER":
                diags.extend(_number(node, parent, file))
            elif node.type == "SHAPE":
                diags.extend(_shape(node, file))
            continue
        if not isinstance(node, Tree):
            continue
        data = str(node.data)
        if data in EXPRESSION_NODES and not inside:  # the top of an expression
            inside = True
            size, deepest, more = _measure(node)
            pos = _tree_pos(node, file)
            at_least = "at least " if more else ""
            if deepest > MAX_DEPTH:
                diags.append(Diagnostic(f"this expression nests {at_least}{deepest} deep; at most {MAX_DEPTH} "
                                        "(each operator of a chain like a + b + c is one level of CUTLASS's EVT "
                                        "tree, as each call is; name parts of it: h = …, then use h)", pos,
                                        code="too-deep"))
                continue
            if size > MAX_EXPRESSION_NODES:
                diags.append(Diagnostic(f"this expression has {at_least}{size} terms (operators, calls, names, "
                                        f"numbers); at most {MAX_EXPRESSION_NODES}", pos, code="too-large"))
                continue
        stack.extend((child, data, inside) for child in reversed(node.children))
    return sorted(diags, key=lambda d: (d.pos.line, d.pos.column))


def check_expression(expr: ir.Expr, pos: Pos) -> Diagnostic | None:
    """An epilogue expression once intermediates are inlined (``h = acc + bias  d = h * h`` holds h twice): its
    node count and depth, counted with repetition (what the rendered EVT tree holds), within the limits.

    Args:
        expr: an IR expression (a DAG: an inlined intermediate is one shared object).
        pos: where to report (the statement).

    Returns:
        A ``too-deep`` or ``too-large`` diagnostic, or None.
    """
    size, depth = _ir_measure(expr)
    if depth > MAX_DEPTH:
        return Diagnostic(f"with its intermediates inlined this expression nests {depth} deep; at most "
                          f"{MAX_DEPTH}", pos, code="too-deep")
    if size > MAX_EXPRESSION_NODES:
        return Diagnostic(f"with its intermediates inlined this expression has {size} terms; at most "
                          f"{MAX_EXPRESSION_NODES} (an intermediate used several times counts each time)", pos,
                          code="too-large")
    return None


# --- helpers ----------------------------------------------------------------------------------------------

def _tree_pos(node: Tree, file: str) -> Pos:
    meta = node.meta
    if getattr(meta, "empty", True):
        return Pos(file)
    return Pos(file, meta.line, meta.column, meta.end_line, meta.end_column, meta.start_pos, meta.end_pos)


def _token_pos(tok: Token, file: str) -> Pos:
    return Pos(file, tok.line or 0, tok.column or 0, tok.end_line or 0, tok.end_column or 0,
               tok.start_pos if tok.start_pos is not None else -1, tok.end_pos if tok.end_pos is not None else -1)


def _measure(top: Tree) -> tuple[int, int, bool]:
    """(expression nodes, depth, stopped early) of the expression rooted at ``top``, without recursion; stops
    counting well past the limits (the caller only needs to know that they are broken)."""
    size, deepest = 0, 0
    stack = [(top, 1)]
    while stack and size <= MAX_EXPRESSION_NODES * 4:
        node, depth = stack.pop()
        size += 1
        deepest = max(deepest, depth)
        for child in node.children:
            if isinstance(child, Tree) and str(child.data) in EXPRESSION_NODES:
                stack.append((child, depth + 1))
            elif isinstance(child, Tree):  # not expected in an expression: walk through it at the same depth
                stack.append((child, depth))
    return size, deepest, bool(stack)


def _ir_measure(expr: ir.Expr) -> tuple[int, int]:
    """(nodes counted with repetition, depth) of an IR expression DAG, memoised by object (a shared
    intermediate costs one visit), without recursion."""
    memo: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in memo:
            continue
        kids = _children(node)
        if done or not kids:
            sizes = [memo[id(k)] for k in kids] if kids else []
            memo[id(node)] = (1 + sum(s for s, _ in sizes), 1 + max((d for _, d in sizes), default=0))
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(expr)]


def _children(node: Any) -> list[Any]:
    """The sub-expressions of an IR expression node (``Binary``'s lhs and rhs, ``Unary``'s and ``Cast``'s arg)."""
    if isinstance(node, ir.Binary):
        return [node.lhs, node.rhs]
    if isinstance(node, (ir.Unary, ir.Cast)):
        return [node.arg]
    return []


def _number(tok: Token, parent: str, file: str) -> list[Diagnostic]:
    text = str(tok)
    pos = _token_pos(tok, file)
    if len(text) > MAX_NUMBER_CHARS:
        return [Diagnostic(f"a number of {len(text)} characters; at most {MAX_NUMBER_CHARS}", pos,
                           code="bad-number")]
    is_int = text.isdigit()
    if is_int and parent not in _FLOAT_PARENTS:
        if int(text) > MAX_INT:
            return [Diagnostic(f"{text} is too large: integers here are at most {MAX_INT} (2^31 - 1)", pos,
                               code="bad-number")]
        return []
    if not abs(float(text)) <= MAX_F32:
        return [Diagnostic(f"{text} is not a finite f32 constant (at most {MAX_F32:.7g})", pos,
                           code="bad-number")]
    return []


def _shape(tok: Token, file: str) -> list[Diagnostic]:
    text = str(tok)
    pos = _token_pos(tok, file)
    if len(text) > 4 * MAX_NUMBER_CHARS:
        return [Diagnostic(f"a shape of {len(text)} characters; at most {4 * MAX_NUMBER_CHARS}", pos,
                           code="bad-number")]
    parts = text.split("x")
    if any(len(p) > MAX_NUMBER_CHARS or int(p) > MAX_INT for p in parts):
        return [Diagnostic(f"{text}: each extent of a shape is at most {MAX_INT} (2^31 - 1)", pos,
                           code="bad-number")]
    return []
