"""AST → IR for a whole program: the table of family lowerings (one module per family:
:mod:`~ucutlass.lang.gemm`, :mod:`~ucutlass.lang.attention`, :mod:`~ucutlass.lang.grouped`, :mod:`~ucutlass.lang.conv`), then the checks of a
dispatch (:mod:`~ucutlass.lang.dispatch`)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..ir import Pos, Program
from .ast import KernelNode
from .attention import lower_attention
from .conv import lower_conv
from .dispatch import lower_dispatch
from .gemm import lower_gemm
from .grouped import lower_grouped
from .lowering import Lowering
from .pipeline import lower_pipelines
from .vocabulary import FAMILIES

#: The lowering of each kernel family (``kernel NAME : FAMILY { … }``): one module per family.
LOWERINGS: dict[str, Callable[[Lowering, KernelNode], Any]] = {
    "gemm": lower_gemm, "attention": lower_attention, "grouped_gemm": lower_grouped, "conv": lower_conv}
assert tuple(LOWERINGS) == FAMILIES


def lower_program(low: Lowering, kernels: Sequence[KernelNode], source: str,
                  pipelines: Sequence[Any] = ()) -> Program:
    """Every kernel's and pipeline's AST → the program's IR; errors are collected in ``low.diags``."""
    lowered = []
    seen: dict[str, Pos] = {}
    for k in kernels:
        if k.name in seen:
            low.error("duplicate-kernel", f"kernel {k.name!r} is defined twice (first at line "
                      f"{seen[k.name].line})", k.name_pos)
        seen.setdefault(k.name, k.name_pos)
        lowered.append(lower_kernel(low, k))
    if any(k.when is not None for k in kernels):  # a dispatch (`when M <= 64`): checked in its own module
        lowered = lower_dispatch(low, kernels, lowered)
    lowered_pipelines = lower_pipelines(low, pipelines, kernels)
    return Program(tuple(k for k in lowered if k is not None), source=source, file=low.file,
                   pipelines=lowered_pipelines)


def lower_kernel(low: Lowering, k: KernelNode):
    """One kernel's AST → its IR kernel (the family's lowering, :data:`LOWERINGS`), or None after errors."""
    low.kernel_start = len(low.diags)  # a family's lowering gives None when its kernel has errors
    low.misplaced_slices(k)
    if k.family not in LOWERINGS:
        low.error("unknown-family", f"kernel family {k.family!r} is not supported yet", k.family_pos, FAMILIES)
        return None
    return LOWERINGS[k.family](low, k)
