"""The tuner's real builder and measurer: nvcc through the kernel cache, and the grader on the GPU."""

from __future__ import annotations

from typing import Callable, Sequence

from ucutlass.build import BuildResult, build_kernels
from ucutlass.grader import Grader, SolutionRef
from ucutlass.ir import Program
from ucutlass.problem import Workload
from ucutlass.solution import dispatch_solution, solution_for

from .study import Candidate, Outcome


class NvccBuilder:
    """Builds candidates in parallel nvcc processes through the content-addressed cache."""

    def __init__(self, source_file: str, jobs: int | None = None, timeout_s: float = 600.0,
                 on_done: Callable[[BuildResult], None] | None = None):
        self.source_file, self.jobs, self.timeout_s, self.on_done = source_file, jobs, timeout_s, on_done

    def __call__(self, candidates: Sequence[Candidate]) -> list[BuildResult]:
        return build_kernels([c.kernel for c in candidates], source_file=self.source_file,
                             sources=[c.program.source for c in candidates], jobs=self.jobs,
                             timeout_s=self.timeout_s, on_done=self.on_done)


class GraderMeasurer:
    """Grades candidates with :class:`ucutlass.grader.Grader` (one spawned worker, reused across trials)."""

    def __init__(self, grader: Grader, source_file: str):
        self.grader, self.source_file = grader, source_file

    def reference_ms(self, workload: Workload) -> float:
        return self.grader.reference_ms(workload)

    def __call__(self, candidate: Candidate, workloads: Sequence[Workload]) -> list[Outcome]:
        ref = solution_for(candidate.build.so_path, candidate.program.source, self.source_file,
                           candidate.kernel.name, candidate.kernel.config_name())
        return self._grade(ref, workloads)

    def dispatch(self, program: Program, builds: Sequence[BuildResult], workloads: Sequence[Workload]
                 ) -> list[Outcome]:
        """Grade a dispatch program (:meth:`ucutlass.ir.Program.dispatch`, its kernels built in ``builds``) as one
        solution."""
        kernels = program.dispatch()
        ref = dispatch_solution({k.name: b.so_path for k, b in zip(kernels, builds)}, program.source,
                                self.source_file, "dispatch:" + "+".join(k.name for k in kernels))
        return self._grade(ref, workloads)

    def _grade(self, ref: SolutionRef, workloads: Sequence[Workload]) -> list[Outcome]:
        results = self.grader.grade(ref, list(workloads))
        by_uuid = {w.uuid: w for w in workloads}
        return [Outcome(workload=by_uuid[r.workload_uuid], status=str(r.status), latency_ms=r.latency_ms,
                        reference_ms=r.reference_latency_ms, t_sol_ms=r.t_sol_ms, message=r.reason,
                        record=r.to_json()) for r in results]
