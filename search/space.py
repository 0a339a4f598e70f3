"""The search space of a `.ucut` program: its open ``{…}`` choices, pruned by the arch rules.

Choices become Optuna ``CategoricalDistribution``s over their `.ucut` spellings (plain strings, as
Optuna's distributions expect). Legality is decided before any compile by
``ucutlass.arch.check_kernel`` (the rules of the kernel's target) with the extents of every workload the kernel must serve (so the
16-byte alignment rule sees the real N and K).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from optuna.distributions import CategoricalDistribution

from ucutlass import arch
from ucutlass.bind import resolve_auto
from ucutlass.errors import Diagnostic
from ucutlass.ir import Choice, GemmKernel, Program


@dataclass(frozen=True)
class SearchSpace:
    """Open choices of one kernel of a program.

    Attributes:
        program: the program with its ``{…}`` choices.
        kernel_name: the kernel being tuned.
        choices: ``{setting key: Choice}`` (keys as in :meth:`GemmKernel.choices`, e.g. ``tile``).
        extents: one ``{"M", "N", "K"}`` dict per workload the kernel must serve.
    """

    program: Program
    kernel_name: str
    choices: Mapping[str, Choice]
    extents: tuple[Mapping[str, int], ...] = ()
    #: Per combination (:func:`params_key`): its concrete kernel, rule errors and identity, each worked out
    #: once. The tuner asks for all three of a proposal, and enumerating the legal space asks for all of
    #: every combination: the rules run once per combination, not once per question.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, program: Program, kernel_name: str | None = None,
           extents: Sequence[Mapping[str, int]] = ()) -> "SearchSpace":
        """The space of ``kernel_name`` (the only kernel when None) for the workloads' ``extents``.

        Raises:
            CheckError: more than :data:`ucutlass.arch.MAX_COMBINATIONS` combinations (counted, not enumerated),
                naming the choices to narrow.
        """
        kernel = program.kernel(kernel_name)
        arch.require_countable(kernel)
        return cls(program, kernel.name, kernel.choices(), tuple(extents))

    @property
    def kernel(self) -> GemmKernel:
        return self.program.kernel(self.kernel_name)

    @property
    def size(self) -> int:
        """Number of combinations before pruning."""
        return math.prod(len(c.options) for c in self.choices.values()) if self.choices else 1

    def distributions(self) -> dict[str, CategoricalDistribution]:
        """Optuna distributions keyed by setting name, over `.ucut` spellings."""
        return {key: CategoricalDistribution(list(c.spellings)) for key, c in self.choices.items()}

    def picks(self, params: Mapping[str, str]) -> dict[str, object]:
        """Typed values for Optuna params (spellings)."""
        out = {}
        for key, spelling in params.items():
            choice = self.choices[key]
            out[key] = choice.options[choice.spellings.index(spelling)]
        return out

    def _memoized(self, what: str, params: Mapping[str, str], make):
        slot = self._memo.setdefault(params_key(params), {})
        if what not in slot:
            slot[what] = make()
        return slot[what]

    def concrete(self, params: Mapping[str, str]) -> GemmKernel:
        """The concrete kernel for Optuna params, with ``alignment = auto`` and ``swap_ab = auto`` decided for the
        workloads' extents as a binding decides them (:func:`ucutlass.bind.resolve_auto`, which ``ucutlass check
        --problem`` applies too): what the tuner builds is what a bound call loads."""
        return self._memoized("kernel", params,
                              lambda: resolve_auto(self.kernel.resolve(self.picks(params)), self.extents))

    def concrete_program(self, params: Mapping[str, str]) -> Program:
        """The concrete program (source text rewritten) for Optuna params."""
        return self.program.resolve({f"{self.kernel_name}.{k}": v for k, v in params.items()})

    def violations(self, params: Mapping[str, str]) -> list[Diagnostic]:
        """Arch-rule errors of one combination over every workload's extents (deduplicated)."""
        def check() -> list[Diagnostic]:
            kernel = self.concrete(params)
            seen: dict[str, Diagnostic] = {}
            for ext in self.extents or ({},):
                for d in arch.check_kernel(kernel, dict(ext) or None):
                    if d.severity == "error":
                        seen.setdefault(d.message, d)
            return list(seen.values())
        return list(self._memoized("violations", params, check))

    def all_params(self) -> Iterator[dict[str, str]]:
        """Every combination as Optuna params, in declaration order."""
        keys = list(self.choices)
        for combo in itertools.product(*(self.choices[k].spellings for k in keys)):
            yield dict(zip(keys, combo))

    def identity(self, params: Mapping[str, str]) -> str:
        """Digest of the kernel as its target builds and runs it (:func:`ucutlass.arch.canonical`): equal for
        combinations that are one kernel spelled two ways."""
        return self._memoized("identity", params, lambda: arch.canonical(self.concrete(params)).digest())

    @functools.cached_property
    def _legal_by_identity(self) -> dict[str, dict[str, str]]:
        by_identity: dict[str, dict[str, str]] = {}
        for p in self.all_params():
            if not self.violations(p):
                by_identity.setdefault(self.identity(p), p)
        return by_identity

    def legal_params(self) -> list[dict[str, str]]:
        """Every combination that passes the rules, one per kernel: of combinations with one :meth:`identity`
        only the first in declaration order."""
        return list(self._legal_by_identity.values())

    def representative(self, params: Mapping[str, str]) -> dict[str, str] | None:
        """The combination of :meth:`legal_params` that is the same kernel as ``params`` (``params`` itself when
        it is listed there), or None when ``params`` breaks a rule."""
        return self._legal_by_identity.get(self.identity(params))


def params_key(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Hashable, order-independent key of a parameter dict."""
    return tuple(sorted(params.items()))
