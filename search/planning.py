"""What is decided before the first trial of a tune: the binding, the space, its legal configurations and the
workloads tuned on (:func:`plan`; no GPU, no nvcc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ucutlass.errors import UcutError
from ucutlass.ir import Choice
from ucutlass.sol.report import format_time

from .space import SearchSpace
from .study import representative_workloads


@dataclass
class TunePlan:
    """Everything decided before the first trial: binding, space, legal configs, tuned workloads."""

    problem: object
    program: object
    binding: object
    space: SearchSpace
    legal: list
    rejected: dict  # first violation message (or the same-kernel note) -> count
    tuned: list
    source_file: str

    def describe(self, t_sol_ms: Callable | None = None) -> str:
        k = self.space.kernel
        lines = [f"problem {self.problem.id}: {len(self.problem.workloads)} workloads; kernel {k.name}",
                 f"search space: {self.space.size} combinations of "
                 + (", ".join(f"{key} ({len(c.options)})" for key, c in self.space.choices.items()) or "nothing"),
                 f"legal under the {k.target.value if not isinstance(k.target, Choice) else 'target'} rules: "
                 f"{len(self.legal)}"]
        if self.rejected:
            lines.append("set aside (counted by the first rule each combination breaks, or as a second spelling "
                         "of one kernel):")
        for msg, n in sorted(self.rejected.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n}×: {msg}")
        lines.append(f"tuned on {len(self.tuned)} representative workloads (the best is verified on all):")
        for w in self.tuned:
            ext = self.binding.extents(w)
            sol = f"  T_SOL {format_time(t_sol_ms(w))}" if t_sol_ms and t_sol_ms(w) else ""  # as `ucutlass sol`
            dims = " ".join(f"{d}={v}" for d, v in ext.items())  # M N K, or attention's B Sq Sk Hq Hkv D
            # The workload's own axes, unless the kernel's extents already say them (a GEMM's M is the axis M).
            said = all(ext.get(a) == v for a, v in w.axes.items())
            lines.append(f"  {dims:<40}{sol}" if said else f"  {w.label():<40} {dims}{sol}")
        return "\n".join(lines)


def plan(problem, program, *, kernel: str | None = None, source_file: str = "<spec>",
         max_workloads: int = 6) -> TunePlan:
    """Bind, enumerate and prune the space (no GPU, no nvcc).

    Raises:
        CheckError: the program does not bind to the problem.
        UcutError: no legal configuration remains.
    """
    from ucutlass.bind import bind

    k = program.kernel(kernel)
    binding = bind(k, problem)
    extents = []
    for w in problem.workloads:
        e = binding.extents(w)
        if e not in extents:
            extents.append(e)
    space = SearchSpace.of(program, k.name, extents)
    legal, rejected = [], {}
    for params in space.all_params():
        v = space.violations(params)
        if v:
            rejected[v[0].message] = rejected.get(v[0].message, 0) + 1
        else:
            legal.append(params)
    if not legal:
        reasons = "; ".join(f"{m} ({n}×)" for m, n in rejected.items())
        raise UcutError(f"no legal configuration in the space of {k.name}: {reasons}")
    kernels = space.legal_params()  # one combination per kernel
    if len(kernels) < len(legal):
        rejected["the same kernel as a combination listed before it (an auto setting resolves to it)"] = \
            len(legal) - len(kernels)
        legal = kernels
    return TunePlan(problem, program, binding, space, legal, rejected,
                    representative_workloads(binding, max_workloads), source_file)
