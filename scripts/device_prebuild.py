"""Build every legal configuration of a spec bound to a problem into the kernel cache, in one parallel nvcc round.

Run on the device before `ucutlass tune` (scripts/device_tune.sh) so that the search measures from the first
second instead of waiting for nvcc, and so that problems sharing a spec share the builds. The kernels built are
exactly the tuner's candidates (``plan(...).space.concrete(params)`` for each legal ``params``).

Usage: python3 scripts/device_prebuild.py PROBLEM SPEC [JOBS]
"""

from __future__ import annotations

import sys
import time

from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
from ucutlass.search import plan


def main() -> int:
    problem, spec = sys.argv[1], sys.argv[2]
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else None
    p = plan(find_problem(problem), parse_file(spec), source_file=spec)
    kernels, seen = [], set()
    for params in p.legal:
        k = p.space.concrete(params)
        if k.build_digest() not in seen:  # split_k, raster, swizzle: one build serves them all
            seen.add(k.build_digest())
            kernels.append(k)
    t0 = time.time()
    results = build_kernels(kernels, source_file=spec, jobs=jobs, timeout_s=600)
    failed = [(k, r) for k, r in zip(kernels, results) if not r.ok]
    for k, r in failed:
        print(f"FAIL {k.config_name()}: {r.error}")
    print(f"{spec} on {problem}: {len(kernels)} builds ({sum(r.cached for r in results)} cached, {len(failed)} failed) "
          f"in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
