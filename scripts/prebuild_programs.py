"""Build every kernel of some `.ucut` programs, bound to their problems, into the kernel cache in one nvcc round.

Run on the device before grading compiled pipelines, so that `ucutlass grade` measures from its first second and
programs sharing a kernel share its build. Each argument is ``FILE:PROBLEM`` (a problem id or folder); a file with
no pipeline builds its kernels as written.

Usage: python3 scripts/prebuild_programs.py [--jobs N] FILE:PROBLEM [FILE:PROBLEM ...]
"""

from __future__ import annotations

import argparse
import sys
import time

from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem


def kernels_of(path: str, problem_id: str) -> list:
    """The concrete kernels ``path`` runs on ``problem_id`` (a pipeline's bound kernel calls, else its kernels)."""
    program = parse_file(path)
    if getattr(program, "pipelines", None):
        return [kc.bound_kernel for kc in bind_pipeline(program, find_problem(problem_id)).kernel_calls()]
    return list(program.kernels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="+", help="FILE:PROBLEM")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: the machine's cores)")
    args = ap.parse_args()
    kernels, seen = [], set()
    for item in args.programs:
        path, _, pid = item.rpartition(":")
        for k in kernels_of(path, pid):
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
