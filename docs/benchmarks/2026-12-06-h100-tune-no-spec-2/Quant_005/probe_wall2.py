"""Device probe 2: Quant_005's compiled pipeline under the grader's own timing loops (bench, wall), in-process:
does the wall loop alone show work the events miss? Graphs on, then off."""
import os, sys, time
import torch
from ucutlass.problem import find_problem
from ucutlass.lang import parse_file
from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.runtime import load_solution
from ucutlass.grader.timing import Primitives, bench, wall, flush_buffer, wall_spin_cycles, BenchParams

path, pid = sys.argv[1], sys.argv[2]
want = dict(kv.split("=") for kv in sys.argv[3:])
problem = find_problem(pid)
program = parse_file(path)
kernels = [kc.bound_kernel for kc in bind_pipeline(program, problem, None).kernel_calls()]
built = {k.build_digest(): str(r.so_path) for k, r in zip(kernels, build_kernels(kernels))}
fn = load_solution({"pipeline": None, "so_paths": built, "source": program.source, "file": path}, problem)
w = next(w for w in problem.workloads if all(str(w.axes.get(k)) == v for k, v in want.items()))
print("workload", w.axes)
sets = []
for i in range(4):
    ins = problem.make_inputs(w, device="cuda", seed=i)
    ref = problem.run_reference(ins)
    sets.append((list(ins.values()), [torch.empty_like(v) for v in ref.values()]))
prims = Primitives("cuda")
flush = flush_buffer("cuda")
def before(i):
    for o in sets[i][1]:
        prims.fill_(o, float("nan"))
def call(i):
    fn(*sets[i][0], *sets[i][1])
for graphs in ("1", "0"):
    os.environ["UCUTLASS_CUDA_GRAPHS"] = graphs
    out = bench(call, 4, torch.device("cuda"), flush, BenchParams(), before, None, prims)
    t = sorted(out["times_ms"]); med = t[len(t) // 2]
    spin = wall_spin_cycles(out["host_ms"])
    n = int(min(max(15.0 / max(out["estimate_ms"], 1e-3), 8), 2000))
    base = min(wall(None, 4, n, flush, before, prims, spin) for _ in range(3))
    cand = min(wall(call, 4, n, flush, before, prims, spin) for _ in range(3))
    base2 = min(wall(None, 4, n, flush, None, prims, spin) for _ in range(3))
    cand2 = min(wall(call, 4, n, flush, None, prims, spin) for _ in range(3))
    print(f"graphs={graphs}: events median {med*1e3:.1f} us, host {out['host_ms']*1e3:.1f} us, estimate "
          f"{out['estimate_ms']*1e3:.1f} us, spin {spin} cycles, n {n}; wall per call with before "
          f"{(cand-base)/n*1e3:.1f} us (base {base/n*1e3:.1f}), without before {(cand2-base2)/n*1e3:.1f} us; "
          f"replays {getattr(fn, 'replays', None)} eager_reason {getattr(fn, 'eager_reason', None)!r}")
