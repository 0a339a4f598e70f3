"""Timing: one loop for candidates and the reference alike (triton ``do_bench``'s structure).

Per call: prepare the input set (outside the timed region: fresh input contents, re-poisoned outputs,
persisting L2 reset), flush the cache by zeroing a buffer larger than it, then time the call alone (CUDA
events on the current stream on the GPU, ``time.perf_counter`` on the CPU). Warm up by time, then make a
fixed number of timed calls chosen from the warm-up estimate (≈ ``rep_ms`` of calls, at least
``min_reps``), rotating among a few input sets so a tiny problem is not timed from cache. The median is
the latency; p20/p80 are its spread. One random timed call per set has its outputs copied out and checked.

Why a GPU-side spin before each start mark: with a flush of ~35 µs and a host path of similar length
(prepare, flush launch, Python call), the GPU can drain its queue and wait for the host's launch inside
the timed region, so a 10 µs kernel measured 20–60 µs of host time, differently on every run. A short
``torch.cuda._sleep`` after the flush keeps the GPU busy while the host enqueues the start mark and the
call, so the events measure the call's GPU time. It costs ~50 µs per timed call, outside the region.

Why events and no synchronisation inside the timed region: a host-side ``synchronize`` before the end
mark adds the host's wake-up latency (~10 µs) to every call and would distort the 5–20 µs decode GEMMs
the tuner cares about. Events see only work ordered on the current stream, so work a candidate hides on
another stream, or enqueues after returning, would escape them; :func:`wall` is the separate check: a
batch of (prepare, flush, call, device-wide synchronize) iterations, and the same batch without the
call, timed by the *parent* with its own clock. Their difference per call is what the call really cost
on all streams; the grader compares it with the events' median (UNTIMED_WORK when they disagree).

:func:`bench` and :func:`wall` run inside the worker process (where the callable lives), with the
primitives bound at start-up (:class:`Primitives`); :func:`latency_stats` runs in the parent.
"""

from __future__ import annotations

import math
import random
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
#: GPU clock cycles of the spin before each timed call (~50 µs at the H200's 1.98 GHz boost clock; longer
#: at lower clocks): more than one host iteration of the timed loop.
SPIN_CYCLES = 100_000
#: The wall check's spin covers up to this many times the default (see :func:`wall_spin_cycles`).
MAX_WALL_SPIN_FACTOR = 4


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


class Primitives:
    """The clock, synchronisation, events and flush used for timing, bound once, before candidate code.

    A candidate that replaces ``torch.cuda.Event.elapsed_time``, ``time.perf_counter`` or
    ``torch.Tensor.zero_`` changes nothing here: events are recorded and read through the C base class's
    methods (``torch._C._CudaEventBase``, an immutable type), the flush through ``torch._C.TensorBase``'s
    ``zero_``, the device synchronised through ``torch._C._cuda_synchronize``. The worker makes one of
    these at start-up; the :class:`~ucutlass.grader.guards.Integrity` guard reports any such patch.
    """

    def __init__(self, device):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.clock = time.perf_counter
        tensor_base = torch.Tensor.__mro__[1]  # torch._C.TensorBase
        self.zero_ = tensor_base.zero_
        self.fill_ = tensor_base.fill_
        self.copy_ = tensor_base.copy_
        if self.cuda:
            event_base = torch.cuda.Event.__mro__[1]  # torch._C._CudaEventBase
            self._Event = torch.cuda.Event
            self._record = event_base.record
            self._elapsed = event_base.elapsed_time
            self._current_stream = torch.cuda.current_stream
            self._sync = torch._C._cuda_synchronize
            self.spin = torch.cuda._sleep  # busy-waits the GPU for a number of cycles (a tiny kernel)
            self._set_device = torch._C._cuda_setDevice
            self._index = self.device.index if self.device.index is not None else torch.cuda.current_device()

    def sync(self) -> None:
        """Wait for all work on all streams of the device (nothing to do on the CPU)."""
        if self.cuda:
            self._set_device(self._index)
            self._sync()

    def event(self):
        return self._Event(enable_timing=True)

    def stream(self):
        return self._current_stream(self._index)

    def record(self, event, stream) -> None:
        self._record(event, stream)

    def elapsed_ms(self, start, end) -> float:
        return float(self._elapsed(start, end))


def _snapshot_plan(n: int, n_sets: int) -> dict[int, int]:
    """One random timed call per input set whose outputs are checked: {call index: set index}."""
    rng = random.SystemRandom()
    plan = {}
    for k in range(n_sets):
        calls = range(k, n, n_sets)
        if len(calls):
            plan[calls[rng.randrange(len(calls))]] = k
    return plan


def bench(call: Callable[[int], None], n_sets: int, device, flush, params: BenchParams,
          before: Callable[[int], None] | None = None, after: Callable[[int, int], None] | None = None,
          prims: Primitives | None = None) -> dict:
    """Time ``call(i)`` (``i`` selects an input set, rotated) after a warm-up by time.

    Args:
        call: runs the function on input set ``i``.
        n_sets: how many input sets to rotate among.
        device: ``torch.device``; CUDA uses events, anything else ``time.perf_counter``.
        flush: the buffer zeroed before each call (:func:`flush_buffer`).
        params: warm-up and repetition settings.
        before: run before each call's flush, outside the timed region (the grader rescales the set's
            inputs and re-poisons destination-passing outputs here).
        after: ``after(j, i)`` runs after timed call ``j`` on set ``i`` for one random timed call per set,
            once the device is synchronised (its end mark is already recorded): the grader copies those
            outputs out to be checked.
        prims: the bound timing primitives (:class:`Primitives`); made here when not given.

    Returns:
        ``{"times_ms": [...], "warmup_calls": n, "estimate_ms": per-iteration estimate,
        "snapshots": [[set, timed call index], ...]}``.
    """
    p = prims if prims is not None else Primitives(device)
    clock, zero_ = p.clock, p.zero_
    # Warm-up by time: at least two iterations (the first absorbs one-time work), each synchronised, so
    # the wall time of an iteration (flush + call) estimates what the timed loop will cost.
    iters: list[float] = []
    t0 = clock()
    i = 0
    while i < 2 or (clock() - t0) * 1e3 < params.warmup_ms:
        s = clock()
        if before is not None:
            before(i % n_sets)
        zero_(flush)
        call(i % n_sets)
        p.sync()
        iters.append((clock() - s) * 1e3)
        i += 1
    warm = sorted(iters[1:])
    estimate = warm[len(warm) // 2]
    n = reps_for(estimate, params)
    plan = _snapshot_plan(n, n_sets) if after is not None else {}
    host: list[float] = []  # seconds each call took to return (its host path; CUDA only)
    if p.cuda:
        starts = [p.event() for _ in range(n)]
        ends = [p.event() for _ in range(n)]
        for j in range(n):
            k = j % n_sets
            if before is not None:
                before(k)
            zero_(flush)
            p.spin(SPIN_CYCLES)  # the host runs ahead while the GPU spins: no host time in the region
            stream = p.stream()
            p.record(starts[j], stream)
            h = clock()
            call(k)
            host.append(clock() - h)
            p.record(ends[j], stream)
            if j in plan:
                p.sync()
                after(j, k)  # type: ignore[misc]
        p.sync()
        times = [p.elapsed_ms(s, e) for s, e in zip(starts, ends)]
    else:
        times = []
        for j in range(n):
            k = j % n_sets
            if before is not None:
                before(k)
            zero_(flush)
            s = clock()
            call(k)
            times.append((clock() - s) * 1e3)
            if j in plan:
                after(j, k)  # type: ignore[misc]
    host_ms = sorted(host)[len(host) // 2] * 1e3 if host else 0.0
    return {"times_ms": times, "warmup_calls": i, "estimate_ms": estimate, "host_ms": host_ms,
            "snapshots": [[k, j] for j, k in sorted(plan.items())]}


def spin_cycles(host_ms: float, cover: float, max_factor: float) -> int:
    """GPU clock cycles of a spin that covers ``cover`` times a call's host path (``host_ms``, ms): at least
    :data:`SPIN_CYCLES`, at most ``max_factor`` times it. Cycles per ms: SPIN_CYCLES is ~50 µs at the H200's
    1.98 GHz boost clock (a slower clock only lengthens the spin)."""
    per_ms = SPIN_CYCLES / 0.05
    return int(min(max(SPIN_CYCLES, cover * host_ms * per_ms), max_factor * SPIN_CYCLES))


def wall_spin_cycles(host_ms: float) -> int:
    """GPU spin of the wall check's loops: enough to cover the call's host path (its median time to return,
    measured by :func:`bench`) one and a half times, so that host time the events never see (the timed loop
    runs ahead of the GPU) is not taken for work hidden from them; at least :data:`SPIN_CYCLES`, at most
    :data:`MAX_WALL_SPIN_FACTOR` times it (:func:`spin_cycles`).

    Measured on the H200 (docs/benchmarks/2026-12-05-h200-fmha.md): a compiled pipeline's host path under a busy
    host (12 nvcc beside the grader) outgrew the default spin plus the flush (~0.1 ms) and its excess was
    reported as untimed work.
    """
    return spin_cycles(host_ms, 1.5, MAX_WALL_SPIN_FACTOR)


def wall(call: Callable[[int], None] | None, n_sets: int, n: int, flush,
         before: Callable[[int], None] | None, prims: Primitives, spin_cycles: int = SPIN_CYCLES,
         host: list[float] | None = None) -> float:
    """``n`` iterations of (before, flush, spin, call, device-wide synchronisation); returns milliseconds.

    With ``call=None`` the same loop without the call: the baseline the parent subtracts. The parent
    times the whole request with its own clock; this return value is only a diagnostic. ``spin_cycles``: the
    same in both loops (:func:`wall_spin_cycles`). ``host``: when given, each call's time to return (seconds) is
    appended (a diagnostic: a host path longer here than in :func:`bench` outruns the spin).
    """
    p = prims
    p.sync()
    t0 = p.clock()
    for j in range(n):
        k = j % n_sets
        if before is not None:
            before(k)
        p.zero_(flush)
        if p.cuda:
            # The same spin as in bench(): the call's host path (a Triton or ctypes launch, tens of µs)
            # overlaps GPU work in both loops, so the difference is what the call cost the GPU, on all streams.
            p.spin(spin_cycles)
        if call is not None:
            h = p.clock()
            call(k)
            if host is not None:
                host.append(p.clock() - h)
        p.sync()
    return (p.clock() - t0) * 1e3


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


__all__ = ["BenchParams", "Primitives", "bench", "wall", "flush_buffer", "reps_for", "quantile", "latency_stats",
           "LatencyStats",
           "WARMUP_MS", "REP_MS", "MIN_REPS", "MAX_REPS"]
