"""Architecture rules: what each target accepts, checked before nvcc.

:func:`check_kernel` is the one entry point: it picks the rules of the kernel's ``target``
(:mod:`ucutlass.arch.sm90` for Hopper, :mod:`ucutlass.arch.sm100` for Blackwell). :func:`resolve_schedule`
and :data:`RULES` do the same for the schedule ``auto`` resolves to and for the rule codes;
:func:`canonical` says which spellings of a kernel are the same kernel.
"""

from ._common import largest_alignment
from .legality import (MAX_COMBINATIONS, check, count_combinations, distinct_combinations, legal_combinations,
                       require_countable)
from .targets import (ATTENTION_RULES, CONV_RULES, GROUPED_RULES, RULES, TARGET_RULES, canonical, check_kernel,
                      resolve_schedule, resolve_swap_ab, rules_for)

__all__ = ["canonical", "check_kernel", "resolve_schedule", "resolve_swap_ab", "rules_for", "RULES", "TARGET_RULES",
           "ATTENTION_RULES", "GROUPED_RULES", "CONV_RULES", "check", "legal_combinations", "distinct_combinations",
           "MAX_COMBINATIONS", "count_combinations", "require_countable",
           "largest_alignment"]
