"""Bind a pipeline (``pipeline NAME { … }``) to a problem: shapes and dtypes flow, each kernel call is bound.

Binding walks the steps once per workload on ``meta`` tensors (no data, no memory): problem inputs by name, problem
axes as integers, torch steps run through the allow-list (:mod:`ucutlass.ir.torch_ops`) so torch itself says
whether their shapes flow, and a kernel call's outputs get the shape its declared dims give
(:func:`kernel_output_shapes`: leading dims folded into the first mode come back on the output). Each kernel call
then becomes a binding of its own: the kernel, its ports bound to its arguments, checked by the family's binder
(:func:`ucutlass.bind.bind`) against a problem made of its arguments' shapes on every workload (so a kernel in a
pipeline is checked exactly as a kernel bound to a problem). Every problem found is a positioned diagnostic:
``use-before-made``, ``bad-step``, ``bad-call``, ``bad-return``, ``undefined-name`` and the binders' ``bind-…``.

:meth:`PipelineBinding.callable` runs the bound pipeline with any kernel loader (the emulators of
:mod:`ucutlass.emulate`, or compiled kernels from :mod:`ucutlass.runtime`): one destination-passing
``fn(*inputs, *outputs)`` in the problem's order.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import CheckError, Diagnostic
from ..ir.pipeline import Arith, Call, Index, ListOf, Pipeline, Ref, SliceOf, Step, calls_in, value_text
from ..ir.torch_ops import TENSOR_METHODS, TORCH_FUNCTIONS
from ..problem import Axis, Problem, TensorSpec, Workload
from .flow import Flow, describe_args
from .ports import Port, dtype_name, kernel_output_shapes, kernel_ports, rebound


@dataclass
class KernelCall:
    """One kernel call of a bound pipeline: the kernel as bound to its arguments and the binding that calls it."""

    step: int
    call: Call
    kernel: Any  # as written in the file
    inputs: list[Port]
    outputs: list[Port]
    shapes: list[dict[str, Any]] = field(default_factory=list)  # per workload: {port: (shape, dtype name) | None}
    binding: Any = None

    @property
    def bound_kernel(self) -> Any:
        """The kernel to build for this call (``alignment = auto`` decided for its shapes)."""
        return getattr(self.binding, "kernel", None)


class PipelineBinding:
    """A pipeline bound to a problem: shapes and dtypes flowed on every workload, each kernel call bound.

    Attributes:
        pipeline: the :class:`ucutlass.ir.Pipeline`; ``program``: its program; ``problem``: the problem.
        calls: ``{id(call): KernelCall}`` for every kernel call, in step order (:meth:`kernel_calls`).
    """

    def __init__(self, program: Any, pipeline: Pipeline, problem: Problem):
        self.program = program
        self.pipeline = pipeline
        self.problem = problem
        self.checking = True
        self.calls: dict[int, KernelCall] = {}
        kernels = {k.name: k for k in program.kernels}
        # A kernel called in `return` itself counts as a step after the last (what check accepts, a call runs).
        values = [(i, step.value) for i, step in enumerate(pipeline.steps)]
        values += [(len(pipeline.steps), v) for v in pipeline.returns]
        for i, value in values:
            for c in _calls(value):
                if c.kind == "kernel":
                    kernel = kernels[c.target]
                    ins, outs = kernel_ports(kernel)
                    self.calls[id(c)] = KernelCall(i, c, kernel, ins, outs)

    def kernel_calls(self) -> list[KernelCall]:
        """The kernel calls in step order."""
        return list(self.calls.values())

    # --- binding --------------------------------------------------------------------------------------------

    def flow_kernel(self, kc: KernelCall, values: list[Any], flow: Flow) -> Any:
        """A kernel call on meta tensors: record its arguments, give meta outputs of the shapes its dims give."""
        import torch

        shapes: dict[str, Any] = {}
        for port, v in zip(kc.inputs, values):
            if isinstance(v, torch.Tensor):
                shapes[port.name] = (tuple(v.shape), str(v.dtype).replace("torch.", ""))
            elif isinstance(v, (int, float)) and not port.dims:
                shapes[port.name] = None
            else:
                flow.fail("bad-call", f"argument {port.name} of {kc.call.target} is {describe_args([v])}, not a tensor "
                          "or scalar", kc.call.pos)
        try:
            outs = kernel_output_shapes(kc.inputs, kc.outputs, {k: v[0] if v else None for k, v in shapes.items()},
                                        kc.kernel)
        except ValueError as e:
            flow.fail("bad-step", f"{kc.call.target}({describe_args(values)}): {e}", kc.call.pos)
        for port in kc.outputs:
            shapes[port.name] = (outs[port.name], dtype_name(port.dtype))
        kc.shapes.append(shapes)
        made = [torch.empty(outs[p.name], dtype=getattr(torch, dtype_name(p.dtype)), device="meta")
                for p in kc.outputs]
        return made[0] if len(made) == 1 else tuple(made)

    def flow(self, workload: Workload) -> list[Diagnostic]:
        """Walk the steps on meta tensors for ``workload``, recording each kernel call's arguments.

        Returns:
            The returned values that are not the problem's outputs (shape, dtype): ``bad-return`` diagnostics.

        Raises:
            CheckError: the first step that does not flow, a name used before it is made, a return of the wrong
                number of values.
        """
        import torch

        axes = self.problem.resolve_axes(workload)
        inputs = self.problem.make_inputs(workload, device="meta")
        env: dict[str, Any] = {**axes, **inputs}
        flow = Flow(self, env, None)
        for i, step in enumerate(self.pipeline.steps):
            flow.run_step(i, step)
        flow.step = len(self.pipeline.steps)
        outs = list(self.problem.outputs.values())
        if len(self.pipeline.returns) != len(outs):
            flow.fail("bad-return", f"pipeline {self.pipeline.name} returns {len(self.pipeline.returns)} value"
                      f"{'s' if len(self.pipeline.returns) != 1 else ''}; {self.problem.id} has {len(outs)} outputs, "
                      f"in order: {', '.join(o.name for o in outs)}", self.pipeline.return_pos,
                      [o.name for o in outs])
        diags = []
        for spec, v in zip(outs, self.pipeline.returns):
            value = flow.value(v)
            want = tuple(self.problem.shape(spec, axes) or ())
            pos = getattr(v, "pos", self.pipeline.return_pos)
            if not isinstance(value, torch.Tensor):
                diags.append(Diagnostic(f"{spec.name} is a tensor; {value_text(v)} is {describe_args([value])}", pos,
                                        code="bad-return"))
                continue
            if tuple(value.shape) != want:
                hint = " (a view gives it: .view(…) with the problem's axes)" \
                    if value.numel() == math.prod(want) else ""
                diags.append(Diagnostic(f"{value_text(v)} has shape {list(value.shape)}, but {self.problem.id}."
                                        f"{spec.name} is {list(want)} (workload {workload.label()}){hint}", pos,
                                        code="bad-return"))
            if str(value.dtype).replace("torch.", "") != spec.dtype:
                diags.append(Diagnostic(f"{value_text(v)} is {str(value.dtype).replace('torch.', '')}, but "
                                        f"{self.problem.id}.{spec.name} is {spec.dtype} (convert: "
                                        f".to(torch.{spec.dtype}))", pos, code="bad-return"))
        return diags

    def bind_calls(self, bind: Callable[[Any, Problem], Any]) -> None:
        """Bind each kernel call to the problem of its arguments (every workload's shapes) with ``bind`` (the
        family's binder: :func:`ucutlass.bind.bind`).

        Raises:
            CheckError: a binder's diagnostics, at the call, naming the kernel's declaration.
        """
        for kc in self.kernel_calls():
            sub = _call_problem(self.problem, kc)
            try:
                kc.binding = bind(rebound(kc.kernel), sub)
            except CheckError as e:
                raise CheckError([Diagnostic(f"{kc.call.target}({_arg_text(kc)}): {_in_call_words(d.message, kc)} "
                                             f"(line {d.pos.line} of kernel {kc.kernel.name})", kc.call.pos, d.valid,
                                             code=d.code)
                                  for d in e.diagnostics]) from None

    # --- running --------------------------------------------------------------------------------------------

    def callable(self, load: Callable[[Any], Any]) -> Callable[..., None]:
        """The pipeline as one destination-passing ``fn(*inputs, *outputs)`` in the problem's order.

        Args:
            load: ``load(kernel) -> loaded`` for each bound kernel (:attr:`KernelCall.bound_kernel`): an emulator
                (:func:`ucutlass.emulate.emulate_kernel`) or a compiled kernel; anything
                :meth:`ucutlass.bind.Binding.callable` takes.

        Returns:
            ``fn`` (``fn.on_step``: a hook called around each step, None by default); its intermediates (kernel
            outputs) are allocated once per tuple of argument shapes and reused while the shapes stay; a call with
            other shapes frees them (one set per kernel call site: a grader walking 15 workloads of L2_055 would
            otherwise keep every workload's buffers, about 100 GB, and run out of memory).
        """
        import torch

        self.checking = False
        names_in = list(self.problem.inputs)
        names_out = list(self.problem.outputs)
        runs = {id(kc): kc.binding.callable(load(kc.bound_kernel)) for kc in self.kernel_calls()}
        buffers: dict[int, tuple[tuple, list[Any]]] = {}  # id(call) -> (argument shapes and device, outputs)
        destinations = self.destinations()
        call_outputs: list[Any] = []  # the problem outputs of the call in progress

        def run_kernel(kc: KernelCall, values: list[Any]) -> Any:
            args = [v.contiguous() if isinstance(v, torch.Tensor) and not v.is_contiguous() else v for v in values]
            key = (id(kc), tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else None for a in args),
                   next(a.device for a in args if isinstance(a, torch.Tensor)))
            held = buffers.get(id(kc))
            outs = held[1] if held is not None and held[0] == key else None
            if outs is None:
                buffers.pop(id(kc), None)  # free the last shape's outputs before allocating these
                shapes = {p.name: (tuple(a.shape) if isinstance(a, torch.Tensor) else None)
                          for p, a in zip(kc.inputs, args)}
                sizes = kernel_output_shapes(kc.inputs, kc.outputs, shapes, kc.kernel)
                outs = [torch.empty(sizes[p.name], dtype=getattr(torch, dtype_name(p.dtype)), device=key[2])
                        for p in kc.outputs]
                buffers[id(kc)] = (key, outs)
            if id(kc) in destinations:  # written straight into the problem's output where it is that output
                dest = call_outputs[destinations[id(kc)]]
                if dest.is_contiguous() and dest.numel() == outs[0].numel() and dest.dtype == outs[0].dtype \
                        and dest.device == outs[0].device:
                    outs = [dest.view(outs[0].shape)]
            runs[id(kc)](*args, *outs)
            return outs[0] if len(outs) == 1 else tuple(outs)

        def fn(*args: Any) -> None:
            if len(args) != len(names_in) + len(names_out):
                raise TypeError(f"expected {len(names_in) + len(names_out)} arguments "
                                f"({', '.join(names_in + names_out)}), got {len(args)}")
            env = dict(self._axes_of(args[:len(names_in)], args[len(names_in):]))
            env.update(zip(names_in, args[:len(names_in)]))
            call_outputs[:] = args[len(names_in):]
            flow = Flow(self, env, run_kernel)
            hook = fn.on_step  # type: ignore[attr-defined]
            if hook is None:
                for i, step in enumerate(self.pipeline.steps):
                    flow.run_step(i, step)
            else:
                for i, step in enumerate(self.pipeline.steps):
                    hook(i, "start")
                    flow.run_step(i, step)
                    hook(i, "end")
            for out, v in zip(args[len(names_in):], self.pipeline.returns):
                value = flow.value(v)
                if not (value.data_ptr() == out.data_ptr() and value.shape == out.shape
                        and value.stride() == out.stride()):
                    out.copy_(value)

        fn.pipeline = self  # type: ignore[attr-defined]
        #: ``on_step(step index, "start" | "end")`` around each step of a call (a step report times them: CUDA
        #: events on the GPU, :mod:`ucutlass.search.pipeline_report`); None (the default) costs one attribute read.
        fn.on_step = None  # type: ignore[attr-defined]
        fn.buffers = buffers  # type: ignore[attr-defined]  # {id(call): ((call, argument shapes, device), outputs)}
        return fn

    def destinations(self) -> dict[int, int]:
        """``{id(kernel call): output index}`` for each returned value that is a kernel call's only output, or a
        ``.view``/``.reshape`` of it: that kernel writes into the problem's output (no copy), when the output is
        contiguous. A name made again by a later step, or returned twice, keeps the copy."""
        makers: dict[str, list[Step]] = {}
        for step in self.pipeline.steps:
            for t in step.targets:
                makers.setdefault(t, []).append(step)
        found: dict[int, int] = {}
        for index, v in enumerate(self.pipeline.returns):
            while isinstance(v, Call) and v.kind == "method" and v.target in ("view", "reshape"):
                v = v.args[0]
            if not isinstance(v, Ref) or len(makers.get(v.name, ())) != 1:
                continue
            step = makers[v.name][0]
            call = step.value
            if len(step.targets) == 1 and isinstance(call, Call) and call.kind == "kernel" \
                    and len(self.calls[id(call)].outputs) == 1:
                if id(call) in found:
                    del found[id(call)]
                else:
                    found[id(call)] = index
        return found

    def _axes_of(self, inputs: Sequence[Any], outputs: Sequence[Any] = ()) -> dict[str, int]:
        """The problem's axes read from a call's input shapes and then its output buffers' (an axis only an output
        has: L2_078's token_h, L2_015's time_after_conv); const and var axes, expr axes evaluated."""
        import torch

        given: dict[str, int] = {}
        for spec, value in [*zip(self.problem.inputs.values(), inputs), *zip(self.problem.outputs.values(), outputs)]:
            if spec.shape is None or not isinstance(value, torch.Tensor):
                continue
            for dim, size in zip(spec.shape, value.shape):
                if not str(dim).isdigit():
                    given.setdefault(str(dim), int(size))
        try:
            return self.problem.resolve_axes(given)
        except Exception:  # noqa: BLE001 - an axis no tensor has (Quant_001's batch_size): the others still resolve
            return _partial_axes(self.problem, given)

    def steps(self) -> list[dict[str, Any]]:
        """Each step as JSON for reports (``check --json``): ``{"targets", "text", "runs": [{"kind": "kernel" |
        "torch" | "view" | "value", "name", "family" and "config" for a kernel}]}``, what runs in the order it runs.
        Arithmetic on tensors is a torch step ``arithmetic`` wherever it sits (inside a call's arguments too);
        arithmetic on sizes and scalars runs on the host: a ``value`` step named ``scalar arithmetic``."""
        # Unbound (`check` with no problem): every name the pipeline reads could be a tensor; call it one.
        tensors = {n for n, spec in self.problem.inputs.items() if spec.shape is not None} if self.problem \
            else {r.name for s in self.pipeline.steps for r in _refs(s.value)}
        out = []
        for step in self.pipeline.steps:
            runs: list[dict[str, Any]] = []
            self._runs_of(step.value, tensors, runs)
            if not runs:  # an index or a name (a view), scalar arithmetic, or a plain value
                kind = "view" if isinstance(step.value, (Ref, Index)) and _is_tensor(step.value, tensors) else "value"
                runs.append({"kind": kind, "name": "scalar arithmetic" if isinstance(step.value, Arith)
                             else value_text(step.value)})
            if _is_tensor(step.value, tensors):
                tensors.update(step.targets)
            out.append({"targets": list(step.targets), "text": value_text(step.value), "runs": runs})
        return out

    def _runs_of(self, value: Any, tensors: set[str], runs: list[dict[str, Any]]) -> None:
        """Append what ``value`` runs to ``runs``, innermost first (as it is evaluated): kernels, torch steps, views,
        and tensor arithmetic (one ``arithmetic`` entry for a run of operators, e.g. ``a * b + c``)."""
        if isinstance(value, Call):
            for a in (*value.args, *(a for _, a in value.kwargs)):
                self._runs_of(a, tensors, runs)
            if value.kind == "kernel":
                kc = self.calls[id(value)]
                kernel = kc.bound_kernel or kc.kernel
                runs.append({"kind": "kernel", "name": value.target, "family": kernel.family,
                             "config": kernel.config_name()})
            else:
                op = TORCH_FUNCTIONS.get(value.target) if value.kind == "torch" else TENSOR_METHODS.get(value.target)
                runs.append({"kind": "view" if op and op.kind == "view" else "torch",
                             "name": value.target if value.kind == "torch" else f".{value.target}()"})
        elif isinstance(value, Arith):
            for side in (value.lhs, value.rhs):
                if side is not None:
                    self._runs_of(side, tensors, runs)
            if _is_tensor(value, tensors) and runs[-1:] != [{"kind": "torch", "name": "arithmetic"}]:
                runs.append({"kind": "torch", "name": "arithmetic"})
        else:  # lists, indexes and slices: what their parts run
            parts = value.items if isinstance(value, ListOf) else (value.obj, *value.items) \
                if isinstance(value, Index) else (value.start, value.stop) if isinstance(value, SliceOf) else ()
            for part in parts:
                if part is not None:
                    self._runs_of(part, tensors, runs)

    def describe(self, emulated: bool = False, width: int = 110, kernels_only: bool = False) -> list[str]:
        """One line per step: what runs (kernel, torch step, view) and, for a kernel, its bound configuration, or
        ``emulated`` (torch ops from its IR: no configuration runs). A step longer than ``width`` characters puts
        what runs on a line of its own below it. ``kernels_only``: the steps that call a kernel (numbered as
        among all)."""
        lines = []
        for i, step in enumerate(self.steps()):
            if kernels_only and not any(r["kind"] == "kernel" for r in step["runs"]):
                continue
            words = {"torch": "torch step", "view": "view", "value": "value"}
            kinds = [(f"kernel {r['name']} ({r['family']}, emulated)" if emulated else
                      f"kernel {r['name']} ({r['family']}: {r['config']})") if r["kind"] == "kernel" else
                     "scalar arithmetic (on the host)" if r == {"kind": "value", "name": "scalar arithmetic"} else
                     f"{words[r['kind']]} {r['name']}" for r in step["runs"]]
            head, runs = f"  {i + 1}. {', '.join(step['targets'])} = {step['text']}", f"[{'; '.join(kinds)}]"
            if len(head) + 4 + len(runs) <= width:
                lines.append(f"{head}    {runs}")
            else:
                lines += [head, " " * (len(str(i + 1)) + 4) + runs]
        lines.append(f"  return {', '.join(value_text(v) for v in self.pipeline.returns)}")
        return lines

    def describe_short(self, emulated: bool = False, max_lines: int = 30, full: str = "") -> list[str]:
        """:meth:`describe`, or, where that passes ``max_lines`` lines (L2_045's init program: 83 steps), its kernel
        steps and a line saying so; ``full``: the command that lists every step, for that line."""
        lines = self.describe(emulated=emulated)
        if len(lines) <= max_lines:
            return lines
        where = f"; {full} lists all {len(self.pipeline.steps)}" if full else ""
        return self.describe(emulated=emulated, kernels_only=True) + [f"  (the kernel steps only{where})"]


def _partial_axes(problem: Problem, given: dict[str, int]) -> dict[str, int]:
    """``given`` (axes read from tensor shapes) with the const axes and every expr axis that those determine: when a
    var axis appears in no tensor (Quant_001's batch_size and seq_len, only their product num_tokens is a dim), the
    exprs over the others (its ``scale_k_act = input_dim // 128``) still resolve."""
    from ..errors import ProblemError
    from ..problem_files import eval_axis_expression

    values = {n: int(ax.value) for n, ax in problem.axes.items() if ax.kind == "const" and ax.value is not None}
    values.update(given)
    pending = [ax for ax in problem.axes.values() if ax.kind == "expr" and ax.name not in values]
    for _ in range(len(pending) + 1):  # exprs may refer to each other in any order
        still = []
        for ax in pending:
            try:
                values[ax.name] = eval_axis_expression(ax.expression or "", values)
            except ProblemError:
                still.append(ax)
        pending = still
    return values


def _is_tensor(value: Any, tensors: set[str]) -> bool:
    """Whether ``value`` is a tensor: a call (every allow-listed op and every kernel returns tensors), a name in
    ``tensors`` (the problem's tensor inputs and earlier tensor steps), arithmetic or an index over one; sizes,
    axes, scalar inputs and numbers are not."""
    if isinstance(value, Call):
        return True
    if isinstance(value, Ref):
        return value.name in tensors
    if isinstance(value, Arith):
        return any(_is_tensor(side, tensors) for side in (value.lhs, value.rhs) if side is not None)
    if isinstance(value, Index):
        return _is_tensor(value.obj, tensors)
    return False


def _refs(value: Any) -> list[Ref]:
    """Every name a value tree reads (the pipeline's inputs among them)."""
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, Arith):
        return [r for side in (value.lhs, value.rhs) if side is not None for r in _refs(side)]
    parts = (*value.args, *(a for _, a in value.kwargs)) if isinstance(value, Call) else value.items \
        if isinstance(value, ListOf) else (value.obj, *value.items) if isinstance(value, Index) \
        else (value.start, value.stop) if isinstance(value, SliceOf) else ()
    return [r for part in parts if part is not None for r in _refs(part)]


def _calls(value: Any) -> list[Call]:
    return calls_in(value)


def _in_call_words(message: str, kc: KernelCall) -> str:
    """A binder's message about the problem of one call, in the call's words: ``bias <- bias`` is the argument
    ``bias (k_bias)``, and the per-dim axes of that problem (``a__0=32``) are left out of workload labels."""
    args = {p.name: value_text(a) for p, a in zip(kc.inputs, kc.call.args)}
    args.update({k: value_text(a) for k, a in kc.call.kwargs})
    for port in (*kc.inputs, *kc.outputs):
        given = args.get(port.name, "result" if port.is_output else port.binding or port.name)
        message = message.replace(f"{port.name} <- {port.name}", f"{port.name} ({given})")
        message = message.replace(f"{port.name} -> {port.name}", f"{port.name} ({given})")
    return re.sub(r",?\b\w+__\d+=\d+", "", message)


def _arg_text(kc: KernelCall) -> str:
    return ", ".join(value_text(a) for a in kc.call.args)


def _call_problem(problem: Problem, kc: KernelCall) -> Problem:
    """The problem of one kernel call: its ports as tensors (shapes over one axis per dim), on every workload."""
    axes: dict[str, Axis] = {}
    inputs: dict[str, TensorSpec] = {}
    outputs: dict[str, TensorSpec] = {}
    first = kc.shapes[0]
    for port in (*kc.inputs, *kc.outputs):
        entry = first[port.name]
        shape = None
        if entry is not None:
            shape = tuple(f"{port.name}__{j}" for j in range(len(entry[0])))
            for a in shape:
                axes[a] = Axis(a, "var")
        dtype = entry[1] if entry is not None else ("float32" if not port.is_output else dtype_name(port.dtype))
        (outputs if port.is_output else inputs)[port.name] = TensorSpec(port.name, shape, dtype)
    base_axes = {n: Axis(n, "var") for n in problem.axes}
    workloads = []
    for w, shapes in zip(problem.workloads, kc.shapes):
        values = dict(problem.resolve_axes(w))
        for name, entry in shapes.items():
            if entry is not None:
                values.update({f"{name}__{j}": s for j, s in enumerate(entry[0])})
        workloads.append(Workload(w.uuid, w.index, values, {}, w.tolerance))
    return dataclasses.replace(problem, id=f"{problem.id}:{kc.call.target}", axes={**base_axes, **axes},
                               inputs=inputs, outputs=outputs, workloads=tuple(workloads), custom_inputs_entrypoint=None)


def bind_pipeline(program: Any, problem: Problem, name: str | None,
                  bind: Callable[[Any, Problem], Any]) -> PipelineBinding:
    """Bind ``program``'s pipeline (``name``, or its only one) to ``problem``: shapes and dtypes flow on every
    workload (meta tensors) and every kernel call is bound by its family's binder.

    Args:
        program: a :class:`ucutlass.ir.Program` with a pipeline; its kernels' open choices may still be open
            (binding checks what flows; building needs them picked).
        problem: the :class:`ucutlass.problem.Problem`.
        name: the pipeline's name, or None for the program's only one.
        bind: the binder of one kernel (:func:`ucutlass.bind.bind`, which goes through the family table).

    Returns:
        The :class:`PipelineBinding` (``callable(load)`` runs it).

    Raises:
        CheckError: positioned diagnostics (``use-before-made``, ``undefined-name``, ``bad-step``, ``bad-call``,
            ``bad-return``, ``bind-…``).
        KeyError: no such pipeline.
    """
    pipeline = program.pipeline(name)
    if pipeline is None:
        raise KeyError(f"{program.file} has no pipeline")
    pb = PipelineBinding(program, pipeline, problem)
    returns: list[Diagnostic] = []
    for w in problem.workloads:
        returns = returns or pb.flow(w)  # the first workload whose returns disagree says how
    try:
        pb.bind_calls(bind)
    except CheckError as e:
        raise CheckError([*e.diagnostics, *returns]) from None
    if returns:
        raise CheckError(returns)
    return pb
