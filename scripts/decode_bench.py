"""Decode GEMMs (M <= 64) on the FlashInfer-Bench problems: swapped narrow-tile kernels with split-K against
torch, graded by the grader (torch, the problem's run(), timed by the same grader in the same run).

Issue 13, item 1: does swapping AB (the weight's N on the MMA's 128 rows, the tokens on a narrow tile N) with
split-K stream the weight faster than cuBLAS at decode? Every legal configuration of SPEC (and the best
unswapped kernel of the 2026-12-01 tune, for comparison) is built once, then graded on a few decode workloads
of each problem. Writes one JSON record per (problem, workload, configuration) with the grader's median
latency, torch's and T_SOL (OUT.json at the end, OUT.jsonl as records come).

Usage (on the GPU machine): python3 scripts/decode_bench.py OUT.json PROBLEM [PROBLEM ...]
    [--m 1,16,64] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ucutlass.lang import parse
from ucutlass.problem import find_problem
from ucutlass.search import plan
from ucutlass.solution import solution_for

SPEC = """
kernel gemm : gemm {
  a : f16[M, K] row <- A
  b : f16[N, K] row <- B
  d : f16[M, N] row -> C
  accum     = f32
  tile      = {128x16x128, 128x32x128, 128x64x128}
  cluster   = {1x1x1, 2x1x1}
  schedule  = cooperative
  scheduler = {persistent, stream_k}
  split_k   = {1, 2, 4}
  swap_ab   = true
}
"""
# The best single configuration of the 2026-12-01 tune of FlashInfer-Bench_007 (not swapped).
BASELINE = """
kernel gemm : gemm {
  a : f16[M, K] row <- A
  b : f16[N, K] row <- B
  d : f16[M, N] row -> C
  accum = f32   tile = 64x128x64   cluster = 2x1x1   schedule = pingpong   scheduler = persistent   swap_ab = false
}
"""


def candidates(problem):
    """(name, kernel, concrete program) for every legal configuration of SPEC, then BASELINE."""
    out = []
    for text, file in ((SPEC, "decode_swap.ucut"), (BASELINE, "decode_baseline.ucut")):
        p = plan(problem, parse(text, file), source_file=file)
        for params in p.legal:
            kernel = p.space.concrete(params)
            out.append((kernel.config_name(), kernel, p.space.concrete_program(params), file))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--m", default="1,16,64")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    ms = {int(x) for x in args.m.split(",")}
    from ucutlass.build import build_kernels

    problems = [find_problem(p) for p in args.problems]
    cands = {p.id: candidates(p) for p in problems}
    kernels, seen = [], set()
    for p in problems:
        for _, k, prog, file in cands[p.id]:
            if k.build_digest() not in seen:  # split_k is given at run time: one build serves them all
                seen.add(k.build_digest())
                kernels.append((k, prog, file))
    print(f"{sum(len(c) for c in cands.values())} configurations, {len(kernels)} builds", flush=True)
    if args.dry_run:
        for name, *_ in cands[problems[0].id]:
            print(name)
        return 0
    t0 = time.time()
    results = build_kernels([k for k, _, _ in kernels], source_file="decode_bench",
                            sources=[prog.source for _, prog, _ in kernels], timeout_s=600)
    so = {k.build_digest(): r for (k, _, _), r in zip(kernels, results)}
    print(f"built in {time.time() - t0:.0f} s; failed: {[r.name for r in results if not r.ok]}", flush=True)
    from ucutlass.grader import Grader
    from ucutlass.sol import analyze, load_hardware

    hw = load_hardware("h200")
    records = []
    for p in problems:
        wls = [w for w in p.workloads if w.axes.get("M") in ms]
        t_sol = {w.uuid: analyze(p, w, hw).t_sol_ms for w in wls}
        with Grader(p, t_sol_ms=lambda w: t_sol.get(w.uuid)) as g:
            for name, kernel, prog, file in cands[p.id]:
                r = so[kernel.build_digest()]
                if not r.ok:
                    continue
                ref = solution_for(r.so_path, prog.source, file, kernel.name, name)
                for res in g.grade(ref, wls):
                    pr = res.performance
                    rec = {"problem": p.id, "M": res.axes.get("M"), "config": name, "status": res.status.value,
                           "latency_ms": pr.latency_ms if pr else None,
                           "torch_ms": pr.reference_latency_ms if pr else None,
                           "t_sol_ms": t_sol.get(res.workload_uuid),
                           "speedup": pr.speedup_factor if pr else None, "reason": res.reason[:200]}
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
                    with open(args.out + "l", "a") as f:  # OUT.jsonl: every record as it comes (a cut-off run)
                        f.write(json.dumps(rec) + "\n")
    with open(args.out, "w") as f:
        json.dump({"h200_spec": hw.name, "records": records}, f, indent=1)
    best = {}
    for r in records:
        if r["status"] == "PASSED":
            key = (r["problem"], r["M"])
            if key not in best or r["latency_ms"] < best[key]["latency_ms"]:
                best[key] = r
    for (pid, m), r in sorted(best.items()):
        print(f"{pid} M={m}: best {r['config']} {r['latency_ms'] * 1e3:.1f} us, torch {r['torch_ms'] * 1e3:.1f} us, "
              f"x{r['speedup']:.3f}, T_SOL {r['t_sol_ms'] * 1e3:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
