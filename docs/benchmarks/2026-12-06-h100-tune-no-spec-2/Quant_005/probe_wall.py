"""Device probe: why does Quant_005's compiled pipeline fail the grader's wall check at M=1024?
Loads the program as the grader does (DPS CudaGraphed), then: graph state, host time per call, the CUDA runtime
calls one call makes (torch.profiler), and the wall loop with and without the call."""
import json, sys, time, os
import torch
from ucutlass.problem import find_problem
from ucutlass.lang import parse_file
from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.runtime import load_solution

path, pid = sys.argv[1], sys.argv[2]
want = dict(kv.split("=") for kv in sys.argv[3:])
problem = find_problem(pid)
program = parse_file(path)
kernels = [kc.bound_kernel for kc in bind_pipeline(program, problem, None).kernel_calls()]
built = {k.build_digest(): str(r.so_path) for k, r in zip(kernels, build_kernels(kernels))}
fn = load_solution({"pipeline": None, "so_paths": built, "source": program.source, "file": path}, problem)
for w in problem.workloads:
    if all(str(w.axes.get(k)) == v for k, v in want.items()):
        break
print("workload", w.axes)
ins = problem.make_inputs(w, device="cuda", seed=0)
outs_meta = problem.output_shapes(w) if hasattr(problem, "output_shapes") else None
ref = problem.run_reference(ins)
outs = [torch.empty_like(v) for v in ref.values()]
args = [v for v in ins.values()] + outs
for i in range(5):
    fn(*args)
torch.cuda.synchronize()
print("eager_reason:", repr(getattr(fn, "eager_reason", None)), "replays:", getattr(fn, "replays", None),
      "graphs:", len(getattr(fn, "graphs", {})))
for o, (n, r) in zip(outs, ref.items()):
    print(n, "max abs diff", (o.float() - r.float()).abs().max().item())
# host time per call
hs = []
for i in range(50):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(*args); hs.append(time.perf_counter() - t)
hs.sort(); print("host us per call: median %.1f p90 %.1f max %.1f" % (hs[25]*1e6, hs[45]*1e6, hs[-1]*1e6))
# wall per call, back to back, synced each
ws = []
for i in range(50):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(*args); torch.cuda.synchronize(); ws.append(time.perf_counter() - t)
ws.sort(); print("wall us per synced call: median %.1f" % (ws[25]*1e6))
# events
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ev = []
for i in range(50):
    s.record(); fn(*args); e.record(); torch.cuda.synchronize(); ev.append(s.elapsed_time(e) * 1e3)
ev.sort(); print("events us per call: median %.1f" % ev[25])
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(10):
        fn(*args)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
torch.cuda.set_sync_debug_mode("warn")
fn(*args)
torch.cuda.set_sync_debug_mode(0)
# the same with graphs off
os.environ["UCUTLASS_CUDA_GRAPHS"] = "0"
hs = []
for i in range(50):
    torch.cuda.synchronize(); t = time.perf_counter(); fn(*args); hs.append(time.perf_counter() - t)
hs.sort(); print("eager host us per call: median %.1f" % (hs[25]*1e6))
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(10):
        fn(*args)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
