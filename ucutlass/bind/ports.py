"""A kernel's ports (the tensors and scalars it reads and writes) as a pipeline sees them: a kernel call's
arguments and results (:func:`kernel_ports`), the shapes of its results (:func:`kernel_output_shapes`) and the kernel
bound to the tensors of one call (:func:`rebound`). Used by :mod:`ucutlass.bind.pipeline` and the run time."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..ir import (ConvKernel, DType, EpilogueInput, EpilogueOutput, Layout, Operand, Pos, Scale, output_extent,
                  spatial_of)

#: Operands that a kernel writes (the rest of its operands are read).
OUTPUT_OPERANDS = ("d", "o", "lse")
#: The operand a kernel call returns first.
PRIMARY_OUTPUTS = ("d", "o")


@dataclass(frozen=True)
class Port:
    """A tensor or scalar a kernel reads (an argument of its call) or writes (a result of its call)."""

    name: str
    dims: tuple[str, ...]  # batch dims then declared dims; () for a scalar
    layout: Layout
    dtype: Any
    is_output: bool
    binding: str | None  # the kernel's own `<- name`: the default argument in a pipeline
    pos: Pos


def kernel_ports(kernel: Any) -> tuple[list[Port], list[Port]]:
    """A kernel's inputs in declaration order (its call's positional arguments) and its outputs (the primary output,
    ``d`` or ``o``, first; then ``lse`` and epilogue outputs in declaration order). Literal epilogue scalars
    (``alpha : f32 = 0.5``) are no arguments."""
    ports: list[Port] = []
    for f in dataclasses.fields(kernel):
        values = getattr(kernel, f.name)
        for v in values if isinstance(values, tuple) else (values,):
            if isinstance(v, Operand):
                layout = v.layout if isinstance(v.layout, Layout) else Layout.row
                ports.append(Port(v.name, tuple(v.batch) + tuple(v.dims), layout, v.dtype,
                                  v.name in OUTPUT_OPERANDS, v.binding, v.pos))
            elif isinstance(v, Scale):
                ports.append(Port(v.name, tuple(v.dims), v.layout, v.dtype, False, v.binding, v.pos))
            elif isinstance(v, EpilogueInput) and v.value is None:
                ports.append(Port(v.name, tuple(v.batch) + tuple(v.dims), v.layout, v.dtype, False, v.binding, v.pos))
            elif isinstance(v, EpilogueOutput):
                ports.append(Port(v.name, tuple(v.batch) + tuple(v.dims), v.layout, v.dtype, True, v.binding, v.pos))
    inputs = sorted((p for p in ports if not p.is_output), key=lambda p: p.pos.start)
    outputs = sorted((p for p in ports if p.is_output), key=lambda p: (p.name not in PRIMARY_OUTPUTS, p.pos.start))
    return inputs, outputs


def _dim_size(dim: str, sizes: Mapping[str, int]) -> int | None:
    if dim.isdigit():
        return int(dim)
    name, _, div = dim.partition("/")
    if name not in sizes:
        return None
    return sizes[name] // int(div) if div else sizes[name]


def kernel_output_shapes(inputs: Sequence[Port], outputs: Sequence[Port],
                         shapes: Mapping[str, tuple[int, ...] | None],
                         kernel: Any = None) -> dict[str, tuple[int, ...]]:
    """The shape of each output of a kernel call, from its arguments' shapes (``{port name: shape}``).

    Each declared dim takes its extent from the arguments (``[M, K]`` reading ``[2, 128, 4096]``: M = 256); leading
    dims that fold into an argument's first mode come back on an output whose first mode is the same
    (``d : bf16[M, N]`` is ``[2, 128, N]``). A conv ``kernel`` (:class:`ucutlass.ir.ConvKernel`) gives each output
    spatial extent from the activation's and the filter's by its stride, padding and dilation (``d : [N, Q, K]`` of
    ``a : [N, W, C]``, ``b : [K, S, C]``: Q = (W + 2·padding - dilation·(S - 1) - 1) // stride + 1).

    Raises:
        ValueError: an output dim no argument gives.
    """
    sizes: dict[str, int] = {}
    lead: dict[str, tuple[int, ...]] = {}
    for port in inputs:
        shape = shapes.get(port.name)
        if not port.dims or shape is None:
            continue
        names = [d.partition("/")[0] for d in port.dims]
        if len(shape) > len(names) and port.layout is Layout.row and len(names) >= 1:
            extra = len(shape) - len(names) + 1
            lead.setdefault(names[0], tuple(shape[:extra]))
            shape = (math.prod(shape[:extra]), *shape[extra:])
        if len(shape) != len(names):
            continue  # the binder names the mismatch
        for dim, size in zip(port.dims, shape):
            name, _, div = dim.partition("/")
            if not dim.isdigit():
                sizes.setdefault(name, size * int(div) if div else size)
    if isinstance(kernel, ConvKernel):
        for i, (size, window, made) in enumerate(zip(spatial_of(kernel.a.dims), spatial_of(kernel.b.dims),
                                                     spatial_of(kernel.d.dims))):
            if made not in sizes and size in sizes and window in sizes:
                sizes[made] = output_extent(sizes[size], sizes[window], kernel.stride[i], kernel.padding[i],
                                            kernel.dilation[i])
    out = {}
    for port in outputs:
        dims = []
        for i, dim in enumerate(port.dims):
            size = _dim_size(dim, sizes)
            if size is None:
                raise ValueError(f"no argument gives {dim}, a dim of output {port.name}")
            if i == 0 and dim in lead and math.prod(lead[dim]) == size:
                dims.extend(lead[dim])
            else:
                dims.append(size)
        out[port.name] = tuple(dims)
    return out


def rebound(kernel: Any) -> Any:
    """``kernel`` with every port bound to a tensor of its own name (the problem of one call), slices kept."""
    changes = {}
    for f in dataclasses.fields(kernel):
        values = getattr(kernel, f.name)
        many = isinstance(values, tuple)
        items = []
        changed = False
        for v in values if many else (values,):
            if isinstance(v, (Operand, Scale, EpilogueOutput)) or (isinstance(v, EpilogueInput) and v.value is None):
                items.append(dataclasses.replace(v, binding=v.name))
                changed = True
            else:
                items.append(v)
        if changed:
            changes[f.name] = tuple(items) if many else items[0]
    return dataclasses.replace(kernel, **changes)


def dtype_name(dtype: Any) -> str:
    return dtype.torch_name if isinstance(dtype, DType) else getattr(dtype, "torch_name", str(dtype))
