"""Per-shape dispatch: several kernels, one per range of M (or N, K), graded and called as one solution.

One CUTLASS configuration is not the fastest from M = 1 to M = 16384 (cuBLAS, too, picks a kernel per shape).
A `.ucut` program whose kernels carry ``when`` is a *dispatch*::

    kernel decode : gemm when M <= 64   { … }   # the calls with M ≤ 64
    kernel mid    : gemm when M <= 1024 { … }   # the other calls with M ≤ 1024
    kernel large  : gemm { … }                  # the fallback: every other call

Each call runs the first kernel, in file order, whose condition holds for the call's GEMM modes
(``ucutlass.runtime.pick``); the last kernel has no ``when``, and every ``when`` names the same mode. The kernels
are gemms that bind the same tensors, compute the same epilogue and have one target: they differ only in settings
(tile, cluster, schedule, stages, scheduler, split_k, …).

This module lowers and checks ``when`` (:func:`lower_dispatch`, called by :mod:`ucutlass.dsl`) and writes a
dispatch program from tuned kernels (:func:`render_dispatch`, :func:`pin_swap_ab`). Choosing the kernel of a call
(``pick``, ``dispatch_callable``) and describing a dispatch (``describe``) are run time: :mod:`ucutlass.runtime`;
the grader's recipe for a compiled dispatch (``dispatch_solution``) is :mod:`ucutlass.solution`'s.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any, Sequence

from .ir import Choice, EpilogueOutput, GemmKernel, Operand, Pos, expr_to_text

if TYPE_CHECKING:  # pragma: no cover
    from .dsl import _Kernel, _Lowering

#: The modes a ``when`` may name: the GEMM extents of a call.
MODES = ("M", "N", "K")


# --- lowering ------------------------------------------------------------------------------------------

def lower_dispatch(low: "_Lowering", asts: Sequence["_Kernel"], kernels: Sequence[GemmKernel | None]
                   ) -> list[GemmKernel | None]:
    """Check the ``when`` conditions of a program and set :attr:`GemmKernel.when` on its kernels.

    Args:
        low: the lowering, which collects the diagnostics (codes ``bad-when``, ``dispatch-order``,
            ``dispatch-mismatch``).
        asts: the program's kernels as parsed, in file order (some with ``when``).
        kernels: their lowered kernels, None where a kernel did not lower (its errors say why).

    Returns:
        ``kernels`` with ``when`` set (and its position in ``setting_pos["when"]``).
    """
    whens: list[tuple[str, int] | None] = []
    for k in asts:
        w, ok = k.when, True
        if w is None:
            whens.append(None)
            continue
        if k.family != "gemm":
            low.error("bad-when", f"only gemm kernels take when; kernel {k.name} is {_a(k.family)} (a dispatch "
                      "chooses among gemm kernels)", w.pos)
            ok = False
        if w.mode not in MODES:
            from .dsl import _did_you_mean

            hint = f"; did you mean {w.mode.upper()!r}?" if w.mode.upper() in MODES else _did_you_mean(w.mode, MODES)
            low.error("bad-when", f"when {w.mode} <= {w.bound}: {w.mode!r} is not a GEMM mode{hint}", w.mode_pos,
                      MODES)
            ok = False
        if not (w.bound.isdigit() and int(w.bound) > 0):
            low.error("bad-when", f"when {w.mode} <= {w.bound}: the bound is a whole number ≥ 1 (the largest "
                      f"{w.mode} this kernel serves)", w.bound_pos, ("64", "1024"))
            ok = False
        whens.append((w.mode, int(w.bound)) if ok else None)
    if not any(k.when is not None and k.family != "gemm" for k in asts):  # else bad-when said all there is to say
        _check_order(low, asts, whens)
        _check_shared(low, asts, kernels)
    out = list(kernels)
    for i, (k, when) in enumerate(zip(asts, whens)):
        if out[i] is not None and when is not None:
            out[i] = dataclasses.replace(out[i], when=when,  # type: ignore[arg-type]
                                         setting_pos={**out[i].setting_pos, "when": k.when.pos})
    return out


def _check_order(low: "_Lowering", asts: Sequence["_Kernel"], whens: Sequence[tuple[str, int] | None]) -> None:
    """Only the last kernel lacks ``when`` (it serves the calls no condition takes), and every kernel can run:
    a bound on a mode is larger than every earlier bound on that mode."""
    last = asts[-1]
    if last.when is not None:
        low.error("dispatch-order", f"the last kernel of a dispatch, {last.name}, has a when: a call with "
                  f"{last.when.mode} > {last.when.bound} would find no kernel; drop its when to make it the "
                  "fallback", last.when.pos)
    for i, k in enumerate(asts[:-1]):
        if k.when is None:
            later = ", ".join(x.name for x in asts[i + 1:])
            low.error("dispatch-order", f"kernel {k.name} has no when, so it serves every call and the kernels after "
                      f"it ({later}) can never run; only the last kernel of a dispatch (the fallback) has no when",
                      k.name_pos)
    named = [(k, w) for k, w in zip(asts, whens) if w is not None]
    for k, when in named[1:]:
        if when[0] != named[0][1][0]:
            low.error("dispatch-order", f"kernel {k.name} splits on {when[0]}, but kernel {named[0][0].name} splits on "
                      f"{named[0][1][0]}: a dispatch splits one mode into ranges", k.when.pos,  # type: ignore[union-attr]
                      (named[0][1][0],))
            return
    widest: dict[str, tuple[int, "_Kernel"]] = {}  # mode -> the largest earlier bound and its kernel
    for k, when in zip(asts, whens):
        if when is None:
            continue
        mode, bound = when
        if mode in widest and bound <= widest[mode][0]:
            first, other = widest[mode]
            low.error("dispatch-order", f"kernel {k.name} can never run: every call with {mode} <= {bound} goes to "
                      f"kernel {other.name} (when {mode} <= {first}, line {other.name_pos.line}), which is tried "
                      f"first; bounds on one mode increase along the file", k.when.pos)  # type: ignore[union-attr]
        else:
            widest[mode] = (bound, k)


def _check_shared(low: "_Lowering", asts: Sequence["_Kernel"], kernels: Sequence[GemmKernel | None]) -> None:
    """Every kernel of a dispatch is a gemm binding the same tensors with the same declarations and computing the
    same epilogue as the first one; only settings differ."""
    first: tuple[GemmKernel, dict[str, tuple[Any, str, Pos]]] | None = None
    for k, kernel in zip(asts, kernels):
        if k.family != "gemm":
            if k.when is None:  # with a when, bad-when said so
                low.error("dispatch-mismatch", f"every kernel of a dispatch is a gemm; kernel {k.name} is "
                          f"{_a(k.family)}", k.family_pos, ("gemm",))
            continue
        if kernel is None:
            continue  # did not lower: its own errors say why
        parts = _shared_parts(kernel)
        if first is None:
            first = (kernel, parts)
            continue
        base, base_parts = first
        for key in dict.fromkeys([*base_parts, *parts]):
            mine, theirs = parts.get(key), base_parts.get(key)
            if mine is not None and theirs is not None and mine[0] == theirs[0]:
                continue
            verb = {"d =": "computes", "target": "has"}.get(key, "declares")
            here = f"{verb} {mine[1]}" if mine else f"has no {key}"
            there = f"{verb} {theirs[1]}" if theirs else f"has no {key}"
            low.error("dispatch-mismatch", f"kernel {kernel.name} {here}, but kernel {base.name} {there}: the kernels "
                      "of a dispatch bind the same tensors, compute the same epilogue and have one target; only settings differ",
                      mine[2] if mine else kernel.pos)
            break  # one difference per kernel is enough to act on


def _a(family: str) -> str:
    return f"{'an' if family[0] in 'aeiou' else 'a'} {family}"


def _shared_parts(kernel: GemmKernel) -> dict[str, tuple[Any, str, Pos]]:
    """What the kernels of a dispatch share, by name: (IR value, its `.ucut` text, its position) of each operand,
    scale, epilogue input and output, and of the epilogue's ``d = …`` statement."""
    parts: dict[str, tuple[Any, str, Pos]] = {}
    for x in (*kernel.operands, *kernel.scales, *kernel.epilogue_inputs, *kernel.epilogue_outputs):
        parts[x.name] = (x, _declaration(x), x.pos)
    epilogue = kernel.epilogue
    parts["d ="] = (epilogue, f"d = {expr_to_text(epilogue)}", getattr(epilogue, "pos", kernel.pos))
    # one solution runs on one GPU: an sm90 kernel beside an sm100 one could run on neither
    target = getattr(kernel.target, "value", kernel.target)
    parts["target"] = (kernel.target, f"target = {target}", kernel.setting_pos.get("target", kernel.pos))
    return parts


def _declaration(x: Any) -> str:
    """``b : bf16[N, K] row <- w`` for an operand, scale, epilogue input or output (outputs with their statement)."""
    def spell(v: Any) -> str:
        if isinstance(v, Choice):
            return "{" + ", ".join(v.spellings) + "}"
        return str(getattr(v, "value", v))

    dims = (*getattr(x, "batch", ()), *x.dims)
    text = f"{x.name} : {spell(x.dtype)}" + (f"[{', '.join(dims)}] {spell(x.layout)}" if dims else "")
    output = isinstance(x, EpilogueOutput) or (isinstance(x, Operand) and x.name == "d")
    if x.binding:
        view = f"[{', '.join(x.slice)}]" if getattr(x, "slice", ()) else ""
        text += f" {'->' if output else '<-'} {x.binding}{view}"
    elif getattr(x, "value", None) is not None and not isinstance(x, EpilogueOutput):
        text += f" = {x.value}"
    if isinstance(x, EpilogueOutput):
        value = expr_to_text(x.value)
        text += f" ({x.name} = " + (f"{x.reduce}_{'n' if x.dims == ('M',) else 'm'}({value}))" if x.reduce
                                    else f"{value})")
    return text


# --- writing a dispatch program ----------------------------------------------------------------------------

_HEADER = re.compile(r"^[ \t]*kernel\s+[A-Za-z_]\w*\s*:\s*([A-Za-z_]\w*)\s*(?:when\s+\w+\s*<=\s*[\w.]+\s*)?\{", re.M)


def kernel_block(source: str, name: str) -> str:
    """The text of kernel ``name``'s block in a program's ``source``, from ``kernel`` to its closing ``}``.

    Raises:
        UcutSyntaxError: ``source`` does not parse. KeyError: it has no kernel ``name``.
    """
    from .dsl import parse

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
    from .dsl import parse

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
    from .dsl import parse

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
