"""Slices in a binding: ``a : bf16[B, M, K] row <- hidden_states[:, -keep:]`` binds a view of the tensor.

The view is taken at call time (no copy): :func:`slice_index` gives the Python slices of a call's tensor,
:func:`slice_view` the view's offset, shape and strides (in elements) of a contiguous tensor, :func:`slice_problem`
why a view cannot be bound (its contiguous dim is cut, or batch dims that must fold into one stride are cut).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..ir import Layout


def slice_index(entries: Sequence[str], shape: Sequence[int], axes: Mapping[str, int]) -> tuple[slice, ...]:
    """Python slices of ``entries`` (``":"``, ``"NAME:"`` from axis NAME on, ``"-NAME:"`` the last NAME) for a tensor
    of ``shape``, the axes' values in ``axes``.

    Raises:
        ValueError: more entries than dims, or an axis value outside [0, the dim's size].
    """
    if len(entries) > len(shape):
        raise ValueError(f"{len(entries)} slice entries for a {len(shape)}-D tensor")
    index = []
    for entry, size in zip(entries, shape):
        start = entry[:-1]
        if not start:
            index.append(slice(None))
            continue
        value = int(axes[start.lstrip("-")])
        if not 0 <= value <= size:
            raise ValueError(f"{entry} takes {start.lstrip('-')} = {value} of a dim of size {size}")
        index.append(slice(size - value if start.startswith("-") else value, None))
    return tuple(index)


def slice_view(entries: Sequence[str], shape: Sequence[int], axes: Mapping[str, int]
               ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(offset, shape, strides), in elements, of the view ``entries`` takes of a contiguous tensor of ``shape``
    (``[:, -keep:]`` of [B, S, K]: offset (S - keep)·K, shape [B, keep, K], strides (S·K, K, 1)).

    Raises:
        ValueError: as :func:`slice_index`.
    """
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    offset, view = 0, list(shape)
    for i, s in enumerate(slice_index(entries, shape, axes)):
        start = s.start or 0
        offset += start * strides[i]
        view[i] = shape[i] - start
    return offset, tuple(view), tuple(strides)


def slice_problem(slot: Any, shape: tuple[int, ...], n_batch: int) -> str | None:
    """Why the view ``slot.slice`` takes of a contiguous tensor of ``shape`` cannot be bound, or None (``slot``: a
    :class:`ucutlass.bind.Slot`; ``n_batch``: how many of its leading dims are batch dims): its
    contiguous dim is whole, its batch dims fold into one stride, and leading dims folded into the first mode are
    contiguous."""
    cut = [i for i, e in enumerate(slot.slice) if e != ":"]
    inner = len(shape) - 1 if slot.layout is Layout.row else len(shape) - 2
    if inner in cut:
        return f"its contiguous dim ({slot.dims[-1] if slot.layout is Layout.row else slot.dims[0]}) is sliced"
    groups = [range(n_batch)] if n_batch else []  # batch dims: one stride
    if len(shape) > len(slot.dims) and not n_batch:
        groups.append(range(len(shape) - len(slot.dims) + 1))  # dims folded into the first mode: contiguous
    for group in groups:
        for i in cut:
            if i in group and any(shape[j] > 1 for j in group if j < i):
                return (f"dim {i} is sliced but dims {list(j for j in group if j < i)} before it fold with it into "
                        "one stride")
    return None
