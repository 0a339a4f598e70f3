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
    ("L2_078 3x3 4096→3072 32x32 (B=32)", 2, 32, (32, 32), 4096, 3072, (3, 3), 1, 1, 1),
    ("L2_078 3x3 3072→3072 32x32 (B=32)", 2, 32, (32, 32), 3072, 3072, (3, 3), 1, 1, 1),
    ("3-D 3x3x3 128 16x32x32 (B=2)", 3, 2, (16, 32, 32), 128, 128, (3, 3, 3), 1, 1, 1),
    ("3-D 3x3x3 256 s2 16x32x32 (B=2)", 3, 2, (16, 32, 32), 256, 256, (3, 3, 3), 2, 1, 1),
]
VARIANTS = {"128x128_c1": "tile = 128x128x64", "128x128_c2": "tile = 128x128x64   cluster = 2x1x1",
            "64x128": "tile = 64x128x64", "128x64": "tile = 128x64x64",
            # 2026-12-04: for the compute-bound rows (CUTLASS's SM90 conv runs one MMA warpgroup, not persistent:
            # a wider or deeper tile per CTA, or a cluster along N, is what is left to try)
            "128x192": "tile = 128x192x64", "64x256_c2": "tile = 64x256x64   cluster = 2x1x1",
            "128x128x128": "tile = 128x128x128", "128x128_c1x2": "tile = 128x128x64   cluster = 1x2x1"}
#: The default variants (those of the 2026-12-02 run); ``--variants all`` builds every one.
DEFAULT_VARIANTS = ("128x128_c1", "128x128_c2", "64x128", "128x64")
#: The explicit-im2col alternative (``--im2col``): the window unfolded by torch (a copy, timed with the call),
#: then one persistent cooperative GEMM (two MMA warpgroups, which the SM90 conv kernel cannot use) with the
#: same bias + GELU epilogue.
IM2COL_VARIANTS = {"im2col_128x256_c2": "tile = 128x256x64   cluster = 2x1x1   schedule = cooperative",
                   "im2col_128x128": "tile = 128x128x64   schedule = cooperative"}
DIMS = {1: ("[N, W, C]", "[K, S, C]", "[N, Q, K]"), 2: ("[N, H, W, C]", "[K, R, S, C]", "[N, P, Q, K]"),
        3: ("[N, D, H, W, C]", "[K, T, R, S, C]", "[N, Z, P, Q, K]")}


def source(name: str, rank: int, stride: int, padding: int, dilation: int, settings: str) -> str:
    a, b, d = DIMS[rank]
    return (f"kernel {name} : conv {{ a : bf16{a}  b : bf16{b}  d : bf16{d}\n  stride = {stride}  padding = {padding}"
            f"  dilation = {dilation}  {settings}\n  epilogue {{ bias : bf16[K]  d = gelu(acc + bias) }} }}")


def im2col_source(name: str, settings: str) -> str:
    return (f"kernel {name} : gemm {{ a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row\n  {settings}\n"
            "  epilogue { bias : bf16[N]  d = gelu(acc + bias) } }")


def im2col(x: torch.Tensor, window, stride: int, padding: int) -> torch.Tensor:
    """``x`` [N, *spatial, C] (channels last) unfolded to [N·outputs, window·C] (window dims, then C: the
    order of a [K, *window, C] filter flattened); a copy. Dilation 1."""
    rank = x.dim() - 2
    x = F.pad(x, [0, 0] + [padding] * (2 * rank))
    for i, w in enumerate(window):
        x = x.unfold(1 + i, w, stride)  # [N, out..., C, win...] once every spatial dim is unfolded
    x = x.permute(0, *range(1, rank + 1), *range(rank + 2, 2 * rank + 2), rank + 1)
    return x.reshape(-1, int(torch.tensor(window).prod().item()) * x.shape[-1])


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
    ap.add_argument("--rows", default="", help="only rows whose label contains one of these comma-separated texts")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"comma-separated variants of {sorted(VARIANTS)}, or 'all'")
    ap.add_argument("--im2col", action="store_true", help="also time im2col (a torch copy) + one GEMM per row")
    ap.add_argument("--build-only", action="store_true", help="build the kernels into the cache and stop")
    args = ap.parse_args()
    rows = [r for r in ROWS if not args.rows or any(t in r[0] for t in args.rows.split(","))]
    variants = {v: VARIANTS[v] for v in (VARIANTS if args.variants == "all" else args.variants.split(","))}
    traversals = sorted({(r[1], r[7], r[8], r[9]) for r in rows})
    kernels = {}
    for vname, settings in (IM2COL_VARIANTS.items() if args.im2col else ()):
        kernels[vname] = parse(im2col_source(vname, settings)).kernel()
    for rank, stride, padding, dilation in traversals:
        for vname, settings in variants.items():
            name = f"c{rank}d_s{stride}_p{padding}_d{dilation}_{vname.replace('x', '_')}"
            kernels[(rank, stride, padding, dilation, vname)] = parse(
                source(name, rank, stride, padding, dilation, settings)).kernel()
    results = build_kernels(list(kernels.values()), timeout_s=900)
    if args.build_only:
        for key, r in zip(kernels, results):
            print(("ok  " if r.ok else "FAIL"), key, f"{r.seconds:.0f}s", "" if r.ok else r.error, flush=True)
        return 0 if all(r.ok for r in results) else 1
    loaded = {}
    for key, r in zip(kernels, results):
        if r.ok:
            loaded[key] = load_kernel(r.so_path, kernels[key])
        else:
            print(f"build failed: {key}: {r.error}", file=sys.stderr)
    torch.manual_seed(0)
    records = []
    for label, rank, n, sizes, c, k, window, stride, padding, dilation in rows:
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
        for vname in (IM2COL_VARIANTS if args.im2col and dilation == 1 else ()):
            kern = loaded.get(vname)
            if kern is None:
                continue
            w2 = w.reshape(k, -1)  # [K, window·C]: a view
            o2 = out.view(-1, k)

            def im2col_call(kern=kern, w2=w2, o2=o2):
                kern(a=im2col(x, window, stride, padding), b=w2, d=o2, bias=bias)
            try:
                im2col_call()
                torch.cuda.synchronize()
                rec["rel_err"][vname] = ((out.float() - ref).norm() / ref.norm()).item()
                rec["ucutlass_ms"][vname] = bench(im2col_call)
            except Exception as e:  # noqa: BLE001
                rec.setdefault("errors", []).append(f"{vname}: {e}")
        for vname in variants:
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
    names = sorted({v for r in records for v in r["ucutlass_ms"]})
    lines += ["", "Every variant, ms (— not built or refused):", "",
              "| conv | cuDNN conv alone | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in records:
        lines.append(f"| {r['label']} | {r['cudnn_conv_ms']:.3f} | " + " | ".join(
            f"{r['ucutlass_ms'][v]:.3f}" if r["ucutlass_ms"].get(v) else "—" for v in names) + " |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(records, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
