"""What is decided before the first trial of a pipeline's tune (issue 16 item 4; no GPU, no nvcc).

A pipeline (``pipeline NAME { … }``) is bound to the problem once (:func:`ucutlass.bind.bind_pipeline`: shapes flow
on every workload, each kernel call is bound to the problem of its arguments). A kernel called from several steps
(L1_050's ``proj`` makes q, k and v) serves the shapes of all its calls; its search space
(:class:`search.space.SearchSpace`) is pruned by the arch rules over the extents of every call on every workload,
as a one-kernel tune prunes over the problem's workloads. Kernels of the file that the pipeline does not call are
not tuned (their choices stay as written).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ucutlass.errors import UcutError
from ucutlass.problem import Workload
from ucutlass.sol.report import format_time

from .space import SearchSpace


@dataclass
class KernelPlan:
    """One kernel of the pipeline, as the tuner sees it.

    Attributes:
        name: the kernel's name in the file.
        steps: the indexes (0-based) of the pipeline steps that call it, one per call.
        shapes: per workload uuid, per call: ``{port: (shape tuple, dtype name) | None}`` (None: a scalar).
        extents: the distinct extents (``{"M", "N", "K"}`` for a GEMM; attention's B Sq Sk …) of every call
            on every workload, in first-seen order.
        space: the kernel's open choices pruned by the rules over ``extents``.
        legal: one legal combination per distinct kernel (:meth:`SearchSpace.legal_params`), declaration order.
        rejected: first rule message broken → count of combinations set aside.
    """

    name: str
    steps: list[int]
    shapes: dict[str, list[dict[str, Any]]]
    extents: list[dict[str, int]]
    space: SearchSpace
    legal: list[dict[str, str]]
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def is_open(self) -> bool:
        """True when there is something to search: more than one legal kernel."""
        return len(self.legal) > 1

    def work(self, workload_uuid: str) -> int:
        """The product of the extents of this kernel's calls on one workload, summed over its calls (a measure
        of its size for choosing representative workloads; 0 when the workload is unknown)."""
        total = 0
        for call in self.shapes.get(workload_uuid, []):
            total += sum(math.prod(s[0]) for s in call.values() if s is not None)
        return total


@dataclass
class PipelinePlan:
    """Everything decided before the first trial of a pipeline's tune.

    Attributes:
        problem: the :class:`ucutlass.problem.Problem`; ``program``: the :class:`ucutlass.ir.Program` with its
            open choices; ``pipeline``: the pipeline's name.
        binding: the :class:`ucutlass.bind.PipelineBinding` (open choices left open).
        kernels: one :class:`KernelPlan` per kernel the pipeline calls, in the order of its first call.
        tuned: the workloads trials are measured on (spread over the pipeline's work; the best is graded on all).
        source_file: the `.ucut` file's name in messages and builds.
    """

    problem: Any
    program: Any
    pipeline: str
    binding: Any
    kernels: list[KernelPlan]
    tuned: list[Workload]
    source_file: str

    def kernel(self, name: str) -> KernelPlan:
        """The plan of kernel ``name``.

        Raises:
            KeyError: the pipeline does not call a kernel of that name.
        """
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"pipeline {self.pipeline} calls no kernel {name!r} (it calls "
                       f"{', '.join(k.name for k in self.kernels)})")

    def first_picks(self) -> dict[str, dict[str, str]]:
        """``{kernel: params}``: each kernel's first legal combination (what a trial of another kernel fixes it at
        before its own study has a best)."""
        return {k.name: dict(k.legal[0]) for k in self.kernels}

    def concrete_program(self, picks: Mapping[str, Mapping[str, str]]) -> Any:
        """The program with every tuned kernel's choices picked (``{kernel: {setting: spelling}}``), its source
        text rewritten (:meth:`ucutlass.ir.Program.resolve`: comments survive)."""
        flat = {f"{kernel}.{key}": value for kernel, params in picks.items() for key, value in params.items()}
        return self.program.resolve(flat)

    def describe(self, t_sol_ms: Callable[[Workload], float | None] | None = None) -> str:
        """The plan as text (``ucutlass tune --dry-run`` on a pipeline)."""
        lines = [f"problem {self.problem.id}: {len(self.problem.workloads)} workloads; pipeline {self.pipeline} "
                 f"({len(self.binding.pipeline.steps)} step{'s' if len(self.binding.pipeline.steps) != 1 else ''}), "
                 f"{len(self.kernels)} kernel"
                 f"{'s' if len(self.kernels) != 1 else ''}, tuned one study each, round-robin"]
        lines += self.binding.describe_short(full=f"`ucutlass check {self.source_file} --problem {self.problem.id}`")
        for k in self.kernels:
            space = k.space
            opened = ", ".join(f"{key} ({len(c.options)})" for key, c in space.choices.items())
            size = (f"{space.size} combination{'s' if space.size != 1 else ''} of {opened}" if opened
                    else "no open choice")
            lines.append(f"kernel {k.name} (steps {', '.join(str(s + 1) for s in k.steps)}): {size}; "
                         f"{len(k.legal)} legal over {len(k.extents)} distinct shapes")
            for msg, n in sorted(k.rejected.items(), key=lambda kv: -kv[1]):
                lines.append(f"    {n}×: {msg}")
            if not k.is_open:
                lines.append("    nothing to search (one legal kernel)")
        lines.append(f"tuned on {len(self.tuned)} representative workloads (the best is graded on all):")
        for w in self.tuned:
            sol = f"  T_SOL {format_time(t_sol_ms(w))}" if t_sol_ms and t_sol_ms(w) else ""
            lines.append(f"  {w.label()}{sol}")
        return "\n".join(lines)


def _extents(binding: Any) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for w in binding.problem.workloads:
        e = dict(binding.extents(w))
        if e not in out:
            out.append(e)
    return out


def representative(workloads: Sequence[Workload], work: Callable[[Workload], int], k: int) -> list[Workload]:
    """Up to ``k`` workloads spread evenly over ``work`` (smallest and largest included), in order of work."""
    ordered = sorted(workloads, key=work)
    if len(ordered) <= k:
        return ordered
    idx = sorted({round(i * (len(ordered) - 1) / (k - 1)) for i in range(k)}) if k > 1 else [len(ordered) - 1]
    return [ordered[i] for i in idx]


def plan_pipeline(problem: Any, program: Any, *, pipeline: str | None = None, source_file: str = "<spec>",
                  max_workloads: int = 6) -> PipelinePlan:
    """Bind the pipeline, and per kernel it calls: the shapes of its calls, its space, its legal combinations.

    Args:
        problem: the :class:`ucutlass.problem.Problem`.
        program: a :class:`ucutlass.ir.Program` with a pipeline (``pipeline``, or its only one); kernels may have
            open ``{…}`` choices.
        max_workloads: trials are measured on this many workloads spread over the pipeline's work.

    Raises:
        CheckError: the pipeline does not bind (positioned diagnostics). KeyError: no such pipeline.
        UcutError: a kernel has no legal combination for the shapes its calls see.
    """
    from ucutlass.bind import bind_pipeline

    binding = bind_pipeline(program, problem, pipeline)
    by_kernel: dict[str, list[Any]] = {}
    for kc in binding.kernel_calls():
        by_kernel.setdefault(kc.kernel.name, []).append(kc)
    kernels = []
    for name, calls in by_kernel.items():
        extents: list[dict[str, int]] = []
        for kc in calls:
            extents += [e for e in _extents(kc.binding) if e not in extents]
        shapes: dict[str, list[dict[str, Any]]] = {}
        for kc in calls:
            for w, s in zip(problem.workloads, kc.shapes):
                shapes.setdefault(w.uuid, []).append(dict(s))
        space = SearchSpace.of(program, name, extents)
        legal, rejected = [], {}
        for params in space.all_params():
            v = space.violations(params)
            if v:
                rejected[v[0].message] = rejected.get(v[0].message, 0) + 1
            else:
                legal.append(params)
        if not legal:
            reasons = "; ".join(f"{m} ({n}×)" for m, n in rejected.items())
            raise UcutError(f"no legal configuration of kernel {name} for the shapes pipeline "
                            f"{binding.pipeline.name} gives it: {reasons}")
        kernels_only = space.legal_params()
        if len(kernels_only) < len(legal):
            rejected["the same kernel as a combination listed before it (an auto setting resolves to it)"] = \
                len(legal) - len(kernels_only)
        kernels.append(KernelPlan(name, [kc.step for kc in calls], shapes, extents, space, kernels_only, rejected))
    if not kernels:
        raise UcutError(f"pipeline {binding.pipeline.name} calls no kernel: there is nothing to tune (grade it)")
    tuned = representative(problem.workloads, lambda w: sum(k.work(w.uuid) for k in kernels), max_workloads)
    return PipelinePlan(problem, program, binding.pipeline.name, binding, kernels, tuned, source_file)


__all__ = ["KernelPlan", "PipelinePlan", "plan_pipeline", "representative"]
