"""Lowering and checks of a dispatch: a program whose kernels carry ``when MODE <= NUMBER``.

Each call runs the first kernel, in file order, whose condition holds for the call's GEMM modes
(:func:`ucutlass.runtime.pick`); the last kernel has no ``when``, and every ``when`` names the same mode. The kernels
are gemms that bind the same tensors, compute the same epilogue and have one target: they differ only in settings.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import did_you_mean
from ..ir import Choice, EpilogueOutput, GemmKernel, Operand, Pos, expr_to_text

if TYPE_CHECKING:  # pragma: no cover
    from .ast import KernelNode
    from .lowering import Lowering

#: The modes a ``when`` may name: the GEMM extents of a call.
#: The families a dispatch may hold (it picks one GEMM per call by its M, N or K).
DISPATCH_FAMILIES = ("gemm",)
MODES = ("M", "N", "K")


def lower_dispatch(low: "Lowering", asts: Sequence["KernelNode"], kernels: Sequence[GemmKernel | None]
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
        if k.family not in DISPATCH_FAMILIES:
            low.error("bad-when", f"only gemm kernels take when; kernel {k.name} is {_a(k.family)} (a dispatch "
                      "chooses among gemm kernels)", w.pos)
            ok = False
        if w.mode not in MODES:

            hint = f"; did you mean {w.mode.upper()!r}?" if w.mode.upper() in MODES else did_you_mean(w.mode, MODES)
            low.error("bad-when", f"when {w.mode} <= {w.bound}: {w.mode!r} is not a GEMM mode{hint}", w.mode_pos,
                      MODES)
            ok = False
        if not (w.bound.isdigit() and int(w.bound) > 0):
            low.error("bad-when", f"when {w.mode} <= {w.bound}: the bound is a whole number ≥ 1 (the largest "
                      f"{w.mode} this kernel serves)", w.bound_pos, ("64", "1024"))
            ok = False
        whens.append((w.mode, int(w.bound)) if ok else None)
    # else bad-when said all there is to say
    if not any(k.when is not None and k.family not in DISPATCH_FAMILIES for k in asts):
        _check_order(low, asts, whens)
        _check_shared(low, asts, kernels)
    out = list(kernels)
    for i, (k, when) in enumerate(zip(asts, whens)):
        if out[i] is not None and when is not None:
            out[i] = dataclasses.replace(out[i], when=when,  # type: ignore[arg-type]
                                         setting_pos={**out[i].setting_pos, "when": k.when.pos})
    return out


def _check_order(low: "Lowering", asts: Sequence["KernelNode"], whens: Sequence[tuple[str, int] | None]) -> None:
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
    widest: dict[str, tuple[int, "KernelNode"]] = {}  # mode -> the largest earlier bound and its kernel
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


def _check_shared(low: "Lowering", asts: Sequence["KernelNode"], kernels: Sequence[GemmKernel | None]) -> None:
    """Every kernel of a dispatch is a gemm binding the same tensors with the same declarations and computing the
    same epilogue as the first one; only settings differ."""
    first: tuple[GemmKernel, dict[str, tuple[Any, str, Pos]]] | None = None
    for k, kernel in zip(asts, kernels):
        if k.family not in DISPATCH_FAMILIES:
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
