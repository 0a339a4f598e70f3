"""A program (kernel, dispatch or pipeline) as a torch custom op, so a model under ``torch.compile`` calls it without
a graph break (issue 16, item 2).

:func:`register_custom_op` wraps the destination-passing callable that the grader's loaders return
(:func:`ucutlass.runtime.load_solution` for compiled programs, :func:`ucutlass.emulate.load_solution` for emulated
ones) in ``torch.library.custom_op``: the op takes the problem's inputs in definition order (tensors as ``Tensor``,
scalars as ``float`` / ``int`` / ``bool``) and returns its outputs, allocated per call from the problem's output
shapes (axes read off the input tensors) on the first tensor input's device. Its fake implementation allocates the
same shapes without running anything, which is what ``torch.compile`` (FakeTensor propagation, AOTAutograd) needs.
:func:`ucutlass.solution.program_op` builds the callable from a `.ucut` file first.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from ..errors import KernelRuntimeError

#: Problem scalar dtypes → the torch schema type of that argument.
_SCALAR_SCHEMA = {"float32": "float", "float64": "float", "float16": "float", "bfloat16": "float", "int32": "int",
                  "int64": "int", "bool": "bool"}


def axes_of_inputs(problem: Any, tensors: Mapping[str, Any]) -> dict[str, int]:
    """Every axis value (const, var and expr) read off the input tensors' shapes.

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        tensors: input name → tensor (or anything with ``.shape``), for the problem's tensor inputs.

    Raises:
        KernelRuntimeError: an input's rank differs from its definition, or two inputs (or a const axis) give an
            axis different sizes.
    """
    seen: dict[str, int] = {}
    for name, spec in problem.inputs.items():
        if spec.shape is None or name not in tensors:
            continue
        shape = tuple(tensors[name].shape)
        if len(shape) != len(spec.shape):
            raise KernelRuntimeError(f"{problem.id}: {name} has shape {list(shape)}, its definition "
                                     f"{list(spec.shape)} (rank {len(spec.shape)})")
        for dim, size in zip(spec.shape, shape):
            if isinstance(dim, int) or str(dim).isdigit():
                continue
            if seen.setdefault(str(dim), int(size)) != int(size):
                raise KernelRuntimeError(f"{problem.id}: axis {dim} is {seen[str(dim)]} in one input and {size} in "
                                         f"{name} {list(shape)}")
    var = {n: v for n, v in seen.items() if n in problem.axes and problem.axes[n].kind == "var"}
    axes = problem.resolve_axes(var)
    for n, v in seen.items():
        if n in axes and axes[n] != v:
            raise KernelRuntimeError(f"{problem.id}: axis {n} is {axes[n]} in the definition, {v} in the inputs")
    return axes


def _schema(problem: Any) -> str:
    args = []
    for name, spec in problem.inputs.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise KernelRuntimeError(f"{problem.id}: input {name!r} is no schema argument name")
        if spec.shape is None:
            kind = _SCALAR_SCHEMA.get(spec.dtype)
            if kind is None:
                raise KernelRuntimeError(f"{problem.id}: scalar input {name} of dtype {spec.dtype} has no torch "
                                         f"schema type (known: {', '.join(sorted(_SCALAR_SCHEMA))})")
            args.append(f"{kind} {name}")
        else:
            args.append(f"Tensor {name}")
    outs = ", ".join("Tensor" for _ in problem.outputs)
    return f"({', '.join(args)}) -> " + (outs if len(problem.outputs) == 1 else f"({outs})")


def register_custom_op(fn: Callable[..., Any], problem: Any, name: str, namespace: str = "ucutlass"):
    """Register a destination-passing program callable as the custom op ``namespace::name``.

    Args:
        fn: ``fn(*inputs, *outputs)`` in the problem's definition order, writing the outputs (what the loaders
            named above return).
        problem: the :class:`ucutlass.problem.Problem` it is bound to (inputs, outputs, dtypes, axes).
        name: the op's name (an identifier); ``namespace``: its library (default ``ucutlass``).

    Returns:
        The ``torch.library.custom_op`` object: call it with the problem's inputs (positional, definition order);
        it returns the output tensor, or a tuple of them in definition order. Also reachable as
        ``torch.ops.<namespace>.<name>``.

    Raises:
        KernelRuntimeError: a scalar input whose dtype has no schema type, or a name that is no identifier.
    """
    import torch

    from ..problem import torch_dtype

    if not re.fullmatch(r"[A-Za-z_]\w*", name) or not re.fullmatch(r"[A-Za-z_]\w*", namespace):
        raise KernelRuntimeError(f"custom op {namespace}::{name}: the namespace and the name must be identifiers")
    names = list(problem.inputs)
    outputs = list(problem.outputs.items())

    def allocate(args):
        tensors = {n: a for n, a in zip(names, args) if isinstance(a, torch.Tensor)}
        if not tensors:
            raise KernelRuntimeError(f"{problem.id}: the op has no tensor input to take a device from")
        axes = axes_of_inputs(problem, tensors)
        device = next(iter(tensors.values())).device
        return [torch.empty(problem.shape(spec, axes) or (), dtype=torch_dtype(spec.dtype), device=device)
                for _, spec in outputs]

    def result(outs):
        return outs[0] if len(outs) == 1 else tuple(outs)

    def impl(*args):
        outs = allocate(args)
        fn(*args, *outs)
        return result(outs)

    op = torch.library.custom_op(f"{namespace}::{name}", impl, mutates_args=(), schema=_schema(problem))
    op.register_fake(lambda *args: result(allocate(args)))
    return op


__all__ = ["register_custom_op", "axes_of_inputs"]
