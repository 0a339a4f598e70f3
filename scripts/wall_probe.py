"""Where the grader's wall-clock check spends its µs (issue 16: a 29 µs pipeline failed UNTIMED_WORK on the H200).

The check (grader/timed.py ``Grader._wall``, grader/timing.py ``wall``) times batches of (flush, spin, call,
device-wide sync) with and without the call and compares the per-call difference with the events' median
(grader/timing.py ``bench``: the same flush and spin, events around the call, no sync between calls). This runs
both loops, with the grader's own primitives, on honest calls of growing host cost:

- ``kernel``: one tiny torch kernel (``x.add_(1)``) — a bare launch;
- ``graph1`` / ``graph8``: a CUDA graph of 1 / 8 such kernels, replayed (what compiled pipelines do);
- ``eager8``: the same 8 kernels launched one by one;
- ``host50``: one kernel after 50 µs of Python busy-work on the host (a slow host path).

For each: events' median (ms), wall per call (ms), escaped = wall − events, and the check's allowance (grader/guards.py
``wall_verdict``). Writes OUT/wall_probe.md and OUT/wall_probe.json.

    python scripts/wall_probe.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    import torch

    from grader.guards import wall_verdict
    from grader.timing import BenchParams, Primitives, bench, wall

    prims = Primitives("cuda")
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    x = torch.zeros(1024, device="cuda")

    def graph_of(k: int):
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(k):
                x.add_(1)
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                for _ in range(k):
                    x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        return g

    g1, g8 = graph_of(1), graph_of(8)

    def host50(_):
        t = time.perf_counter() + 50e-6
        while time.perf_counter() < t:
            pass
        x.add_(1)

    calls = {
        "kernel": lambda _: x.add_(1),
        "graph1": lambda _: g1.replay(),
        "graph8": lambda _: g8.replay(),
        "eager8": lambda _: [x.add_(1) for _ in range(8)],
        "host50": host50,
    }
    params = BenchParams()
    records, lines = [], ["# Wall-clock check probe (scripts/wall_probe.py)", "",
                          f"torch {torch.__version__}, {torch.cuda.get_device_name()}; {args.calls} calls per wall "
                          "batch, best of 5 batches each way.", "",
                          "| call | events median ms | wall per call ms | escaped ms | allowed ms | ok |",
                          "|---|---|---|---|---|---|"]
    for name, call in calls.items():
        times = sorted(bench(call, 1, torch.device("cuda"), flush, params, prims=prims)["times_ms"])
        median = times[len(times) // 2]
        base, cand = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            wall(None, 1, args.calls, flush, None, prims)
            base.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            wall(call, 1, args.calls, flush, None, prims)
            cand.append((time.perf_counter() - t0) * 1e3)
        per_call = max(min(cand) - min(base), 0.0) / args.calls
        ok, escaped, allowed = wall_verdict(per_call, median, "cuda")
        rec = {"call": name, "events_median_ms": median, "wall_per_call_ms": per_call,
               "escaped_ms": escaped, "allowed_ms": allowed, "ok": ok, "base_ms": base, "cand_ms": cand}
        records.append(rec)
        lines.append(f"| {name} | {median:.4f} | {per_call:.4f} | {escaped:.4f} | {allowed:.4f} | {ok} |")
        print(json.dumps(rec), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "wall_probe.md").write_text("\n".join(lines) + "\n")
    (out / "wall_probe.json").write_text(json.dumps(records, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
