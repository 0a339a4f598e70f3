"""Capture a problem's reference ``run()`` as an aten graph (issue 17, item 1).

The reference runs once under ``make_fx`` (``torch.fx.experimental.proxy_tensor``) on *fake* tensors
(``FakeTensorMode``): no memory is allocated and no value is computed, so a problem of any size is captured on a
small CPU. Every shape in a graph is concrete at its workload; captures at other workloads
(:func:`other_workloads`) tell which integers follow which axis. A reference that reads values on the host is
captured again: a per-expert loop (``nonzero``, :func:`_loop_mode`), pieces cut by numbers an integer input holds
(``.item()``, :mod:`.segment_loops`), rows a boolean mask keeps (:mod:`.masked`).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import UcutError
from .masked import MaskRefused, masked_mode
from .segment_loops import SegmentMode, SegmentRefused, integer_inputs


#: The value a float scalar input without a workload value traces as (then written by its name, not a number).
SENTINEL = 0.0123456789

#: Rows each data-dependent ``nonzero`` returns in a loop capture (:func:`_loop_mode`): a per-expert loop is traced
#: once per expert with this many rows, and :mod:`.experts` vectorizes it. Prime and small, so that it is no axis.
LOOP_ROWS = 7


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


def _loop_mode():
    """A TorchDispatchMode that lets a per-expert loop trace on fake tensors, every expert's body once with
    :data:`LOOP_ROWS` rows:

    * ``nonzero`` (``torch.where(mask)``) becomes ``nonzero_static(…, size=LOOP_ROWS)``; a boolean mask index
      (``x[mask]``, ``y[mask] = v``) becomes an index by those rows (``if rows.numel() == 0:`` reads a static size);
    * ``if (ids == e).any():`` (a comparison of an integer tensor with a number, reduced by ``any``) reads True:
      whether an expert has rows only skips an empty body, which the grouped form does with a group of 0 rows.

    What the graph means is then only what :mod:`.experts` can prove from it (each expert's rows come from a
    one-hot routing mask or ``ids == e``). Any other value read on the host (``if x.sum() > 0:``, ``.item()``) still
    fails the capture: answering it would pick a branch for the data."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    aten = torch.ops.aten

    def rows(mask):
        return list(aten.nonzero_static.default(mask, size=LOOP_ROWS).unbind(1))

    def bool_indices(indices):
        if not any(i is not None and i.dtype == torch.bool for i in indices):
            return None
        out = []
        for i in indices:
            out += rows(i) if i is not None and i.dtype == torch.bool else [i]
        return out

    class LoopMode(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.masks = WeakIdKeyDictionary()  # ids == e (by identity: a tensor's == is elementwise)
            self.answered = 0  # how many (ids == e).any() read True: capture checks they are a loop's

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.nonzero.default:
                return aten.nonzero_static.default(args[0], size=LOOP_ROWS)
            if func is aten.index.Tensor and bool_indices(args[1]) is not None:
                return aten.index.Tensor(args[0], bool_indices(args[1]))
            if func in (aten.index_put.default, aten.index_put_.default) and bool_indices(args[1]) is not None:
                return func(args[0], bool_indices(args[1]), *args[2:], **kwargs)
            if func is aten.any.default and args[0] in self.masks:  # a plain True: `if` reads it on the host
                self.answered += 1
                with torch._subclasses.fake_tensor.unset_fake_temporarily():
                    return torch.tensor(True)
            out = func(*args, **kwargs)
            if func is aten.eq.Scalar and not args[0].dtype.is_floating_point and isinstance(args[1], int):
                self.masks[out] = True
            return out

    return LoopMode()


def _mutates(node) -> bool:
    """Whether a graph node writes into a tensor (an in-place aten op: ``fill_``, ``index_copy_``, ``copy_``)."""
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def other_workloads(problem, first, count: int = 2) -> list:
    """Up to ``count`` more workloads to capture besides ``first``: each the one whose var axes take the most values
    not seen yet (so every integer of the graph that follows an axis changes between captures)."""
    var = [n for n, a in problem.axes.items() if a.kind == "var"]
    seen = {n: {problem.resolve_axes(first).get(n)} for n in var}
    out = []
    for _ in range(count):
        best, best_score = None, 0
        for w in problem.workloads:
            if w.uuid == first.uuid or w in out:
                continue
            axes = problem.resolve_axes(w)
            score = sum(1 for n in var if axes.get(n) not in seen[n])
            if score > best_score:
                best, best_score = w, score
        if best is None:
            break
        out.append(best)
        for n in var:
            seen[n].add(problem.resolve_axes(best).get(n))
    return out


def smallest_workload(problem):
    """The workload with the fewest input elements (the one ``init`` grades on)."""
    import math

    def size(w):
        return sum(math.prod(s) for s in problem.input_shapes(w).values() if s is not None)

    return min(problem.workloads, key=size)


def capture(problem, workload=None) -> Capture:
    """``make_fx`` of the problem's ``run`` on fake tensors at ``workload`` (default: the smallest).

    Raises:
        InitError: the reference does not load, or does not trace (data-dependent control flow, an op fake
            tensors cannot run): the message names the exception and says so.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..problem import torch_dtype

    workload = workload if workload is not None else smallest_workload(problem)
    axes = problem.resolve_axes(workload)
    try:
        module = problem.reference_module()
    except UcutError as e:
        raise InitError(f"{problem.id}: the reference does not load: {e}") from None
    given = {**_entry_point_flags(problem, module, workload, axes), **workload.scalar_inputs()}
    names, scalars = [], {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = []
    for name, spec in problem.inputs.items():
        shape = problem.shape(spec, axes)
        if shape is None:
            value = given.get(name)
            if value is None:  # made by a custom entry point: a float traces as a sentinel the emitter names
                value = SENTINEL * (len(scalars) + 1) if "float" in spec.dtype else 1
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

    modes: list = []

    def trace(loop: bool, masked: bool = False, segments: dict | None = None):
        def run(*tensors):
            if not loop and not masked and segments is None:
                return fn(*tensors)
            if segments is not None:  # the integer inputs' fakes are this trace's: paired with their values here
                modes.append(SegmentMode({n: (tensors[names.index(n)], v) for n, v in segments.items()},
                                         f"<{problem.id} reference>"))
                with modes[-1].mode():
                    return fn(*tensors)
            modes.append(_loop_mode() if loop else masked_mode())
            with modes[-1]:
                return fn(*tensors)

        with torch.no_grad(), fx_traceback.preserve_node_meta(), _LineMode(f"<{problem.id} reference>"):
            gm = make_fx(run, tracing_mode="fake")(*fakes)
            if any(_mutates(n) for n in gm.graph.nodes):  # `x[:, -1] = 0`, `y[b].index_copy_(…)`: out of place
                from torch.func import functionalize

                gm = make_fx(functionalize(run, remove="mutations"), tracing_mode="fake")(*fakes)
        return gm

    try:
        try:
            gm = trace(loop=False)
        except Exception as e:  # noqa: BLE001 - a data-dependent loop: traced again with static rows per expert
            if not _data_dependent(e):
                raise
            # `.item()` of an integer input's rows sizing pieces of a tensor: the loop as one gather
            gm = _segments(trace, modes, problem, workload, names) if "_local_scalar_dense" in str(e) else None
            if gm is None:
                try:
                    gm = trace(loop=True)
                except Exception:  # noqa: BLE001 - the first failure is the one to report
                    try:  # rows of a boolean mask (a capacity-limited MoE): every row kept, the mask carried along
                        gm = trace(loop=False, masked=True)
                    except MaskRefused:
                        raise
                    except Exception:  # noqa: BLE001
                        raise e from None
                    if not modes[-1].used:
                        raise e from None
            # each True read of (ids == e).any() must guard that expert's rows (its ids == e is read by a nonzero):
            # one outside such a loop (`if (ids == pad).any(): …`) picked a branch for the data
            if getattr(modes[-1], "answered", 0) and any(
                    n.target is torch.ops.aten.eq.Scalar and not any(
                        getattr(u.target, "overloadpacket", None) is torch.ops.aten.nonzero_static for u in n.users)
                    for n in gm.graph.nodes if n.op == "call_function"):
                raise e from None
        gm = _folded(gm, fakes)
    except Exception as e:  # the reference is data; any failure is a message, never a traceback
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if "_local_scalar_dense" in text:  # what the user wrote, not aten's name for it
            text = "a tensor's value read as a Python number (.item(), int(t), a shape or a loop from it)"
        why = ("data-dependent control flow or shapes (the reference reads tensor values)" if _data_dependent(e)
               else "data-dependent shapes (rows of a boolean mask) init cannot write with static ones"
               if isinstance(e, MaskRefused) else "the reference does not trace on fake tensors")
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == f"<{problem.id} reference>"]
        where = f" at reference line {lines[-1]}" if lines else ""
        raise InitError(f"{problem.id}: cannot capture run(){where}: {why}: {text[:300]}") from None
    return Capture(gm, tuple(names), workload, axes, scalars)


def _segments(trace, modes, problem, workload, names):
    """The capture with :class:`~.segment_loops.SegmentMode` answering ``.item()`` of the integer inputs with
    their values at ``workload`` (made on the CPU), dead ops removed; None where that does not apply or is
    refused (the caller goes on and reports the first failure)."""
    values = integer_inputs(problem, workload, names)
    if not values:
        return None
    try:
        gm = trace(loop=False, segments=values)
        modes[-1].check()  # out of the capture: the gather on the real values against the reference's order
    except SegmentRefused:
        return None
    except Exception as e:  # noqa: BLE001 - the reference read a value the mode does not answer
        if _data_dependent(e):
            return None
        raise
    gm.graph.eliminate_dead_code()  # the unrolled loop's slices and views: the gather replaced them
    gm.recompile()
    return gm


def _folded(gm, fakes):
    """``gm`` with its loops over a leading axis batched (:func:`~.batch_loops.fold_batch_loops`); ``gm`` as it
    was where the fold fails (the translator then says the graph changes with the workload)."""
    from .batch_loops import fold_batch_loops

    try:
        return fold_batch_loops(gm, fakes)
    except Exception:  # noqa: BLE001 - an op vmap has no batching rule for: the unrolled loop stays
        return gm


def _entry_point_flags(problem, module, workload, axes) -> dict:
    """The bool scalar inputs a custom entry point makes (L1_075's ``is_causal = False``), called on the meta
    device (no memory): a reference that branches on one is captured on the branch the problem's inputs take
    (a traced 1 took the other). Other scalars keep their trace values (a float is named by its sentinel); an entry
    point that does not run on meta gives nothing."""
    import torch

    fn = getattr(module, problem.custom_inputs_entrypoint or "", None)
    flags = [n for n, spec in problem.inputs.items() if problem.shape(spec, axes) is None and spec.dtype == "bool"]
    if not callable(fn) or not flags:
        return {}
    try:
        made = fn({**axes, **workload.scalar_inputs()}, torch.device("meta"))
    except Exception:  # noqa: BLE001 - the entry point is the problem's code; it may not run on meta
        return {}
    return {n: made[n] for n in flags if isinstance(made, dict) and isinstance(made.get(n), bool)}


def _data_dependent(e: Exception) -> bool:
    """Whether a capture failed on a value the reference reads (a shape from ``nonzero``, an ``.item()``)."""
    text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return any(w in text for w in ("data-dependent", "DataDependent", "DynamicOutputShape", "item()", "nonzero",
                                   "Unbacked", "GuardOnDataDependent", "dynamic"))
