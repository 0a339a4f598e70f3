"""Host cost of one GEMM call from Python: a compiled ucutlass kernel against torch.matmul / F.linear.

Issue 13, item 5. N calls queue up behind a GPU busy-wait, so their wall time / N is what one call
costs the host: argument checks, the ctypes call, CUTLASS's can_implement/initialize (TMA descriptors) and
the launch for ucutlass; the dispatcher and cuBLAS's launch for torch. Median of 7 rounds of N calls each.

Usage (on the GPU machine): python3 scripts/host_overhead.py [OUT.json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from ucutlass.build import build_kernels
from ucutlass.lang import parse
from ucutlass.runtime import load_kernel

SPEC = """
kernel tiny : gemm {
  a : f16[M, K] row
  b : f16[N, K] row
  d : f16[M, N] row
  tile = 128x128x64
  schedule = cooperative
}
"""


def host_us(fn, n: int = 400, rounds: int = 7) -> dict:
    """Host microseconds per call: ``n`` calls back to back, wall time / n, median (and spread) of rounds.

    Each round first puts a GPU busy-wait of ~0.1 s on the stream (``torch.cuda._sleep``), so the calls only
    queue up behind it: their wall time is the host's alone, whatever each kernel takes on the GPU (n stays
    under the launch queue's depth of about 1000)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        torch.cuda._sleep(200_000_000)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    per.sort()
    return {"median_us": statistics.median(per), "min_us": per[0], "max_us": per[-1], "calls": n, "rounds": rounds}


def main() -> int:
    kernel = parse(SPEC, "tiny.ucut").kernel()
    (built,) = build_kernels([kernel], source_file="tiny.ucut")
    if not built.ok:
        print(built.error, built.log[-3000:])
        return 1
    k = load_kernel(built.so_path, kernel)
    m, n, kk = 8, 128, 128
    a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
    b = torch.randn(n, kk, device="cuda", dtype=torch.float16)
    d = torch.empty(m, n, device="cuda", dtype=torch.float16)
    k(a=a, b=b, d=d)
    torch.cuda.synchronize()
    err = (d.float() - a.float() @ b.float().T).abs().max().item()
    rows = {
        "ucutlass CompiledKernel(a=, b=, d=)": host_us(lambda: k(a=a, b=b, d=d)),
        "ucutlass CompiledKernel.call([a, b, d])": host_us(lambda: k.call([a, b, d])),
        "torch.matmul(a, b.T, out=d)": host_us(lambda: torch.matmul(a, b.T, out=d)),
        "torch.nn.functional.linear(a, b)": host_us(lambda: torch.nn.functional.linear(a, b)),
        "torch.empty(1) (floor: one dispatcher call)": host_us(lambda: torch.empty(1, device="cuda")),
    }
    out = {"shape": {"M": m, "N": n, "K": kk, "dtype": "float16"}, "max_abs_error": err,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "host_us_per_call": rows}
    print(json.dumps(out, indent=1))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
