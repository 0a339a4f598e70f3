"""Call 3: where L2_055's pipeline hit an illegal memory access (call 1: batch 29, in the grader's timing run).
``python3 repro_055.py MODE BATCH`` with MODE eager (each step synchronised, named as it runs) or graph (as the
grader calls it: two input sets, three calls each, CUDA-graph replays, each compared with the eager result).
A CUDA fault ends the process, so each mode runs in its own."""
import sys
from pathlib import Path

import torch

from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
import ucutlass.runtime as runtime
from ucutlass.solution import pipeline_solution

REPO = Path(__file__).resolve().parents[3]
mode, batch = sys.argv[1], int(sys.argv[2])
path = REPO / "examples/pipeline_conv_audio_encoder.ucut"
problem = find_problem("L2_055_audio_encoder_conv_positional_layer_stack")
program = parse_file(path)
calls = bind_pipeline(program, problem).kernel_calls()
kernels = {kc.bound_kernel.build_digest(): kc.bound_kernel for kc in calls}
built = build_kernels(list(kernels.values()), timeout_s=600)
sol = pipeline_solution({d: str(r.so_path) for d, r in zip(kernels, built)}, program.source, str(path), "p")
fn = runtime.load_solution(sol.payload, problem)
w = next(w for w in problem.workloads if problem.resolve_axes(w)["batch_size"] == batch)
sets = [problem.make_inputs(w, device="cuda", seed=s) for s in (1, 2)]
outs = [[torch.full(s, float("nan"), dtype=torch.bfloat16, device="cuda") for s in problem.output_shapes(w).values()]
        for _ in sets]
steps = fn.pipeline.pipeline.steps if hasattr(fn.pipeline, "pipeline") else None
if mode == "eager":
    def hook(i, when):
        torch.cuda.synchronize()
        print(f"step {i} {when}", flush=True)
    fn.on_step = hook
    for k in range(2):
        fn(*sets[k].values(), *outs[k])
        torch.cuda.synchronize()
        print(f"eager set {k}: ok, finite {bool(torch.isfinite(outs[k][0]).all())}", flush=True)
else:
    want = []
    for k in range(2):
        fn.fn(*sets[k].values(), *outs[k])
        torch.cuda.synchronize()
        want.append(outs[k][0].clone())
    print("eager calls ok", flush=True)
    for k in (0, 1, 0, 1):
        for j in range(3):
            outs[k][0].fill_(float("nan"))
            fn(*sets[k].values(), *outs[k])
            torch.cuda.synchronize()
            print(f"set {k} call {j}: replays {fn.replays} graphs {len(fn.graphs)} eager_reason {fn.eager_reason!r} "
                  f"equal {torch.equal(outs[k][0], want[k])}", flush=True)
print("done")
