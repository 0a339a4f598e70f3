"""The grouped GEMM family's binding: ``kernel NAME : grouped_gemm``'s a, b, d, group operand (``m_sizes`` or
``m_offsets``) and epilogue inputs ↔ a problem's tensors.

The operands are checked as a gemm's (:func:`ucutlass.bind.gemm.bind_operands`: names, dtypes, unused tensors,
extents on every workload), the group operand among them. Unlike a gemm, the kernel is bound as written: grouped
kernels load with TMA only (16-byte alignment; :mod:`ucutlass.arch.sm90_grouped`), so there is no ``alignment =
auto`` to lower, and they do not swap AB.
"""

from __future__ import annotations

from ..ir import GroupedGemmKernel
from ..problem import Problem
from .gemm import Binding, bind_operands


def bind_grouped(kernel: GroupedGemmKernel, problem: Problem) -> Binding:
    """Bind a grouped GEMM to ``problem`` and check the binding on every workload (:attr:`Binding.kernel` is
    ``kernel``).

    Raises:
        CheckError: as :func:`ucutlass.bind.gemm.bind_operands`.
    """
    binding, _ = bind_operands(kernel, problem)
    return binding
