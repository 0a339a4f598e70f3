"""The rules module of each (family, target) and the entry points that pick it: :func:`check_kernel`,
:func:`rules_for`, :func:`resolve_schedule`, :func:`resolve_swap_ab`, :func:`canonical`."""


from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Mapping

from ..errors import Diagnostic
from ..ir import Choice, GemmKernel, Schedule, Target
from . import (sm90, sm90_3xtf32, sm90_attention, sm90_conv, sm90_grouped, sm100, sm100_attention, sm100_conv,
               sm100_grouped)

#: The rules module of each target.
TARGET_RULES: dict[Target, ModuleType] = {Target.sm90: sm90, Target.sm100: sm100}

#: Every rule code of every target, with what it checks (the card, docs/DSL.md, lists them all).
RULES: dict[str, str] = {**sm90.RULES, **sm100.RULES, **sm90_attention.RULES, **sm100_attention.RULES,
                         **sm90_grouped.RULES, **sm100_grouped.RULES, **sm90_conv.RULES,
                         **sm100_conv.RULES, **sm90_3xtf32.RULES}
#: The rules module of each target for attention kernels (``kernel NAME : attention``).
ATTENTION_RULES: dict[Target, ModuleType] = {Target.sm90: sm90_attention, Target.sm100: sm100_attention}
#: The rules module of each target for grouped GEMMs (``kernel NAME : grouped_gemm``).
GROUPED_RULES: dict[Target, ModuleType] = {Target.sm90: sm90_grouped, Target.sm100: sm100_grouped}
#: The rules module of each target for convolutions (``kernel NAME : conv``).
CONV_RULES: dict[Target, ModuleType] = {Target.sm90: sm90_conv, Target.sm100: sm100_conv}


def rules_for(kernel: GemmKernel) -> ModuleType:
    """The rules module of ``kernel.target``.

    Raises:
        ValueError: the target is still an open choice.
    """
    if isinstance(kernel.target, Choice):
        raise ValueError(f"kernel {kernel.name!r}: target is an open choice; resolve it first")
    if getattr(kernel, "family", "gemm") == "attention":
        return ATTENTION_RULES[kernel.target]
    if getattr(kernel, "family", "gemm") == "grouped_gemm":  # ptr-array grouped GEMM
        return GROUPED_RULES[kernel.target]
    if getattr(kernel, "family", "gemm") == "conv":  # implicit-GEMM convolution
        return CONV_RULES[kernel.target]
    if sm90_3xtf32.uses_3xtf32(kernel):  # math = 3xtf32: the SM80 3xTF32 kernel, whatever the target says
        return sm90_3xtf32
    return TARGET_RULES[kernel.target]


def check_kernel(kernel: GemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule of its target that a concrete kernel breaks (see ``sm90.check_kernel``, ``sm100.check_kernel``).

    Args:
        kernel: a kernel without open choices.
        extents: optional problem extents by dim name (``{"M": 4096, "N": 4096, "K": 4096}``) for the
            alignment and split-K rules.

    Raises:
        ValueError: the kernel still has open choices.
    """
    family_rules = [] if getattr(kernel, "family", "gemm") == "gemm" else sm90_3xtf32.check_family(kernel)
    return family_rules + rules_for(kernel).check_kernel(kernel, extents)


def resolve_schedule(kernel: GemmKernel) -> Schedule:
    """The schedule the kernel runs on its target (``auto`` resolved by that target's rules)."""
    return rules_for(kernel).resolve_schedule(kernel)


def resolve_swap_ab(kernel: GemmKernel, m_max: int | None = None) -> bool:
    """Whether the kernel computes Dᵀ = B·Aᵀ (``swap_ab``) on its target: ``true``/``false`` as written; ``auto`` as
    the target's rules decide from what is known of M: the kernel's ``when M <= B`` in a dispatch, or ``m_max``, the
    largest M it will be called with (a binding knows it from the problem's workloads). Kernels of other families
    (grouped, attention) do not swap.

    Raises:
        ValueError: ``swap_ab`` or the target is still an open choice.
    """
    if getattr(kernel, "family", "gemm") != "gemm":
        return False
    return rules_for(kernel).resolve_swap_ab(kernel, m_max)


def canonical(kernel: GemmKernel) -> GemmKernel:
    """``kernel`` with the settings its target's rules decide written out as they decide them: for attention,
    ``schedule`` and ``persistent`` (all the template reads of them is ``resolve_schedule`` and
    ``resolve_persistent``). Kernels equal after this render the same C++ and run alike, e.g. sm90 attention
    with ``schedule = pingpong`` and ``persistent = auto`` or ``true`` (88's builder makes pingpong persistent
    either way), so a search measures one of them; for a gemm, ``swap_ab`` (:func:`resolve_swap_ab`: ``auto`` is
    true or false by the kernel's ``when``). Other families are returned unchanged."""
    if getattr(kernel, "family", "gemm") == "gemm" and not isinstance(kernel.swap_ab, Choice) \
            and not isinstance(kernel.target, Choice):
        return dataclasses.replace(kernel, swap_ab=resolve_swap_ab(kernel))
    if getattr(kernel, "family", "gemm") != "attention":
        return kernel
    rules = rules_for(kernel)
    return dataclasses.replace(kernel, schedule=rules.resolve_schedule(kernel),
                               persistent=rules.resolve_persistent(kernel))
