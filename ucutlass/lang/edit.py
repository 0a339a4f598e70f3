"""Editing `.ucut` text without losing its comments: cut one kernel's block, write ``swap_ab = auto`` out, and put
tuned kernels together into a dispatch program (what the tuner writes as best.ucut)."""

from __future__ import annotations

import re
from typing import Sequence

from .syntax import parse

_HEADER = re.compile(r"^[ \t]*kernel\s+[A-Za-z_]\w*\s*:\s*([A-Za-z_]\w*)\s*(?:when\s+\w+\s*<=\s*[\w.]+\s*)?\{", re.M)


def kernel_block(source: str, name: str) -> str:
    """The text of kernel ``name``'s block in a program's ``source``, from ``kernel`` to its closing ``}``.

    Raises:
        UcutSyntaxError: ``source`` does not parse. KeyError: it has no kernel ``name``.
    """
    kernel = parse(source).kernel(name)
    start = source.rfind("kernel", 0, kernel.pos.start)
    depth, i = 0, source.index("{", kernel.pos.end)
    while True:
        c = source[i]
        if c == "#":  # a comment runs to the end of its line and may hold braces
            i = source.find("\n", i)
        elif c in "{}":
            depth += 1 if c == "{" else -1
            if depth == 0:
                return source[start:i + 1]
        i += 1


def pin_swap_ab(block: str, swap: bool) -> str:
    """``block`` (one kernel's text, as :func:`kernel_block` cuts it) with ``swap_ab = auto`` written out as ``swap``.

    ``auto`` follows the kernel's ``when`` (:func:`ucutlass.arch.resolve_swap_ab`: true under ``when M <= 64``), so a
    kernel measured alone and then put into a dispatch would change; the tuner pins each tuned kernel's value first.
    A block that writes ``true`` or ``false`` is returned unchanged.

    Raises:
        UcutSyntaxError: ``block`` does not parse. ValueError: it holds no kernel or several.
    """
    kernel = parse(block).kernel()
    if getattr(kernel, "swap_ab", None) is not None:
        return block
    value = "true" if swap else "false"
    where = kernel.setting_pos.get("swap_ab")
    if where is not None and where.start >= 0:  # written `swap_ab = auto`
        return block[:where.start] + value + block[where.end:]
    headers = list(_HEADER.finditer(block))
    if len(headers) != 1:
        raise ValueError(f"the block holds {len(headers)} kernel headers; give one kernel per block")
    at = headers[0].end()
    if block[at:at + 1] == "\n":  # a line of its own after the header
        return f"{block[:at + 1]}  swap_ab = {value}   # as tuned (auto would follow the when)\n{block[at + 1:]}"
    return f"{block[:at]} swap_ab = {value} {block[at:]}"


def render_dispatch(blocks: Sequence[tuple[str, str, tuple[str, int] | None]]) -> str:
    """The text of a dispatch program made of concrete kernels (what the tuner writes as best.ucut).

    Args:
        blocks: per kernel, in dispatch order: (the `.ucut` text of its block, as :func:`kernel_block` cuts it,
            the kernel's new name, its ``when`` such as ``("M", 64)``, or None for the last one).

    Returns:
        The blocks with their headers rewritten to ``kernel NAME : gemm when M <= 64 {``, one blank line apart.

    Raises:
        ValueError: a block without a kernel header, or with several.
        UcutSyntaxError: the result is not a valid dispatch (bounds not increasing, a fallback before the last, …).
    """
    texts = []
    for block, name, when in blocks:
        headers = list(_HEADER.finditer(block))
        if len(headers) != 1:
            raise ValueError(f"the block for {name} holds {len(headers)} kernel headers (kernel NAME : FAMILY {{); "
                             "give one kernel per block")
        header = headers[0]
        cond = f" when {when[0]} <= {when[1]}" if when else ""
        texts.append(f"{block[:header.start()]}kernel {name} : {header.group(1)}{cond} {{{block[header.end():]}"
                     .strip("\n"))
    text = "\n\n".join(texts) + "\n"
    parse(text, "<dispatch>")
    return text
