"""Host cost of one GEMM call from Python: a compiled ucutlass kernel (``KernelLauncher.call``) against
``torch.matmul(..., out=)`` (issue 13, item 5).

A small problem (M=16, N=K=512, f16: about 3 µs on the GPU) is launched ``--calls`` times in a row without
synchronizing; the GPU finishes each call sooner than the host issues the next, so wall time / calls is the host's
cost per call (Python, argument checks, ctypes, the launch). Median of ``--repeats`` runs.

Usage (GPU machine, after ``. scripts/device_setup.sh``): python3 scripts/host_overhead.py OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

UCUT = """
kernel host_probe : gemm {
  a : f16[M, K] row   b : f16[N, K] row   d : f16[M, N] row
  accum = f32   tile = 128x128x64   cluster = 1x1x1   schedule = cooperative
}
"""


def per_call_us(fn, calls: int, repeats: int) -> tuple[float, list[float]]:
    """Median host µs per call over ``repeats`` runs of ``calls`` back-to-back calls (synchronized around)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        xs.append((t1 - t0) / calls * 1e6)
    return statistics.median(xs), xs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()

    from ucutlass.build import build_kernels
    from ucutlass.lang import parse
    from ucutlass.runtime import load_kernel

    kernel = parse(UCUT, "host_probe.ucut").kernel()
    (built,) = build_kernels([kernel], source_file="host_probe.ucut", timeout_s=600)
    if not built.ok:
        print(built.error, built.log[-2000:])
        return 1
    launcher = load_kernel(built.so_path, kernel)
    m, n, k = 16, 512, 512
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    launcher.call([a, b, d])
    torch.cuda.synchronize()
    err = ((d.float() - a.float() @ b.float().T).abs().max() / (a.float() @ b.float().T).abs().max()).item()
    rows = {}
    for name, fn in (("torch.matmul(a, b.T, out=d)", lambda: torch.matmul(a, b.T, out=d)),
                     ("torch.nn.functional.linear(a, b)", lambda: torch.nn.functional.linear(a, b)),
                     ("ucutlass KernelLauncher.call([a, b, d])", lambda: launcher.call([a, b, d]))):
        med, xs = per_call_us(fn, args.calls, args.repeats)
        rows[name] = {"median_us": med, "min_us": min(xs), "max_us": max(xs)}
        print(f"{name:45s} {med:7.2f} µs/call (min {min(xs):.2f}, max {max(xs):.2f})", flush=True)
    base = rows["torch.matmul(a, b.T, out=d)"]["median_us"]
    for r in rows.values():
        r["vs_torch_matmul"] = r["median_us"] / base
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [m, n, k],
                   "max_rel_err": err, "calls": args.calls, "repeats": args.repeats, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
