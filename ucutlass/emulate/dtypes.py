"""`.ucut` element types as torch dtypes, for emulation."""

from __future__ import annotations

from ..errors import KernelRuntimeError
from ..ir import DType


def torch_dtype(dtype: DType):
    """The torch dtype of ``dtype`` (:attr:`ucutlass.ir.DType.torch_name`).

    Raises:
        KernelRuntimeError: a type torch cannot compute with elementwise (``e2m1``, two per byte).
    """
    import torch

    if dtype is DType.e2m1:
        raise KernelRuntimeError("emulation does not read e2m1 (FP4, two values per byte) operands yet")
    return getattr(torch, dtype.torch_name)
