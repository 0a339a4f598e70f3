"""Where the time of a decode GEMM goes on the H200: the L2 flush protocol, per-call events against CUDA graphs.

Issue 13, items 1 and 4. Every decode GEMM of FlashInfer-Bench_007/008 (M <= 64) took 17-25 us for cuBLAS and for
every ucutlass configuration alike (docs/benchmarks/2026-12-01-h200-gemm-small-m.md), for a weight read of 32 MiB
(7 us at the datasheet's 4.8 TB/s). This probe times the same calls under several protocols to say why:

- ``write``: the grader's protocol (grader/timing.py): zero a 2xL2 buffer, spin, event, call, event. The zeroing
  leaves L2 full of dirty lines, which the call's reads must write back to DRAM first.
- ``read``: read a 2xL2 buffer instead (L2 holds clean lines afterwards), spin, event, call, event.
- ``warm``: no flush at all (the weight stays in L2 when it fits).
- ``graph``: a CUDA graph of R x (zero the buffer, call), minus a graph of R x (zero the buffer), per call:
  no event or launch gaps inside the region.

Candidates: ``torch.matmul(a, w.T, out=d)`` (cuBLAS), a plain read of the weight (``w.sum()``: what any GEMM at
decode must at least do), Triton GEMV-like kernels (the weight streamed once, tl.dot on a 16-row A), and compiled
ucutlass swapped kernels when ``--ucutlass`` is given (built here).

Usage (GPU machine): python3 scripts/flush_probe.py OUT.json [--ucutlass] [--reps 200] [--build-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = {"007": (4096, 4096), "008": (4096, 14336)}  # FlashInfer-Bench_007/008: (N, K), f16
MS = (1, 16, 64)


def _median_us(xs):
    return statistics.median(xs) * 1e3


class Protocols:
    """The four timing protocols over one flush buffer of 2x L2 (as grader/timing.py sizes it)."""

    def __init__(self, reps: int):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buf = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device="cuda")
        self.reps = reps

    def events(self, fn, flush: str) -> float:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        for j in range(self.reps):
            if flush == "write":
                self.buf.zero_()
            elif flush == "read":
                self.buf.sum()
            torch.cuda._sleep(100_000)
            starts[j].record()
            fn()
            ends[j].record()
        torch.cuda.synchronize()
        return _median_us([s.elapsed_time(e) for s, e in zip(starts, ends)])

    def graph(self, fn, r: int = 20) -> float:
        """Per-call us from graph replays: R x (zero, call) minus R x (zero)."""
        def capture(with_call: bool):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(r):
                    self.buf.zero_()
                    if with_call:
                        fn()
            return g

        times = {}
        for with_call in (True, False):
            g = capture(with_call)
            g.replay()
            torch.cuda.synchronize()
            xs = []
            for _ in range(15):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                g.replay()
                e.record()
                torch.cuda.synchronize()
                xs.append(s.elapsed_time(e))
            times[with_call] = statistics.median(xs)
        return (times[True] - times[False]) / r * 1e3

    def all(self, fn) -> dict:
        out = {}
        for flush in ("write", "read", "warm"):
            out[flush] = self.events(fn, flush)
        try:
            out["graph"] = self.graph(fn)
        except Exception as exc:  # a candidate that cannot be captured (ctypes launch on the legacy stream)
            out["graph"] = None
            out["graph_error"] = str(exc)[:200]
        return out


def triton_gemv():
    """A GEMV-like Triton kernel: each program streams BLOCK_N rows of the weight over all of K once."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a_ptr, w_ptr, d_ptr, M, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr):
        pid = tl.program_id(0)
        offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = tl.arange(0, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :])
            a = tl.load(a_ptr + offs_m[:, None] * K + offs_k[None, :], mask=offs_m[:, None] < M, other=0.0)
            acc += tl.dot(a, tl.trans(w))
        tl.store(d_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16), mask=offs_m[:, None] < M)

    def make(a, w, d, block_n, block_k, warps, stages):
        m, k = a.shape
        n = w.shape[0]
        bm = max(16, triton.next_power_of_2(m))
        grid = (n // block_n,)
        return lambda: kernel[grid](a, w, d, m, n, k, BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_M=bm,
                                    num_warps=warps, num_stages=stages)

    return make


UCUT = """
kernel gemm : gemm {
  a : f16[M, K] row <- A   b : f16[N, K] row <- B   d : f16[M, N] row -> C
  accum = f32   tile = {128x16x128, 128x32x128}   cluster = {1x1x1, 2x1x1}
  schedule = cooperative   scheduler = {persistent, stream_k}   swap_ab = true
}
"""
PROBLEM = "FlashInfer-Bench_007_gemm_n4096_k4096"  # the binding decides `auto` settings; N, K are run-time extents


def ucutlass_candidates():
    """Compiled swapped kernels: (name, kernel IR, .so) for every legal combination of UCUT bound to PROBLEM, with
    split_k 1/2/4/8 and both reduction modes on the stream-K builds (one build serves every run-time knob)."""
    import dataclasses

    from ucutlass.build import build_kernels
    from ucutlass.ir import ReductionMode
    from ucutlass.lang import parse
    from ucutlass.problem import find_problem
    from ucutlass.search import plan

    p = plan(find_problem(PROBLEM), parse(UCUT, "probe.ucut"), source_file="probe.ucut")
    concrete = [p.space.concrete(params) for params in p.legal]
    t0 = time.time()
    built = build_kernels(concrete, source_file="probe.ucut", timeout_s=600)
    print(f"built {len(built)} in {time.time() - t0:.0f} s; failed {[b.name for b in built if not b.ok]}", flush=True)
    out = []
    for k, b in zip(concrete, built):
        if not b.ok:
            continue
        variants = [k]
        if "stream_k" in k.config_name():
            variants = [dataclasses.replace(k, split_k=s, reduction_mode=r) for s in (1, 2, 4, 8)
                        for r in (ReductionMode.deterministic, ReductionMode.nondeterministic)]
        for v in variants:
            out.append((f"{v.config_name()}_sk{v.split_k}_{v.reduction_mode.name}", v, b.so_path))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ucutlass", action="store_true")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--build-only", action="store_true", help="compile the ucutlass candidates and stop")
    args = ap.parse_args()
    if args.build_only:
        ucutlass_candidates()
        return 0
    torch.manual_seed(0)
    prot = Protocols(args.reps)
    make_gemv = triton_gemv()
    ucut = ucutlass_candidates() if args.ucutlass else []
    if ucut:
        from ucutlass.runtime import load_kernel
    rows = []

    def record(shape, m, name, fn, check=None):
        try:
            fn()
            torch.cuda.synchronize()
            err = check() if check else None
            r = {"shape": shape, "M": m, "candidate": name, "max_rel_err": err, **prot.all(fn)}
        except Exception as exc:
            r = {"shape": shape, "M": m, "candidate": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        rows.append(r)
        print(json.dumps(r), flush=True)

    for shape, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05
        record(shape, 0, "weight read (w.sum())", lambda: w.sum())
        record(shape, 0, "weight copy (d2d, read+write)", lambda: w.clone())
        for m in MS:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            d = torch.empty(m, n, device="cuda", dtype=torch.float16)
            ref = (a.float() @ w.float().T)

            def check():
                return ((d.float() - ref).abs().max() / ref.abs().max()).item()

            record(shape, m, "torch.matmul", lambda: torch.matmul(a, w.T, out=d), check)
            for bn, bk, warps, stages in ((16, 256, 4, 4), (16, 512, 4, 3), (32, 256, 4, 4), (32, 128, 4, 6),
                                          (64, 128, 4, 4), (8, 512, 4, 4)):
                if m > 64:
                    continue
                try:
                    fn = make_gemv(a, w, d, bn, bk, warps, stages)
                except Exception as exc:
                    rows.append({"shape": shape, "M": m, "candidate": f"triton bn{bn}", "error": str(exc)[:200]})
                    continue
                record(shape, m, f"triton gemv bn{bn} bk{bk} w{warps} s{stages}", fn, check)
            for name, kern, so in ucut:
                try:
                    launcher = load_kernel(so, kern)
                except Exception as exc:
                    rows.append({"shape": shape, "M": m, "candidate": name, "error": str(exc)[:200]})
                    continue
                record(shape, m, name, lambda launcher=launcher: launcher.call([a, w, d]), check)
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    # the short table: best of each family per (shape, M) and protocol
    for shape in SHAPES:
        for m in (0,) + MS:
            sel = [r for r in rows if r["shape"] == shape and r["M"] == m and "write" in r]
            for r in sorted(sel, key=lambda r: r["write"])[:6]:
                g = r.get("graph")
                print(f"{shape} M={m:3d} {r['candidate'][:60]:60s} write {r['write']:7.2f} read {r['read']:7.2f} "
                      f"warm {r['warm']:7.2f} graph {g if g is None else round(g, 2)} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
