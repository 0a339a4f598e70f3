"""Capture a problem's reference ``run()`` as an aten graph (issue 17, item 1).

The reference runs once under ``make_fx`` (``torch.fx.experimental.proxy_tensor``) on *fake* tensors
(``FakeTensorMode``): no memory is allocated and no value is computed, so a problem of any size is captured on a
small CPU. The workload used is the one whose var axes are most distinct from each other and from the const axes
(so a number in the graph names one axis); every shape in the graph is concrete at that workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import UcutError


class InitError(UcutError):
    """``ucutlass init`` cannot write or check a program; the message names the part and why."""


@dataclass
class Capture:
    """One reference captured as an aten graph.

    Attributes:
        graph: the ``torch.fx.GraphModule`` made by ``make_fx`` (placeholders in the problem's input order).
        inputs: the problem's input names, in order (the graph's placeholders).
        workload: the workload whose shapes the graph holds.
        axes: that workload's resolved axes (name → int).
        scalars: the scalar inputs given as Python values (baked into the graph as constants).
    """

    graph: Any
    inputs: tuple[str, ...]
    workload: Any
    axes: Mapping[str, int]
    scalars: Mapping[str, Any]


def _line_mode(filename: str):
    """A TorchFunctionMode that tags each node made under a torch call with the reference's line
    (``node.meta["custom"]["ref_line"]``, through ``torch.fx.traceback.annotate``)."""
    import sys

    from torch.fx import traceback as fx_traceback
    from torch.overrides import TorchFunctionMode

    class LineMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename != filename:
                frame = frame.f_back
            if frame is None:
                return func(*args, **(kwargs or {}))
            with fx_traceback.annotate({"ref_line": frame.f_lineno}):
                return func(*args, **(kwargs or {}))

    return LineMode()


def _LineMode(filename: str):  # noqa: N802 - reads as the mode it makes
    return _line_mode(filename)


def pick_workload(problem):
    """The workload to capture at: var axes distinct from one another and from the const axes, not 1, then
    the smallest (by the sum of its var axes)."""
    consts = {a.value for a in problem.axes.values() if a.value is not None}

    def score(w):
        axes = problem.resolve_axes(w)
        var = [axes[n] for n, a in problem.axes.items() if a.kind == "var" and n in axes]
        clashes = len(var) - len(set(var)) + sum(1 for v in var if v in consts or v <= 1)
        return (clashes, sum(var))

    return min(problem.workloads, key=score)


def smallest_workload(problem):
    """The workload with the fewest input elements (the one ``init`` grades on)."""
    import math

    def size(w):
        return sum(math.prod(s) for s in problem.input_shapes(w).values() if s is not None)

    return min(problem.workloads, key=size)


def capture(problem, workload=None) -> Capture:
    """``make_fx`` of the problem's ``run`` on fake tensors at ``workload`` (default :func:`pick_workload`).

    Raises:
        InitError: the reference does not load, or does not trace (data-dependent control flow, an op fake
            tensors cannot run): the message names the exception and says so.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..problem import torch_dtype

    workload = workload if workload is not None else pick_workload(problem)
    axes = problem.resolve_axes(workload)
    try:
        module = problem.reference_module()
    except UcutError as e:
        raise InitError(f"{problem.id}: the reference does not load: {e}") from None
    given = workload.scalar_inputs()
    names, scalars = [], {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = []
    for name, spec in problem.inputs.items():
        shape = problem.shape(spec, axes)
        if shape is None:
            value = given.get(name)
            if value is None:
                value = 1e-6 if "float" in spec.dtype else 1
            scalars[name] = value
            continue
        names.append(name)
        with mode:
            fakes.append(torch.empty(shape, dtype=torch_dtype(spec.dtype)))

    order = list(problem.inputs)

    def fn(*tensors):
        it = iter(tensors)
        args = [scalars[n] if n in scalars else next(it) for n in order]
        return module.run(*args)

    try:
        with torch.no_grad(), fx_traceback.preserve_node_meta(), _LineMode(f"<{problem.id} reference>"):
            gm = make_fx(fn, tracing_mode="fake")(*fakes)
    except Exception as e:  # the reference is data; any failure is a message, never a traceback
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        data = any(w in text for w in ("data-dependent", "DataDependent", "item()", "nonzero", "Unbacked",
                                       "GuardOnDataDependent", "dynamic"))
        why = ("data-dependent control flow or shapes (the reference reads tensor values)" if data
               else "the reference does not trace on fake tensors")
        raise InitError(f"{problem.id}: cannot capture run(): {why}: {text[:300]}") from None
    return Capture(gm, tuple(names), workload, axes, scalars)
