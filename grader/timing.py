"""Timing: one loop for candidates and the reference alike (triton ``do_bench``'s structure).

Per call: flush the cache by zeroing a buffer larger than it, then time the call alone (CUDA events on
the GPU, ``time.perf_counter`` on the CPU). Warm up by time, then make a fixed number of timed calls
chosen from the warm-up estimate (≈ ``rep_ms`` of calls, at least ``min_reps``), rotating among a few
pre-generated input sets so a tiny problem is not timed from cache. The median is the latency; p20/p80
are its spread.

:func:`bench` runs inside the worker process (where the callable lives); :func:`latency_stats` runs in
the parent on the raw per-call times.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

#: Defaults: warm-up time, time of timed calls, bounds on the number of timed calls.
WARMUP_MS = 25.0
REP_MS = 100.0
MIN_REPS = 10
MAX_REPS = 10_000
#: The CPU cache flush writes this many bytes (the CPU path is for CI; there is no portable LLC query).
CPU_FLUSH_BYTES = 8 << 20
#: On CUDA the flush buffer is this many times the L2 size (at least 64 MiB).
L2_FLUSH_FACTOR = 2
MIN_CUDA_FLUSH_BYTES = 64 << 20


@dataclass(frozen=True)
class BenchParams:
    """How :func:`bench` warms up and how many calls it times."""

    warmup_ms: float = WARMUP_MS
    rep_ms: float = REP_MS
    min_reps: int = MIN_REPS
    max_reps: int = MAX_REPS


def flush_buffer(device):
    """A buffer whose zeroing evicts the cache: 2× L2 (≥ 64 MiB) on CUDA, 8 MiB on the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        nbytes = max(L2_FLUSH_FACTOR * l2, MIN_CUDA_FLUSH_BYTES)
    else:
        nbytes = CPU_FLUSH_BYTES
    return torch.empty(nbytes // 4, dtype=torch.int32, device=dev)


def reps_for(estimate_ms: float, params: BenchParams) -> int:
    """Number of timed calls: ≈ ``rep_ms`` worth of iterations of ``estimate_ms``, within bounds."""
    n = params.rep_ms / max(estimate_ms, 1e-6)
    return int(min(max(math.ceil(n), params.min_reps), params.max_reps))


def bench(call: Callable[[int], None], n_sets: int, device, flush, params: BenchParams,
          before: Callable[[int], None] | None = None) -> dict:
    """Time ``call(i)`` (``i`` selects an input set, rotated) after a warm-up by time.

    Args:
        call: runs the function on input set ``i``.
        n_sets: how many input sets to rotate among.
        device: ``torch.device``; CUDA uses events, anything else ``time.perf_counter``.
        flush: the buffer zeroed before each call (:func:`flush_buffer`).
        params: warm-up and repetition settings.
        before: run before each call's flush, outside the timed region (the grader re-poisons
            destination-passing outputs here, so a call that skips its work leaves NaN behind).

    Returns:
        ``{"times_ms": [...], "warmup_calls": n, "estimate_ms": per-iteration estimate}``.
    """
    import torch

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    clock = time.perf_counter
    # Warm-up by time: at least two iterations (the first absorbs one-time work), each synchronised, so
    # the wall time of an iteration (flush + call) estimates what the timed loop will cost.
    iters: list[float] = []
    t0 = clock()
    i = 0
    while i < 2 or (clock() - t0) * 1e3 < params.warmup_ms:
        s = clock()
        if before is not None:
            before(i % n_sets)
        flush.zero_()
        call(i % n_sets)
        sync()
        iters.append((clock() - s) * 1e3)
        i += 1
    warm = sorted(iters[1:])
    estimate = warm[len(warm) // 2]
    n = reps_for(estimate, params)
    if cuda:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for j in range(n):
            if before is not None:
                before(j % n_sets)
            flush.zero_()
            starts[j].record()
            call(j % n_sets)
            ends[j].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    else:
        times = []
        for j in range(n):
            if before is not None:
                before(j % n_sets)
            flush.zero_()
            s = clock()
            call(j % n_sets)
            times.append((clock() - s) * 1e3)
    return {"times_ms": times, "warmup_calls": i, "estimate_ms": estimate}


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of sorted values (numpy's default method)."""
    if not sorted_xs:
        return float("nan")
    pos = q * (len(sorted_xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class LatencyStats:
    """Median and spread of per-call times, in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    n: int

    def to_json(self) -> dict:
        return {"median_ms": self.median_ms, "p20_ms": self.p20_ms, "p80_ms": self.p80_ms, "n": self.n}


def latency_stats(times_ms: Sequence[float]) -> LatencyStats:
    """Median, p20 and p80 of ``times_ms``.

    Raises:
        ValueError: no times, or a time that is not a finite non-negative number.
    """
    xs = sorted(float(t) for t in times_ms)
    if not xs or not all(math.isfinite(t) and t >= 0 for t in xs):
        raise ValueError(f"bad timing data ({len(xs)} values)")
    return LatencyStats(quantile(xs, 0.5), quantile(xs, 0.2), quantile(xs, 0.8), len(xs))


__all__ = ["BenchParams", "bench", "flush_buffer", "reps_for", "quantile", "latency_stats", "LatencyStats",
           "WARMUP_MS", "REP_MS", "MIN_REPS", "MAX_REPS"]
