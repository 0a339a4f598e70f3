"""Bind a kernel's operands to a problem's inputs and outputs (``<-`` / ``->`` in `.ucut`).

A binding checks, before anything is compiled, that every operand names a tensor of the problem with
the same dtype, that every problem input and output is used, and that the GEMM modes (M, N, K) come out
the same from every operand on every workload. Leading dimensions of a bound tensor fold into the
first declared mode (``a : bf16[M, K] row <- hidden_states`` with hidden_states ``[batch, seq, hidden]``
gives M = batch·seq, K = hidden). Batch dims declared on a, b and d (``a : bf16[B, H, M, K]``) are taken
as they are: the tensor has exactly those dims. A kernel with ``alignment = auto`` is bound with the largest
alignment every workload allows (:func:`resolve_alignment`): :attr:`Binding.kernel` is what to build.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .errors import CheckError, Diagnostic
from .ir import Choice, EpilogueInputKind, GemmKernel, Layout, Pos
from .problem import Problem, Workload


@dataclass(frozen=True)
class Slot:
    """One bound argument: a kernel operand or epilogue input, and the problem tensor behind it."""

    arg: str  # kernel-side name (a, b, c, d, or an epilogue input)
    tensor: str  # problem input/output name
    dims: tuple[str, ...]  # declared modes, e.g. ("M", "K"); () for a scalar
    layout: Layout
    is_output: bool
    pos: Pos


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
            sizes = _fold(shape, slot.dims, slot.layout)
            if sizes is None:
                diags.append(Diagnostic(
                    f"{slot.arg} <- {slot.tensor}: shape {list(shape)} cannot be read as "
                    f"[{', '.join(slot.dims)}] {slot.layout.value} (only row-major operands fold leading "
                    "dimensions)", slot.pos, code="bind-shape"))
                continue
            for dim, size in zip(slot.dims, sizes):
                if dim in found and found[dim][0] != size:
                    diags.append(Diagnostic(
                        f"{dim} is {found[dim][0]} from {found[dim][1]} but {size} from {slot.arg} <- "
                        f"{slot.tensor} (workload {_label(workload)})", slot.pos, code="bind-extent"))
                found.setdefault(dim, (size, f"{slot.arg} <- {slot.tensor}"))
        if diags:
            raise CheckError(diags)
        return {d: v for d, (v, _) in found.items()}

    def callable(self, compiled: Any) -> Callable[..., None]:
        """A destination-passing ``fn(*inputs, *outputs)`` in the problem's definition order."""
        names = list(self.problem.inputs) + list(self.problem.outputs)
        tensor_of = {s.arg: s.tensor for s in self.slots}
        abi = compiled.abi
        # Positions, in the problem's argument list, of the kernel's ABI arguments (pointers, scalars).
        order = [names.index(tensor_of[arg]) for arg in abi.ptr_names + abi.scalar_names]

        def run(*args: Any) -> None:
            if len(args) != len(names):
                raise TypeError(f"expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
            compiled.call([args[i] for i in order])

        run.__name__ = f"{self.kernel.name}_on_{self.problem.id}"
        run.kernel = compiled  # type: ignore[attr-defined]
        return run


def _label(workload: Workload | Mapping[str, int]) -> str:
    return workload.label() if isinstance(workload, Workload) else ",".join(f"{k}={v}" for k, v in workload.items())


def _fold(shape: tuple[int, ...], dims: tuple[str, ...], layout: Layout) -> tuple[int, ...] | None:
    """Sizes of ``dims`` for a tensor of ``shape``: leading dims fold into the first mode (row layout)."""
    if len(dims) == 1:
        return (math.prod(shape),) if len(shape) >= 1 else None
    if len(shape) == len(dims):
        return tuple(shape)
    if len(shape) > len(dims) and layout is Layout.row and len(dims) == 2:
        return (math.prod(shape[:-1]), shape[-1])
    return None


def bind(kernel: GemmKernel, problem: Problem) -> Binding:
    """Bind ``kernel`` to ``problem`` and check the binding on every workload.

    Raises:
        CheckError: an operand without a binding, a name the problem does not have (valid names listed),
            a dtype mismatch, an unused problem input or output, or modes that disagree.
    """
    if getattr(kernel, "family", "gemm") == "attention":  # q, k, v, o[, lse]: ucutlass.attention_runtime
        from .attention_runtime import bind_attention
        return bind_attention(kernel, problem)  # type: ignore[return-value]
    diags: list[Diagnostic] = []
    slots: list[Slot] = []
    ins, outs = problem.inputs, problem.outputs

    def add(arg: str, binding: str | None, dims, layout, dtype, is_output: bool, pos: Pos):
        pool = outs if is_output else ins
        arrow = "->" if is_output else "<-"
        if binding is None:
            diags.append(Diagnostic(f"{arg} is not bound to a problem {'output' if is_output else 'input'} "
                                    f"(write `{arrow} NAME`)", pos, tuple(pool), code="bind-missing"))
            return
        if binding not in pool:
            other = ins if is_output else outs
            hint = f" ({binding!r} is an {'input' if is_output else 'output'}: use {'<-' if is_output else '->'})" \
                if binding in other else ""
            diags.append(Diagnostic(f"problem {problem.id} has no {'output' if is_output else 'input'} "
                                    f"{binding!r}{hint}", pos, tuple(pool), code="bind-unknown"))
            return
        spec = pool[binding]
        if dtype is not None and spec.dtype != dtype.torch_name:
            diags.append(Diagnostic(f"{arg} is {dtype.value} but {problem.id}.{binding} is {spec.dtype}", pos,
                                    code="bind-dtype"))
        if (spec.shape is None) != (not dims):
            diags.append(Diagnostic(f"{arg} is {'a scalar' if not dims else 'a tensor'} but {problem.id}."
                                    f"{binding} is {'a scalar' if spec.shape is None else 'a tensor'}", pos,
                                    code="bind-shape"))
        slots.append(Slot(arg, binding, tuple(dims), layout, is_output, pos))

    for op in kernel.operands:
        add(op.name, op.binding, op.batch + op.dims, op.layout, op.dtype, op.name == "d", op.pos)
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
        if name not in used:
            kind = "input" if name in ins else "output"
            diags.append(Diagnostic(f"problem {kind} {name!r} of {problem.id} is not bound to any operand of "
                                    f"kernel {kernel.name!r}", kernel.pos, code="bind-unused"))
    if diags:
        raise CheckError(diags)
    binding = Binding(kernel, problem, tuple(slots))
    extents = [binding.extents(w) for w in problem.workloads]  # raises on disagreement
    _check_scale_extents(kernel, problem, extents)
    return dataclasses.replace(binding, kernel=resolve_alignment(kernel, extents))


def _check_scale_extents(kernel: GemmKernel, problem: Problem, extents: Sequence[Mapping[str, int]]) -> None:
    """A blockwise scale's ``X/g`` extent is ceil(X / g) on every workload (``scale_a : f32[M, K/128]`` over a
    [M, K] a has K/128 = ceil(K / 128) columns); a per-tensor scale is one element.

    Raises:
        CheckError: a scale tensor of the wrong extent.
    """
    from .ir import split_dim

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


def resolve_alignment(kernel: GemmKernel, extents: Sequence[Mapping[str, int]]) -> GemmKernel:
    """``kernel`` with ``alignment = auto`` replaced by the largest alignment (8, 4, 2, 1 elements) that
    every operand's contiguous extent allows in every one of ``extents``; unchanged when 16 bytes (TMA) does,
    or when ``alignment`` is given (the rules then say whether it serves the extents)."""
    from .arch._common import largest_alignment

    if getattr(kernel, "family", "gemm") == "grouped_gemm":
        return kernel  # grouped kernels load with TMA only (ucutlass.arch.sm90_grouped)
    if kernel.alignment is not None or any(isinstance(v, Choice) for op in kernel.operands
                                           for v in (op.dtype, op.layout)):
        return kernel  # given (or an open choice), or the contiguous dims are not known yet
    fit = largest_alignment(kernel, extents)
    return kernel if fit is None else dataclasses.replace(kernel, alignment=fit)
