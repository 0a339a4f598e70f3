"""Prebuild every bound kernel of the pipeline examples (one parallel nvcc round) into the default cache."""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/tests")
import test_pipeline_programs as t
from ucutlass.bind import bind_pipeline
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
kernels, seen = [], set()
for path, pid in t.ALL:
    prog = parse_file(str(path))
    b = bind_pipeline(prog, find_problem(pid, [t.SHARED_SOL_EXECBENCH]))
    for kc in b.kernel_calls():
        k = kc.bound_kernel
        if k.build_digest() not in seen:
            seen.add(k.build_digest()); kernels.append(k)
print(len(kernels), "kernels", flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "--list":
    sys.exit(0)
extra = []
for f in sys.argv[3:]:
    extra.append(parse_file(f).kernel())
from ucutlass.build import build_kernels
t0 = time.time()
rs = build_kernels(kernels + extra, jobs=int(sys.argv[2]), timeout_s=600)
for r in rs:
    print(("ok  " if r.ok else "FAIL"), r.name, f"{r.seconds:.0f}s", "" if r.ok else (r.error, r.log[-1500:]))
print(f"{len(rs)} kernels in {time.time()-t0:.0f} s")
