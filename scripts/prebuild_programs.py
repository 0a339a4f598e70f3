"""Build every kernel of some `.ucut` programs, bound to their problems, into the kernel cache in one nvcc round.

Run on the device before grading compiled pipelines, so that `ucutlass grade` measures from its first second and
programs sharing a kernel share its build. Each argument is ``FILE:PROBLEM`` (a problem id or folder); a file with
no pipeline builds its kernels as written. ``:PROBLEM`` (no file) is the program `ucutlass init` writes for it, as
`ucutlass tune PROBLEM` with no spec tunes it.

With ``--all``, open ``{…}`` choices are expanded: every legal combination of each kernel (the tuner's legal set:
:func:`ucutlass.search.pipeline_plan.plan_pipeline`, bound as its trials bind them), so that several problems' tunes
share one nvcc round instead of one round each.

Usage: python3 scripts/prebuild_programs.py [--jobs N] [--all] FILE:PROBLEM [FILE:PROBLEM ...]
"""

from __future__ import annotations

import argparse
import sys
import time

from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem


def load(path: str, problem_id: str):
    """``(program, source file name)``: ``path`` parsed, or (no path) the program ``ucutlass init`` writes."""
    if path:
        return parse_file(path), path
    from ucutlass.init import init_program
    from ucutlass.lang.syntax import parse

    name = f"{problem_id}.init.ucut"
    return parse(init_program(find_problem(problem_id)).text, name), name


def kernels_of(path: str, problem_id: str, every_legal: bool = False) -> list:
    """The concrete kernels ``path`` runs on ``problem_id`` (a pipeline's bound kernel calls, else its kernels);
    with ``every_legal``, those of every legal combination of its open choices."""
    program, source_file = load(path, problem_id)
    pipelined = bool(getattr(program, "pipelines", None))
    if every_legal and pipelined:
        from ucutlass.search.pipeline_plan import plan_pipeline
        from ucutlass.search.pipeline_tune import PipelineGraderMeasurer

        plan = plan_pipeline(find_problem(problem_id), program, source_file=source_file)
        combos = {k.name: k.legal for k in plan.kernels if k.is_open}
        measurer = PipelineGraderMeasurer(None, plan.problem, source_file, plan.pipeline)
        concrete = plan.concrete_program(plan.first_picks())
        fixed = [kc.bound_kernel for kc in bind_pipeline(concrete, plan.problem, plan.pipeline).kernel_calls()
                 if kc.kernel.name not in combos]
        return fixed + measurer.prebuilt(plan, combos)
    if every_legal and problem_id and len(program.kernels) == 1:
        # one kernel bound to the problem: the tuner's own plan, auto settings decided for the workloads' extents
        # (SearchSpace.concrete), so that the builds are the ones its trials load
        from ucutlass.search.planning import plan

        tp = plan(find_problem(problem_id), program, source_file=source_file)
        return [tp.space.concrete(params) for params in tp.legal]
    if every_legal:
        from ucutlass.arch import distinct_combinations, legal_combinations

        out = []
        for kernel in program.kernels:
            if not kernel.choices():
                out.append(kernel)
                continue
            legal, _ = legal_combinations(kernel)
            out += [kernel.resolve(picks) for picks in distinct_combinations(kernel, legal)]
        return out
    if pipelined:
        return [kc.bound_kernel for kc in bind_pipeline(program, find_problem(problem_id)).kernel_calls()]
    return list(program.kernels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="+", help="FILE:PROBLEM")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: the machine's cores)")
    ap.add_argument("--all", action="store_true", help="every legal combination of open choices (the tuner's)")
    args = ap.parse_args()
    kernels, seen = [], set()
    for item in args.programs:
        path, _, pid = item.rpartition(":")
        for k in kernels_of(path, pid, args.all):
            if k.build_digest() not in seen:
                seen.add(k.build_digest())
                kernels.append(k)
    print(f"{len(kernels)} kernels", flush=True)
    t0 = time.time()
    failed = 0
    for r in build_kernels(kernels, jobs=args.jobs, timeout_s=600):
        failed += not r.ok
        print(("ok  " if r.ok else "FAIL"), r.name, f"{r.seconds:.0f}s", "" if r.ok else (r.error, r.log[-1500:]),
              flush=True)
    print(f"{len(kernels)} kernels in {time.time() - t0:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
