"""Convolutions on the GPU: ucutlass conv kernels (CUTLASS SM90 implicit GEMM) against torch (cuDNN), bf16.

Run on the H200: ``python scripts/conv_bench.py --out docs/benchmarks/conv-DATE.md`` (about 5 minutes: one nvcc round
of every variant on the machine's cores, then the timings). Each row is a convolution with bias and GELU: ucutlass
runs it as one kernel (the epilogue fused), torch as ``F.convNd`` (cuDNN) plus ``F.gelu`` on the layout it runs
best (channels_last memory for 2-D and 3-D, contiguous NCW for 1-D, which has no channels-last format); the table
also gives cuDNN's conv alone. Every ucutlass result is checked against torch first (relative Frobenius error).
Timing: ``triton.testing.do_bench`` (median, L2 flushed between calls) when triton is importable, else CUDA events
around single calls with an L2 flush before each (median of 50). ratio = torch (conv + GELU) / best ucutlass (> 1:
ucutlass faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from ucutlass.build import build_kernels
from ucutlass.lang import parse
from ucutlass.runtime import load_kernel

#: (label, rank, N, spatial sizes, C, K, window, stride, padding, dilation)
ROWS = [
    ("Whisper base conv2 (B=1)", 1, 1, (3000,), 512, 512, (3,), 2, 1, 1),
    ("Whisper base conv2 (B=16)", 1, 16, (3000,), 512, 512, (3,), 2, 1, 1),
    ("Whisper large-v3 conv2 (B=8)", 1, 8, (3000,), 1280, 1280, (3,), 2, 1, 1),
    ("L2_055 conv1 80→5120 (B=16)", 1, 16, (3000,), 80, 5120, (3,), 1, 1, 1),
    ("L2_055 conv2 5120 (B=16)", 1, 16, (3000,), 5120, 5120, (3,), 2, 1, 1),
    ("ResNet 3x3 64 56x56 (B=32)", 2, 32, (56, 56), 64, 64, (3, 3), 1, 1, 1),
    ("ResNet 3x3 128 s2 56x56 (B=32)", 2, 32, (56, 56), 128, 128, (3, 3), 2, 1, 1),
    ("3x3 4096→3072 32x32 (B=1)", 2, 1, (32, 32), 4096, 3072, (3, 3), 1, 1, 1),
    ("3-D 3x3x3 128 16x32x32 (B=2)", 3, 2, (16, 32, 32), 128, 128, (3, 3, 3), 1, 1, 1),
    ("3-D 3x3x3 256 s2 16x32x32 (B=2)", 3, 2, (16, 32, 32), 256, 256, (3, 3, 3), 2, 1, 1),
]
VARIANTS = {"128x128_c1": "tile = 128x128x64", "128x128_c2": "tile = 128x128x64   cluster = 2x1x1",
            "64x128": "tile = 64x128x64", "128x64": "tile = 128x64x64"}
DIMS = {1: ("[N, W, C]", "[K, S, C]", "[N, Q, K]"), 2: ("[N, H, W, C]", "[K, R, S, C]", "[N, P, Q, K]"),
        3: ("[N, D, H, W, C]", "[K, T, R, S, C]", "[N, Z, P, Q, K]")}


def source(name: str, rank: int, stride: int, padding: int, dilation: int, settings: str) -> str:
    a, b, d = DIMS[rank]
    return (f"kernel {name} : conv {{ a : bf16{a}  b : bf16{b}  d : bf16{d}\n  stride = {stride}  padding = {padding}"
            f"  dilation = {dilation}  {settings}\n  epilogue {{ bias : bf16[K]  d = gelu(acc + bias) }} }}")


def bench(fn) -> float:
    """Median milliseconds of ``fn()``."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))
    except ImportError:
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
        for _ in range(5):
            fn()
        times = []
        for _ in range(50):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="the markdown table to write (a docs/benchmarks entry)")
    args = ap.parse_args()
    traversals = sorted({(r[1], r[7], r[8], r[9]) for r in ROWS})
    kernels = {}
    for rank, stride, padding, dilation in traversals:
        for vname, settings in VARIANTS.items():
            name = f"c{rank}d_s{stride}_p{padding}_d{dilation}_{vname.replace('x', '_')}"
            kernels[(rank, stride, padding, dilation, vname)] = parse(
                source(name, rank, stride, padding, dilation, settings)).kernel()
    results = build_kernels(list(kernels.values()), timeout_s=900)
    loaded = {}
    for key, r in zip(kernels, results):
        if r.ok:
            loaded[key] = load_kernel(r.so_path, kernels[key])
        else:
            print(f"build failed: {key}: {r.error}", file=sys.stderr)
    torch.manual_seed(0)
    records = []
    for label, rank, n, sizes, c, k, window, stride, padding, dilation in ROWS:
        conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
        x = torch.randn(n, *sizes, c, device="cuda").to(torch.bfloat16)
        w = (torch.randn(k, *window, c, device="cuda") * (c * torch.tensor(window).prod().item()) ** -0.5
             ).to(torch.bfloat16)
        bias = torch.randn(k, device="cuda").to(torch.bfloat16)
        xt, wt = x.movedim(-1, 1), w.movedim(-1, 1)  # channels-last memory, torch's logical NCHW order
        if rank > 1:
            fmt = torch.channels_last if rank == 2 else torch.channels_last_3d
            xt, wt = xt.contiguous(memory_format=fmt), wt.contiguous(memory_format=fmt)
        else:  # 1-D: torch has no channels-last format; give it contiguous NCW (no copy inside the timing)
            xt, wt = xt.contiguous(), wt.contiguous()

        def torch_call():
            return F.gelu(conv(xt, wt, bias, stride=stride, padding=padding, dilation=dilation))

        ref = torch_call().movedim(1, -1).float()
        rec = {"label": label, "shape": [n, *sizes, c, k, *window], "stride": stride, "padding": padding,
               "dilation": dilation, "flops": 2.0 * ref.numel() * c * torch.tensor(window).prod().item(),
               "torch_ms": bench(torch_call),
               "cudnn_conv_ms": bench(lambda: conv(xt, wt, bias, stride=stride, padding=padding, dilation=dilation)),
               "ucutlass_ms": {}, "rel_err": {}}
        out = torch.empty(ref.shape, device="cuda", dtype=torch.bfloat16)
        for vname in VARIANTS:
            kern = loaded.get((rank, stride, padding, dilation, vname))
            if kern is None:
                continue
            try:
                kern(a=x, b=w, d=out, bias=bias)
                torch.cuda.synchronize()
                rec["rel_err"][vname] = ((out.float() - ref).norm() / ref.norm()).item()
                rec["ucutlass_ms"][vname] = bench(lambda: kern(a=x, b=w, d=out, bias=bias))
            except Exception as e:  # noqa: BLE001 - a variant CUTLASS refuses for this shape
                rec.setdefault("errors", []).append(f"{vname}: {e}")
        records.append(rec)
        print(json.dumps(rec), flush=True)
        del x, w, xt, wt, out, ref
        torch.cuda.empty_cache()
    lines = ["# Convolutions on the H200: ucutlass (CUTLASS SM90 implicit GEMM) vs torch (cuDNN)", "",
             f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16, conv + bias + GELU. ucutlass: one "
             "kernel (NWC/NHWC/NDHWC, KRSC filter, the epilogue fused); torch: cuDNN (channels_last 2-D/3-D, NCW "
             "1-D), then GELU. ratio = torch / best ucutlass (> 1: ucutlass faster).", "",
             "| conv | stride | torch ms | cuDNN conv alone ms | best ucutlass ms (variant) | TFLOP/s | max rel err "
             "| ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        times = {v: t for v, t in r["ucutlass_ms"].items() if t}
        best = min(times, key=times.get) if times else None
        bt = times.get(best)
        lines.append(f"| {r['label']} | {r['stride']} | {r['torch_ms']:.3f} | {r['cudnn_conv_ms']:.3f} | "
                     + (f"{bt:.3f} ({best}) | {r['flops'] / (bt * 1e-3) / 1e12:.0f} | "
                        f"{max(r['rel_err'].values()):.1e} | {r['torch_ms'] / bt:.2f} |" if bt else "n/a | | | |"))
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
