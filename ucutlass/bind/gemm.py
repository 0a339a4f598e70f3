"""The GEMM family's binding: a kernel's operands ↔ a problem's inputs and outputs (``<-`` / ``->`` in `.ucut`).

A binding checks, before anything is compiled, that every operand names a tensor of the problem with
the same dtype, that every problem input and output is used, and that the GEMM modes (M, N, K) come out
the same from every operand on every workload. Leading dimensions of a bound tensor fold into the
first declared mode (``a : bf16[M, K] row <- hidden_states`` with hidden_states ``[batch, seq, hidden]``
gives M = batch·seq, K = hidden). Batch dims declared on a, b and d (``a : bf16[B, H, M, K]``) are taken
as they are: the tensor has exactly those dims (b may have none: one weight for every batch). A slice
(``a : bf16[B, M, K] row <- hidden_states[:, -keep:]``) binds a view of the tensor (:func:`slice_view`; the call
applies it, no copy), ``keep`` being an axis of the problem. A kernel with ``alignment = auto`` is bound with the
largest alignment every workload allows (:func:`auto_alignment`), and one with ``swap_ab = auto`` swaps AB when
every workload's M is small (:func:`auto_swap_ab`): :attr:`Binding.kernel` is what to build. A grouped GEMM binds
through :func:`bind_operands` too (:mod:`.grouped`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

# front names this module uses (one place to repoint)
from ..arch import largest_alignment
from ..arch import resolve_swap_ab as arch_swaps_ab
from ..errors import CheckError, Diagnostic, closest
from ..errors import did_you_mean as _did_you_mean
from ..ir import Choice, DType, EpilogueInputKind, GemmKernel, Layout, Pos, split_dim
from ..problem import Problem, Workload
from .slice import slice_index, slice_problem, slice_view


@dataclass(frozen=True)
class Slot:
    """One bound argument: a kernel operand or epilogue input, and the problem tensor behind it."""

    arg: str  # kernel-side name (a, b, c, d, or an epilogue input)
    tensor: str  # problem input/output name
    dims: tuple[str, ...]  # declared modes, e.g. ("M", "K"); () for a scalar
    layout: Layout
    is_output: bool
    pos: Pos
    slice: tuple[str, ...] = ()  # a view of the tensor: ":", "NAME:", "-NAME:" per leading dim (ir.Operand.slice)


@dataclass(frozen=True)
class Binding:
    """A kernel bound to a problem: which problem tensor feeds which argument."""

    kernel: GemmKernel
    problem: Problem
    slots: tuple[Slot, ...]

    def extents(self, workload: Workload | Mapping[str, int]) -> dict[str, int]:
        """GEMM extents ``{"M", "N", "K"}`` of a workload (leading dims folded into the first mode).

        Raises:
            CheckError: operands disagree on a mode's extent for this workload.
        """
        axes = self.problem.resolve_axes(workload)
        found: dict[str, tuple[int, str]] = {}
        diags = []
        for slot in self.slots:
            if not slot.dims:
                continue
            spec = self.problem.inputs.get(slot.tensor) or self.problem.outputs[slot.tensor]
            shape = self.problem.shape(spec, axes) or ()
            if slot.slice:
                n_batch = len(next((op.batch for op in self.kernel.operands if op.name == slot.arg), ()))
                try:
                    _, view, _ = slice_view(slot.slice, shape, axes)
                    why = slice_problem(slot, shape, n_batch)
                except ValueError as e:
                    why = str(e)
                if why:
                    diags.append(Diagnostic(f"{_bound(slot)}[{', '.join(slot.slice)}]: {why} (shape "
                                            f"{list(shape)}, workload {_label(workload)})", slot.pos,
                                            code="bind-slice"))
                    continue
                shape = view
            sizes = _fold(shape, slot.dims, slot.layout)
            if sizes is None:
                diags.append(Diagnostic(
                    f"{_bound(slot)}: shape {list(shape)} cannot be read as [{', '.join(slot.dims)}] "
                    f"{slot.layout.value} ({_why_not_folded(shape, slot.dims, slot.layout)})", slot.pos,
                    code="bind-shape"))
                continue
            clashes = [f"{dim} = {size}, but {found[dim][1]} gives {dim} = {found[dim][0]}"
                       for dim, size in zip(slot.dims, sizes) if dim in found and found[dim][0] != size]
            if clashes:
                swapped = tuple(reversed(slot.dims))
                other = _fold(shape, swapped, slot.layout) if len(swapped) == 2 else None
                hint = ""
                if other is not None and all(found.get(d, (v,))[0] == v for d, v in zip(swapped, other)):
                    hint = f"; declared as [{', '.join(swapped)}] it would agree"
                diags.append(Diagnostic(
                    f"{_bound(slot)} has shape {list(shape)}: read as [{', '.join(slot.dims)}] "
                    f"{slot.layout.value} that makes {'; '.join(clashes)}{hint} (workload {_label(workload)})",
                    slot.pos, code="bind-extent"))
                continue  # its extents are suspect: later operands are compared with the others only
            for dim, size in zip(slot.dims, sizes):
                found.setdefault(dim, (size, _bound(slot)))
        if diags:
            raise CheckError(diags)
        return {d: v for d, (v, _) in found.items()}

    def callable(self, compiled: Any) -> Callable[..., None]:
        """A destination-passing ``fn(*inputs, *outputs)`` in the problem's definition order.

        ``fn.kernel`` is ``compiled``; ``fn.modes(*inputs, *outputs)`` gives a call's GEMM modes ``{"M", "N", "K"}``
        through ``compiled.modes`` (the launch's own plan, checking the arguments; see
        :meth:`ucutlass.runtime.CompiledKernel.modes`), which a dispatch picks its kernel with.
        """
        names = list(self.problem.inputs) + list(self.problem.outputs)
        tensor_of = {s.arg: s.tensor for s in self.slots}
        abi = compiled.abi
        # Positions, in the problem's argument list, of the kernel's ABI arguments (pointers, scalars).
        order = [names.index(tensor_of[arg]) for arg in abi.ptr_names + abi.scalar_names]
        slices = {s.arg: s.slice for s in self.slots if s.slice}
        views = [(j, slices[arg]) for j, arg in enumerate(abi.ptr_names) if arg in slices]
        sources = self._axis_sources() if views else {}

        def values_of(args: Sequence[Any]) -> list[Any]:
            """The kernel's ABI arguments of a call's arguments."""
            if len(args) != len(names):
                raise TypeError(f"expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
            values = [args[i] for i in order]
            if views:  # sliced inputs: views (no copy), the axes read from the arguments' shapes
                axes = {a: v if isinstance(v, int) else int(args[v[0]].shape[v[1]]) for a, v in sources.items()}
                for j, entries in views:
                    values[j] = values[j][slice_index(entries, values[j].shape, axes)]
            return values

        def run(*args: Any) -> None:
            compiled.call(values_of(args))

        run.__name__ = f"{self.kernel.name}_on_{self.problem.id}"
        run.kernel = compiled  # type: ignore[attr-defined]
        run.modes = lambda *args: compiled.modes(values_of(args))  # type: ignore[attr-defined]
        return run

    def _axis_sources(self) -> dict[str, int | tuple[int, int]]:
        """Where a call finds each axis a slice names: its value (a const axis), or (argument, dim) of a problem
        tensor with that axis in its shape (definition order: inputs, then outputs)."""
        names = list(self.problem.inputs) + list(self.problem.outputs)
        specs = [self.problem.inputs.get(n) or self.problem.outputs[n] for n in names]
        found: dict[str, int | tuple[int, int]] = {}
        for axis in {e[:-1].lstrip("-") for s in self.slots for e in s.slice if e != ":"}:
            ax = self.problem.axes.get(axis)
            if ax is not None and ax.kind == "const":
                found[axis] = int(ax.value)  # type: ignore[arg-type]
                continue
            for i, spec in enumerate(specs):
                if spec.shape is not None and axis in spec.shape:
                    found[axis] = (i, list(spec.shape).index(axis))
                    break
        return found


def _ucut_dtype(torch_name: str) -> str | None:
    """The `.ucut` spelling of a torch dtype name (``bfloat16`` -> ``bf16``), or None when there is none."""
    return next((d.value for d in DType if d.torch_name == torch_name), None)


def _label(workload: Workload | Mapping[str, int]) -> str:
    return workload.label() if isinstance(workload, Workload) else ",".join(f"{k}={v}" for k, v in workload.items())


def _bound(slot: Slot) -> str:
    """``a <- x`` for an input, ``d -> out`` for an output, as the program writes it."""
    return f"{slot.arg} {'->' if slot.is_output else '<-'} {slot.tensor}"


def _why_not_folded(shape: Sequence[int], dims: Sequence[str], layout: Layout) -> str:
    """Why :func:`_fold` cannot read a tensor of ``shape`` as ``dims``: its rank, or a layout that cannot fold."""
    if len(shape) < len(dims):
        return f"the tensor has {len(shape)} dims, fewer than the {len(dims)} declared"
    if len(dims) != 2:
        return f"the tensor has {len(shape)} dims and the declaration {len(dims)}; only a 2-D declaration folds " \
               "leading dims into its first mode"
    return f"the tensor has {len(shape)} dims; leading dims fold into the first mode only in row layout"


def _fold(shape: tuple[int, ...], dims: tuple[str, ...], layout: Layout) -> tuple[int, ...] | None:
    """Sizes of ``dims`` for a tensor of ``shape``: leading dims fold into the first mode (row layout)."""
    if len(dims) == 1:
        return (math.prod(shape),) if len(shape) >= 1 else None
    if len(shape) == len(dims):
        return tuple(shape)
    if len(shape) > len(dims) and layout is Layout.row and len(dims) == 2:
        return (math.prod(shape[:-1]), shape[-1])
    return None


def bind_gemm(kernel: GemmKernel, problem: Problem) -> Binding:
    """Bind a gemm ``kernel`` to ``problem`` and check the binding on every workload; ``alignment = auto`` and
    ``swap_ab = auto`` are decided for the workloads' extents (:func:`auto_alignment`, :func:`auto_swap_ab`) in
    :attr:`Binding.kernel`.

    Raises:
        CheckError: as :func:`bind_operands`.
    """
    binding, extents = bind_operands(kernel, problem)
    return dataclasses.replace(binding, kernel=auto_swap_ab(auto_alignment(kernel, extents), extents))


def bind_operands(kernel: GemmKernel, problem: Problem) -> tuple[Binding, list[dict[str, int]]]:
    """Bind the operands, epilogue inputs and outputs, scales (and a grouped GEMM's group operand) of a GEMM-like
    ``kernel`` to ``problem``'s tensors and check the binding on every workload; the kernel is taken as it is.

    Returns:
        The binding and the GEMM extents (``{"M", "N", "K", …}``) of each of the problem's workloads, in order.

    Raises:
        CheckError: an operand without a binding, a name the problem does not have (valid names listed),
            a dtype mismatch, an unused problem input or output, or modes that disagree.
    """
    diags: list[Diagnostic] = []
    slots: list[Slot] = []
    ins, outs = problem.inputs, problem.outputs
    meant: set[str] = set()  # what a misspelt binding probably names: not reported again as unused

    def add(arg: str, binding: str | None, dims, layout, dtype, is_output: bool, pos: Pos, view=()):
        pool = outs if is_output else ins
        arrow = "->" if is_output else "<-"
        if binding is None:
            diags.append(Diagnostic(f"{arg} is not bound to a problem {'output' if is_output else 'input'} "
                                    f"(write `{arrow} NAME`)", pos, tuple(pool), code="bind-missing"))
            return
        if binding not in pool:
            meant.add(closest(binding, list(pool)) or binding)
            other = ins if is_output else outs
            hint = f" ({binding!r} is an {'input' if is_output else 'output'}: use {'<-' if is_output else '->'})" \
                if binding in other else _did_you_mean(binding, list(pool))
            diags.append(Diagnostic(f"problem {problem.id} has no {'output' if is_output else 'input'} "
                                    f"{binding!r}{hint}", pos, tuple(pool), code="bind-unknown"))
            return
        spec = pool[binding]
        if isinstance(dtype, Choice):  # an open dtype: some option must be the tensor's (the tuner picks)
            if not any(getattr(o, "torch_name", None) == spec.dtype for o in dtype.options):
                theirs = _ucut_dtype(spec.dtype)
                diags.append(Diagnostic(f"{arg} is one of {{{', '.join(dtype.spellings)}}} but {problem.id}.{binding} "
                                        f"is {theirs or spec.dtype} (torch.{spec.dtype})", pos,
                                        (theirs,) if theirs else (), code="bind-dtype"))
        elif dtype is not None and spec.dtype != dtype.torch_name:
            theirs = _ucut_dtype(spec.dtype)
            diags.append(Diagnostic(f"{arg} is {dtype.value} but {problem.id}.{binding} is {theirs or spec.dtype}"
                                    f" (torch.{spec.dtype})", pos, (theirs,) if theirs else (), code="bind-dtype"))
        if (spec.shape is None) != (not dims):
            diags.append(Diagnostic(f"{arg} is {'a scalar' if not dims else 'a tensor'} but {problem.id}."
                                    f"{binding} is {'a scalar' if spec.shape is None else 'a tensor'}", pos,
                                    code="bind-shape"))
        cols = layout.options if isinstance(layout, Choice) else (layout,)
        if Layout.col in cols and len(dims) >= 2 and spec.shape is not None:
            shown = ", ".join(dims)
            written = "{" + ", ".join(layout.spellings) + "}" if isinstance(layout, Choice) else "col"
            diags.append(Diagnostic(
                f"{arg} : [{shown}] {written} {arrow} {binding}: {problem.id}'s tensors are contiguous (row-major, "
                f"the last dim {dims[-1]} contiguous) but col makes {dims[-2]} contiguous, so every call would be "
                f"refused (its strides do not match a col-major operand): declare {arg} : [{shown}] row", pos,
                ("row",), code="bind-layout"))
        slots.append(Slot(arg, binding, tuple(dims), layout, is_output, pos, view))

    for op in kernel.operands:
        add(op.name, op.binding, op.batch + op.dims, op.layout, op.dtype, op.name == "d", op.pos, op.slice)
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.scalar and inp.value is not None:
            continue
        add(inp.name, inp.binding, inp.batch + inp.dims, inp.layout, inp.dtype
            if inp.kind is not EpilogueInputKind.scalar else None, False, inp.pos)
    groups = getattr(kernel, "groups", None)  # a grouped_gemm's m_sizes / m_offsets
    if groups is not None:
        add(groups.name, groups.binding, groups.dims, Layout.row, groups.dtype, False, groups.pos)
    for out in kernel.epilogue_outputs:  # extra outputs (-> in the epilogue): stored or reduced
        add(out.name, out.binding, out.dims, out.layout, out.dtype, True, out.pos)
    for scale in kernel.scales:  # scale factors: [M, K/128] per block, or one element per tensor
        spec = ins.get(scale.binding) if scale.binding else None
        if not scale.per_tensor or spec is None or spec.shape is None:
            add(scale.name, scale.binding, scale.dims, scale.layout, scale.dtype, False, scale.pos)
            continue
        if spec.dtype != scale.dtype.torch_name:
            diags.append(Diagnostic(f"{scale.name} is {scale.dtype.value} but {problem.id}.{scale.binding} is "
                                    f"{spec.dtype}", scale.pos, code="bind-dtype"))
        slots.append(Slot(scale.name, scale.binding, (), scale.layout, False, scale.pos))
    used = {s.tensor for s in slots}
    for name in list(ins) + list(outs):
        if name not in used and name not in meant:
            kind = "input" if name in ins else "output"
            diags.append(Diagnostic(f"problem {kind} {name!r} of {problem.id} is not bound to any operand of "
                                    f"kernel {kernel.name!r}", kernel.pos, code="bind-unused"))
    _check_slice_axes(problem, slots, diags)
    if diags:
        raise CheckError(diags)
    binding = Binding(kernel, problem, tuple(slots))
    extents = [binding.extents(w) for w in problem.workloads]  # raises on disagreement
    _check_scale_extents(kernel, problem, extents)
    return binding, extents


def _check_slice_axes(problem: Problem, slots: Sequence[Slot], diags: list[Diagnostic]) -> None:
    """A slice names axes of the problem that a call can read: const, or the size of a dim of some tensor."""
    in_shapes = {d for spec in (*problem.inputs.values(), *problem.outputs.values()) for d in (spec.shape or ())}
    for slot in slots:
        for entry in slot.slice:
            axis = entry[:-1].lstrip("-")
            if not axis:
                continue
            ax = problem.axes.get(axis)
            if ax is None:
                diags.append(Diagnostic(f"{slot.arg} <- {slot.tensor}[{', '.join(slot.slice)}]: problem {problem.id} "
                                        f"has no axis {axis!r}{_did_you_mean(axis, list(problem.axes))}", slot.pos,
                                        tuple(problem.axes), code="bind-slice"))
            elif ax.kind != "const" and axis not in in_shapes:
                diags.append(Diagnostic(f"{slot.arg} <- {slot.tensor}[{', '.join(slot.slice)}]: axis {axis!r} is no "
                                        "tensor's dim, so a call cannot tell its value", slot.pos, code="bind-slice"))


def _check_scale_extents(kernel: GemmKernel, problem: Problem, extents: Sequence[Mapping[str, int]]) -> None:
    """A blockwise scale's ``X/g`` extent is ceil(X / g) on every workload (``scale_a : f32[M, K/128]`` over a
    [M, K] a has K/128 = ceil(K / 128) columns); a per-tensor scale is one element.

    Raises:
        CheckError: a scale tensor of the wrong extent.
    """
    diags = []
    for scale in kernel.scales:
        if scale.per_tensor:
            spec = problem.inputs[scale.binding]  # type: ignore[index]
            for w in problem.workloads:
                shape = problem.shape(spec, problem.resolve_axes(w)) or ()
                if math.prod(shape) != 1:
                    diags.append(Diagnostic(f"{scale.name} <- {scale.binding}: a per-tensor scale is one element, "
                                            f"but the problem's tensor is {list(shape)}", scale.pos, code="bind-shape"))
                    break
            continue
        for ext in extents:
            for dim in scale.dims:
                base, div = split_dim(dim)
                if div > 1 and base in ext and dim in ext and ext[dim] != -(-ext[base] // div):
                    diags.append(Diagnostic(f"{scale.name}: {dim} is {ext[dim]} but {base} = {ext[base]} needs "
                                            f"ceil({ext[base]} / {div}) = {-(-ext[base] // div)} blocks",
                                            scale.pos, code="bind-extent"))
    if diags:
        raise CheckError(diags)


def auto_alignment(kernel: GemmKernel, extents: Sequence[Mapping[str, int]]) -> GemmKernel:
    """A gemm ``kernel`` with ``alignment = auto`` replaced by the largest alignment (8, 4, 2, 1 elements) that
    every operand's contiguous extent allows in every one of ``extents``; unchanged when 16 bytes (TMA) does,
    or when ``alignment`` is given (the rules then say whether it serves the extents)."""
    if kernel.alignment is not None or any(isinstance(v, Choice) for op in kernel.operands
                                           for v in (op.dtype, op.layout)):
        return kernel  # given (or an open choice), or the contiguous dims are not known yet
    fit = largest_alignment(kernel, extents)
    return kernel if fit is None else dataclasses.replace(kernel, alignment=fit)


def auto_swap_ab(kernel: GemmKernel, extents: Sequence[Mapping[str, int]]) -> GemmKernel:
    """A gemm ``kernel`` with ``swap_ab = auto`` written ``true`` when its target's rules swap AB for the largest M of
    ``extents`` (:func:`ucutlass.arch.resolve_swap_ab`; sm90: every M at most 64); otherwise unchanged, and ``auto``
    still follows the kernel's ``when`` in a dispatch. The tuner applies the same to its candidates
    (:meth:`ucutlass.search.SearchSpace.concrete`), so that what it builds is what a bound call loads."""
    if kernel.swap_ab is not None or isinstance(kernel.target, Choice):
        return kernel
    ms = [int(e["M"]) for e in extents if "M" in e]
    return dataclasses.replace(kernel, swap_ab=True) if ms and arch_swaps_ab(kernel, max(ms)) else kernel
