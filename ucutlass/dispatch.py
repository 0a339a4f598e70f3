"""Per-shape dispatch: several kernels, one per range of M (or N, K), graded and called as one solution.

One CUTLASS configuration is not the fastest from M = 1 to M = 16384 (cuBLAS, too, picks a kernel per shape).
A `.ucut` program whose kernels carry ``when`` is a *dispatch*::

    kernel decode : gemm when M <= 64   { … }   # the calls with M ≤ 64
    kernel mid    : gemm when M <= 1024 { … }   # the other calls with M ≤ 1024
    kernel large  : gemm { … }                  # the fallback: every other call

Each call runs the first kernel, in file order, whose condition holds for the call's GEMM modes
(:func:`pick`); the last kernel has no ``when``, and every ``when`` names the same mode. The kernels are gemms
that bind the same tensors, compute the same epilogue and have one target: they differ only in settings (tile,
cluster, schedule, stages, scheduler, split_k, …).

This module lowers and checks ``when`` (:func:`lower_dispatch`, called by :mod:`ucutlass.dsl`), chooses the
kernel of a call (:func:`pick`, :func:`dispatch_callable`), writes a dispatch program from tuned kernels
(:func:`render_dispatch`, :func:`pin_swap_ab`) and describes one for the grader (:func:`dispatch_solution`) and ``check``
(:func:`describe`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .ir import GemmKernel

if TYPE_CHECKING:  # pragma: no cover
    from .grader import SolutionRef

#: The grader loader of compiled `.ucut` solutions (a single kernel or a dispatch).
LOADER = "ucutlass.runtime:load_solution"


# --- choosing the kernel of a call ------------------------------------------------------------------------

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


# --- reports and recipes -----------------------------------------------------------------------------------

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


def dispatch_solution(so_paths: Mapping[str, str | Path], source: str, file: str, name: str) -> "SolutionRef":
    """A grader recipe for a compiled dispatch: every kernel's shared object, graded as one solution.

    Args:
        so_paths: ``{kernel name: path of its .so}`` for every kernel of :meth:`~ucutlass.ir.Program.dispatch`,
            each built from the kernel as bound to the problem (:attr:`ucutlass.bind.Binding.kernel`).
        source: the concrete `.ucut` text of the dispatch program; ``file``: its name in messages.
        name: the solution's name in records and tables.

    Returns:
        A :class:`ucutlass.grader.SolutionRef` with loader ``ucutlass.runtime:load_solution`` and payload
        ``{"so_paths": {name: path, …}, "source": …, "file": …}`` (destination passing).
    """
    from .grader import SolutionRef

    return SolutionRef(name=name, loader=LOADER, destination_passing=True,
                       payload={"so_paths": {k: str(p) for k, p in so_paths.items()}, "source": source, "file": file})


# --- writing a dispatch program ----------------------------------------------------------------------------
