"""Prebuild every bound kernel of the three conv pipeline examples (one parallel nvcc round) into the cache."""
import sys, time
sys.path.insert(0, sys.argv[1] + "/tests")
import test_conv_programs as t
from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
kernels, seen = [], set()
for path, pid, *_ in t.PROGRAMS:
    b = bind_pipeline(parse_file(str(path)), find_problem(pid, [t.SHARED_SOL_EXECBENCH]))
    for kc in b.kernel_calls():
        k = kc.bound_kernel
        if k.build_digest() not in seen:
            seen.add(k.build_digest()); kernels.append(k)
print(len(kernels), "kernels", flush=True)
t0 = time.time()
for r in build_kernels(kernels, jobs=int(sys.argv[2]), timeout_s=600):
    print(("ok  " if r.ok else "FAIL"), r.name, f"{r.seconds:.0f}s", "" if r.ok else (r.error, r.log[-1500:]))
print(f"{len(kernels)} kernels in {time.time()-t0:.0f} s")
