"""Each conv stage of the L2_015 / L2_055 pipelines alone on the H200: the compiled kernel and torch (cuDNN, bf16)
against an fp64 conv, on the same bf16 input (torch's previous stage), to find where the pipeline's output parts
from the reference. Prints one line per (workload, stage): worst error of each, and where the kernel's worst is."""
import sys
import torch
import torch.nn.functional as F
from ucutlass.bind import bind_pipeline
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
from ucutlass.runtime import load_kernel

repo, pid, example, dims = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
prob = find_problem(pid)
b = bind_pipeline(parse_file(f"{repo}/examples/{example}"), prob)
convs = [kc for kc in b.kernel_calls() if kc.bound_kernel.family == "conv"]
res = build_kernels([kc.bound_kernel for kc in convs], jobs=4, timeout_s=600)
fns = [load_kernel(r.so_path, kc.bound_kernel) for kc, r in zip(convs, res)]
conv = F.conv2d if dims == 2 else F.conv1d
last = (lambda t: t.permute(0, 2, 3, 1)) if dims == 2 else (lambda t: t.transpose(1, 2))
for w in prob.workloads:
    torch.manual_seed(0)
    x = prob.make_inputs(w, device="cuda")
    names = [n for n in x if n.endswith("_weight") and "conv" in n and "out" not in n]
    h = x["input_features"] if dims == 1 else x["input_features"]
    for i, (wn, fn, kc) in enumerate(zip(names, fns, convs)):
        wt, bias = x[wn], x[wn.replace("weight", "bias")]
        stride = kc.bound_kernel.stride[0]
        ref = F.gelu(conv(h, wt, bias, stride=stride, padding=1))
        r64 = F.gelu(conv(h.double(), wt.double(), bias.double(), stride=stride, padding=1))
        a, f = last(h).contiguous(), last(wt).contiguous()
        if a.shape[-1] % 8:
            pad = 8 - a.shape[-1] % 8
            a, f = F.pad(a, [0, pad]).contiguous(), F.pad(f, [0, pad]).contiguous()
        out = torch.full(last(ref).shape, float("nan"), device="cuda", dtype=torch.bfloat16)
        fn(a=a, b=f, d=out, bias=bias)
        torch.cuda.synchronize()
        e_k = (out.double() - last(r64)).abs()
        e_t = (last(ref).double() - last(r64)).abs()
        tol = 0.02 + 0.02 * last(r64).abs()
        bad_k, bad_t = (e_k > tol), (e_t > tol)
        where = tuple(int(v) for v in torch.nonzero(e_k == e_k.max())[0].tolist())
        per_axis = [int(bad_k.sum(dim=[d for d in range(bad_k.dim()) if d != ax]).nonzero().numel())
                    for ax in range(bad_k.dim())]
        print(f"{dict(w.axes)} stage {i} stride {stride} in {tuple(a.shape)} -> {tuple(out.shape)}: "
              f"kernel max err {e_k.max().item():.4g} (bad {bad_k.double().mean().item():.4%}, nan "
              f"{out.isnan().sum().item()}), torch max err {e_t.max().item():.4g} (bad "
              f"{bad_t.double().mean().item():.4%}); kernel worst at {where}; distinct bad indices per axis "
              f"{per_axis} of {tuple(out.shape)}", flush=True)
        h = ref
    del x
    torch.cuda.empty_cache()
