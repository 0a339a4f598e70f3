"""Per-shape dispatch at run time: which kernel of a dispatch serves a call, and one callable over them all.

A `.ucut` program whose kernels carry ``when`` is a *dispatch* (the language side, lowering and checking ``when``,
is :mod:`ucutlass.lang.dispatch`): each call runs the first kernel, in file order, whose condition holds for the call's
GEMM modes (:func:`pick`); the last kernel has no ``when``. :func:`dispatch_callable` makes the grader's one
destination-passing callable of the kernels' bound callables; :func:`describe` says how a dispatch splits a mode
(``ucutlass check`` and ``grade`` print it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from ..ir import GemmKernel


def pick(kernels_when: Sequence[tuple[str, int] | None], modes: Mapping[str, int]) -> int:
    """Index of the kernel that serves a call: the first whose ``when`` holds (``modes[mode] <= bound``) or has none.

    Args:
        kernels_when: each kernel's :attr:`~ucutlass.ir.GemmKernel.when`, in dispatch order, e.g.
            ``[("M", 64), ("M", 1024), None]``.
        modes: the call's GEMM modes, ``{"M": 300, "N": 4096, "K": 4096}`` (other keys are ignored).

    Raises:
        ValueError: no condition holds and every kernel has one (a lowered dispatch always ends with a fallback).
        KeyError: a ``when`` names a mode that ``modes`` lacks.
    """
    for i, when in enumerate(kernels_when):
        if when is None or modes[when[0]] <= when[1]:
            return i
    raise ValueError(f"no kernel serves {dict(modes)}: every kernel has a when and none holds (the last kernel of a "
                     "dispatch has no when)")


def dispatch_callable(runs: Sequence[Callable[..., None]], whens: Sequence[tuple[str, int] | None],
                      modes_of: Callable[..., Mapping[str, int]]) -> Callable[..., None]:
    """One destination-passing callable ``fn(*inputs, *outputs)`` over the kernels of a dispatch.

    Each call runs ``runs[pick(whens, modes_of(*args))](*args)``. The choice is cached per tuple of the
    arguments' shapes (``None`` for an argument without one, a scalar), since the modes follow from the shapes:
    a repeated shape costs one dict lookup on the host path (a small GEMM runs in microseconds).

    Args:
        runs: one destination-passing callable per kernel, in dispatch order (:meth:`ucutlass.bind.Binding.callable`).
        whens: each kernel's ``when``, in the same order; the last is None (the fallback).
        modes_of: the GEMM modes ``{"M", "N", "K"}`` of a call's arguments (``run.modes`` of a bound kernel).

    Returns:
        ``fn``, with ``fn.runs`` and ``fn.whens`` as given and ``fn.choose(*args)``: the index of the kernel a call
        with these arguments runs.

    Raises:
        ValueError: ``runs`` and ``whens`` differ in length or are empty.
    """
    runs, whens = tuple(runs), tuple(whens)
    if not runs or len(runs) != len(whens):
        raise ValueError(f"a dispatch needs one when per kernel: {len(runs)} runs, {len(whens)} whens")
    chosen: dict[tuple, Callable[..., None]] = {}

    def choose(*args: Any) -> int:
        return pick(whens, modes_of(*args))

    def fn(*args: Any) -> None:
        key = tuple(getattr(a, "shape", None) for a in args)
        run = chosen.get(key)
        if run is None:
            run = runs[choose(*args)]
            if len(chosen) > 256:  # shapes without end (a sweep): keep the table small
                chosen.clear()
            chosen[key] = run
        run(*args)

    fn.__name__ = "dispatch_" + "_".join(getattr(r, "__name__", "run") for r in runs)
    fn.runs, fn.whens, fn.choose = runs, whens, choose  # type: ignore[attr-defined]
    return fn


def describe(kernels: Sequence[GemmKernel], extents: Sequence[Mapping[str, int]] | None = None) -> str:
    """``dispatch on M: decode (M ≤ 64), mid (M ≤ 1024), large``; with ``extents`` (one per workload) each kernel
    also says how many workloads it serves."""
    whens = [k.when for k in kernels]
    mode = next(w[0] for w in whens if w)  # a lowered dispatch splits one mode
    served = Counter(pick(whens, e) for e in extents) if extents is not None else None
    parts = []
    for i, k in enumerate(kernels):
        notes = [f"{k.when[0]} ≤ {k.when[1]}"] if k.when else []
        if served is not None:
            notes.append(f"{served[i]} workload{'' if served[i] == 1 else 's'}")
        parts.append(f"{k.name} ({'; '.join(notes)})" if notes else k.name)
    return f"dispatch on {mode}: {', '.join(parts)}"
