"""The timing of a grade: the reference's and the candidate's timing runs, their checked calls, the wall-clock check.

:class:`TimedCalls` is mixed into :class:`~ucutlass.grader.grader.Grader`; with it go the input sets rotated among
in timing (:class:`_TimingSet`), the replay of the worker's timing loop from its reply
(:func:`replay_timing_loop`), and the charge of time that escaped the events (:func:`charge_escaped`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Mapping, Sequence

from ucutlass.problem import Workload

from .digest import changed as digest_changed
from .guards import wall_chargeable, wall_verdict
from .sandbox import own_run_delay_seconds, run_delay_seconds
from .inputs import rescalable, rescale, rescale_factor
from .results import Performance, Status
from .solutions import SolutionRef, reference_solution
from .timing import BenchParams, LatencyStats, latency_stats, reps_for
from .trials import ErrorTally, Failure, is_tensor, modified_inputs, raw_bits, tensor_nbytes
from .worker_handle import Worker

#: Input sets rotated among in timing, at most, and the memory they may take together.
ROTATE = 4
ROTATE_BYTES = 1 << 30
#: The wall-clock check: each batch lasts about WALL_MS (within the call-count bounds), WALL_REPEATS
#: batches with and without the call, the fastest of each kept.
WALL_MS = 15.0
WALL_REPEATS = 3
#: Rounds of the wall-clock check before UNTIMED_WORK (see Grader._wall).
WALL_ATTEMPTS = 3
WALL_MIN_CALLS = 8
WALL_MAX_CALLS = 2000


def charge_escaped(perf: Performance, escaped_ms: float) -> Performance:
    """``perf`` with ``escaped_ms`` (the wall check's time per call outside the events) added to the candidate's
    median, p20 and p80, and its speedup recomputed: what it pays in the wall check's charge zone."""
    latency = perf.latency_ms + escaped_ms
    return dataclasses.replace(
        perf, latency_ms=latency, latency_p20_ms=perf.latency_p20_ms + escaped_ms,
        latency_p80_ms=perf.latency_p80_ms + escaped_ms,
        speedup_factor=perf.reference_latency_ms / latency if latency > 0 else math.inf)


def _sol_score(t_kernel_ms: float, t_baseline_ms: float, t_sol_ms: float | None) -> float | None:
    if t_sol_ms is None:
        return None
    try:
        from ucutlass.sol import sol_score
    except ImportError:
        return None
    try:
        score = sol_score(t_kernel_ms, t_baseline_ms, t_sol_ms)
    except ValueError:  # a non-positive time: no score rather than a failed grade
        return None
    return None if score is None or not math.isfinite(score) else float(score)


@dataclasses.dataclass
class _TimingSet:
    """One rotated input set: private inputs (parent only), shared base and working copies, output and
    check buffers, and which inputs are rescaled before each call."""

    private: dict[str, Any] | None
    base: list[Any]
    work: list[Any]
    outputs: list[Any]
    check: list[Any]
    rescaled: list[int]
    names: list[str] = dataclasses.field(default_factory=list)  # the inputs' names, in order

    def named_base(self) -> dict[str, Any]:
        return dict(zip(self.names, self.base))

    def payload(self) -> dict:
        return {"base": self.base, "work": self.work, "outputs": self.outputs, "check": self.check}


class TimedCalls:
    """The timing part of :class:`~ucutlass.grader.grader.Grader`, which this class is mixed into (it is never
    used alone).

    It uses the Grader's settings ``problem``, ``device``, ``params``, ``rotate``, ``rescale_inputs``,
    ``timeout_s``, ``wall_check`` and ``t_sol_ms``, and its ``_ref_times`` (the reference's times, cached) and
    ``_digest``; its methods ``seed_of``, ``_make_inputs``, ``_share``, ``_outputs``, ``_sync``, ``_collect``,
    ``_problem_request``, ``_ask``, ``_reply_failure`` and ``_discard``; and, of
    :class:`~ucutlass.grader.trials.CorrectnessTrials`, ``_keeps_copy``, ``_input_bytes`` and ``_judge``.
    """

    def _timing_sets(self, workload: Workload, purpose: str, solution: str | None,
                     keep_private: bool) -> list[_TimingSet]:
        """Pre-generated input sets (shared base and working copies), poisoned output and check buffers.

        Up to ``rotate`` sets, fewer when they would pass 1 GiB together.
        """
        import torch

        sets: list[_TimingSet] = []
        n = self.rotate
        i = 0
        while i < n:
            priv = self._make_inputs(workload, self.seed_of(i, workload, purpose, solution))
            base, work, rescaled = [], [], []
            for j, v in enumerate(priv.values()):
                if not is_tensor(v):
                    base.append(v)
                    work.append(v)
                    continue
                b = self._share(v.detach().clone())
                base.append(b)
                if self.rescale_inputs and rescalable(v):
                    work.append(self._share(torch.empty_like(b)))
                    rescaled.append(j)
                else:
                    work.append(b)
            outs, check = self._outputs(workload), self._outputs(workload)
            if i == 0:
                copies = 2 + int(keep_private)
                nbytes = sum(tensor_nbytes(v) for v in priv.values()) * copies + sum(tensor_nbytes(o) for o in outs) * 2
                n = max(1, min(self.rotate, ROTATE_BYTES // max(nbytes, 1)))
            sets.append(_TimingSet(priv if keep_private else None, base, work, outs, check, rescaled, list(priv)))
            del priv
            i += 1
        self._sync()
        return sets

    def _plan(self, workload: Workload, purpose: str, solution: str | None, sets: Sequence[_TimingSet]) -> dict:
        return {"seed": self.seed_of(0, workload, purpose + "-rescale", solution),
                "rescale": [list(s.rescaled) for s in sets]}

    # --- timing of the reference -----------------------------------------------------------------------

    def _reference_stats(self, workload: Workload) -> LatencyStats:
        cached = self._ref_times.get(workload.uuid)
        if cached is not None:
            return cached
        ref = reference_solution(self.problem)
        what = f"timing the reference on {workload.label()}"
        self._problem_request({"op": "load", "solution": ref}, what)
        sets = self._timing_sets(workload, "reference-timing", None, keep_private=False)
        # One call first: its time sets the timing run's deadline, as a candidate's correctness calls do.
        r = self._problem_request({"op": "call", "key": ref.key(), "inputs": sets[0].base,
                                   "outputs": sets[0].outputs}, what)
        r = self._problem_request({"op": "bench", "key": ref.key(), "sets": [s.payload() for s in sets],
                                   "params": dataclasses.asdict(self.params),
                                   "plan": self._plan(workload, "reference-timing", None, sets)},
                                  what, self._bench_timeout(float(r.data.get("wall_ms", 0.0))))
        del sets
        self._collect()
        stats = latency_stats(r.data["times_ms"])
        self._ref_times[workload.uuid] = stats
        return stats

    def _bench_timeout(self, call_ms: float) -> float:
        p = self.params
        expected_s = (p.warmup_ms + p.rep_ms) / 1e3 + (p.min_reps + 2 + self.rotate) * call_ms / 1e3
        return self.timeout_s + 3.0 * expected_s

    # --- timing ----------------------------------------------------------------------------------------

    def _timing(self, worker: Worker, solution: SolutionRef, wl: Workload, nonce: str, call_ms: float,
                tally: ErrorTally, checks: dict, stage: dict, logs: list[str]) -> Performance:
        """The reference's time, the candidate's timing run with its checked calls, the wall-clock check."""
        ref_stats = self._reference_stats(wl)
        key = solution.key()
        in_place = not self._keeps_copy(self._input_bytes(wl))  # no private copies: keyed checksums of the bases
        sets = self._timing_sets(wl, "timing", nonce, keep_private=not in_place)
        sums = [self._digest.of_all(s.named_base()) for s in sets] if in_place else []
        plan = self._plan(wl, "timing", nonce, sets)
        r = self._ask(worker, {"op": "bench", "key": key, "sets": [s.payload() for s in sets],
                            "params": dataclasses.asdict(self.params), "plan": plan},
                           self._bench_timeout(call_ms))
        if not r.ok:
            raise self._reply_failure(r, "timing")
        logs.append(r.log)
        data = r.data
        snaps = {i: [c.clone() for c in s.check] for i, s in enumerate(sets)}  # copied out at once
        self._sync()
        uses, bad = replay_timing_loop(data, len(sets), self.params)
        if bad:
            raise Failure(Status.TAMPERED, f"timing: the worker's reply is inconsistent with the timing loop: {bad}",
                        discard=True)
        checks["l2_persisting_resets"] = int(data.get("l2_persisting_resets", 0) or 0)
        try:
            stats = latency_stats(data.get("times_ms", []))
        except ValueError as e:
            raise Failure(Status.RUNTIME_ERROR, f"timing: {e}", with_correctness=True) from None
        for i, s in enumerate(sets):  # inputs as the last timed call left them (before wall batches move on)
            if in_place:
                changed = self._moved_in_place(s, sums[i], rescale_factor(plan["seed"], i, uses["final"][i]))
            else:
                seen = {name: (rescale(v, rescale_factor(plan["seed"], i, uses["final"][i])) if j in s.rescaled
                               else v) for j, (name, v) in enumerate(s.private.items())}  # type: ignore[union-attr]
                changed = modified_inputs(s.private, s.base) + [f"{n} (working copy)" for n in
                                                          modified_inputs(seen, s.work, only=s.rescaled)]
            if changed:
                raise Failure(Status.INPUT_MODIFIED, f"timing: the candidate changed input(s) {', '.join(changed)}")
        wall = self._wall(worker, key, float(data.get("estimate_ms", 0.0)), stats.median_ms, logs) \
            if self.wall_check else None
        if wall is not None:
            wall["host_ms"] = float(data.get("host_ms", 0.0))  # the call's median host path: sets the spin
        if in_place:  # the bases are the inputs the reference runs on: the candidate's process is stopped first
            self._discard("candidate", replace=True)
            self._collect()
            for i, s in enumerate(sets):
                moved = digest_changed(sums[i], self._digest.of_all(s.named_base()))
                if moved:
                    raise Failure(Status.INPUT_MODIFIED, f"timing: the candidate changed input(s) {', '.join(moved)} "
                                "during the wall-clock check (seen by keyed checksums)")
                s.work = []  # the working copies, given back before the reference's inputs are made
        # Only now do expected outputs exist (no candidate code runs after this): every checked timed call.
        for i, use in sorted(uses["snapshots"].items()):
            s = sets[i]
            src = s.private if s.private is not None else s.named_base()
            seen = {name: (rescale(v, rescale_factor(plan["seed"], i, use)) if j in s.rescaled else v)
                    for j, (name, v) in enumerate(src.items())}
            stage["timed_sets"] += 1
            self._judge(snaps[i], seen, wl, wl.tolerance, tally, f"timed call {uses['calls'][i]} on set {i}",
                        in_place=in_place)
            del seen
        del sets, snaps
        self._collect()
        t_sol = self._t_sol(wl, logs)
        perf = Performance(
            latency_ms=stats.median_ms, latency_p20_ms=stats.p20_ms, latency_p80_ms=stats.p80_ms,
            reference_latency_ms=ref_stats.median_ms,
            speedup_factor=ref_stats.median_ms / stats.median_ms if stats.median_ms > 0 else math.inf,
            t_sol_ms=t_sol, sol_score=None, timed_calls=stats.n, reference_latency_p20_ms=ref_stats.p20_ms,
            reference_latency_p80_ms=ref_stats.p80_ms, reference_timed_calls=ref_stats.n)
        if wall is not None:
            checks["wall"] = wall
            escaped, allowed = wall["escaped_ms"], wall["allowed_ms"]
            measured = (f"the parent's wall clock measured {wall['per_call_ms']:.4g} ms per call over all streams, "
                        f"the events only {stats.median_ms:.4g} ms ({escaped:.4g} ms escaped; {allowed:.4g} ms "
                        "allowed)" + (f"; the call took {wall['call_host_ms']:.4g} ms to return in these loops, "
                                      f"{wall['host_ms']:.4g} ms in the timed loop"
                                      if wall.get("call_host_ms") is not None else ""))
            if not wall["ok"] and wall_chargeable(escaped, allowed, stats.median_ms):
                # Close to the events: charged at the wall clock's time, not failed (guards.wall_chargeable).
                wall["charged_ms"] = escaped
                perf = charge_escaped(perf, escaped)
                logs.append(f"timing: latency charged {escaped:.4g} ms per call: {measured}")
            elif not wall["ok"]:
                raise Failure(Status.UNTIMED_WORK, f"timing: {measured}: work on another stream, work left after the "
                            "call returned, or forged times", with_correctness=True, performance=perf, discard=True)
        faster = t_sol is not None and perf.latency_ms < t_sol
        if not faster:
            perf = dataclasses.replace(perf, sol_score=_sol_score(perf.latency_ms, ref_stats.median_ms, t_sol))
        return perf

    def _moved_in_place(self, s: _TimingSet, sums: dict[str, int], factor: float) -> list[str]:
        """Inputs of a timing set without a private copy that the candidate changed: a base whose checksum
        moved, a rescaled working copy that is not its base times ``factor`` (compared one input at a time)."""
        import torch

        out = digest_changed(sums, self._digest.of_all(s.named_base()))
        for j in s.rescaled:
            if not out and not torch.equal(raw_bits(rescale(s.base[j], factor)), raw_bits(s.work[j])):
                out.append(f"{s.names[j]} (working copy)")
        return out

    def _wall(self, worker: Worker, key: str, estimate_ms: float, event_median_ms: float,
              logs: list[str]) -> dict:
        """Batches of (prepare, flush[, call], device-wide sync) timed with this process's clock.

        Load: a batch's time is what this clock measured *less the time the worker was preempted* (its
        run delay, which the kernel counts: :func:`.sandbox.run_delay_seconds` — of the main thread, which
        runs the loop, on CUDA; of all threads on the CPU, where torch's intra-op threads share the call)
        *and less this thread's own* (:func:`.sandbox.own_run_delay_seconds`: woken by the reply, it waits
        for a CPU too: with 2 spinners per core, 2–3 of 7 honest solutions failed on the H200 without it).
        A machine busy compiling (a tune does) preempts the worker for whole time slices, ms at a time; that
        is host noise, not work, and the kernel's own count of it cannot be forged by the candidate. What is
        left — a slower host path — comes and goes too: up to WALL_ATTEMPTS rounds, the first that agrees
        with the events ends the check; work hidden from the events is there in every round, so only a
        disagreement in all rounds is UNTIMED_WORK.
        """
        n = int(min(max(math.ceil(WALL_MS / max(estimate_ms, 1e-3)), WALL_MIN_CALLS), WALL_MAX_CALLS))
        timeout = self.timeout_s + 3.0 * n * max(estimate_ms, 0.0) / 1e3
        threads = self.device.type != "cuda"
        rounds = []
        preempted_total = 0.0
        for _ in range(WALL_ATTEMPTS):
            base, cand, hosts = [], [], []
            for _ in range(WALL_REPEATS):
                for with_call, into in ((False, base), (True, cand)):
                    d0 = run_delay_seconds(worker.pid, threads) if worker.pid else None
                    own0 = own_run_delay_seconds()
                    t0 = time.perf_counter()
                    r = self._ask(worker, {"op": "wall", "key": key, "n": n, "call": with_call}, timeout)
                    dt = (time.perf_counter() - t0) * 1e3
                    own1 = own_run_delay_seconds()
                    d1 = run_delay_seconds(worker.pid, threads) if worker.pid else None
                    if not r.ok:
                        raise self._reply_failure(r, "wall-clock check")
                    if r.log.strip():
                        logs.append(r.log)
                    preempted = max((d1 - d0) * 1e3, 0.0) if d0 is not None and d1 is not None else 0.0
                    # This thread's own wait for a CPU after the reply woke it (a time slice under load).
                    preempted += max((own1 - own0) * 1e3, 0.0) if own0 is not None and own1 is not None else 0.0
                    preempted_total += preempted
                    into.append(max(dt - preempted, 0.0))
                    if with_call and r.data.get("call_host_ms") is not None:
                        hosts.append(float(r.data["call_host_ms"]))
            per_call = max(min(cand) - min(base), 0.0) / n
            # A diagnostic, not part of the verdict: the gap between the two fastest baseline batches per call, what
            # this clock resolves (Quant_005's 19 µs graph replay "escaped" 4.5-8.6 µs over 0.35-0.47 ms baseline
            # iterations on an H100). Widening the bound by it waits for a GPU run of the side-stream cheat test.
            fastest = sorted(base)
            noise = (fastest[1] - fastest[0]) / n if len(fastest) > 1 else 0.0
            ok, escaped, allowed = wall_verdict(per_call, event_median_ms, self.device.type)
            # the call's median time to return in these loops: longer than the spin covers, it shows as escaped
            rounds.append({"baseline_ms": min(base), "with_calls_ms": min(cand), "per_call_ms": per_call,
                           "noise_ms": noise, "call_host_ms": min(hosts) if hosts else None,
                           "escaped_ms": escaped, "allowed_ms": allowed, "ok": ok})
            if ok:
                break
        best = min(rounds, key=lambda r: r["escaped_ms"])  # the round that agreed, else the closest one
        return {"calls": n, "batches": WALL_REPEATS, **best, "event_median_ms": event_median_ms,
                "rounds": len(rounds), "preempted_ms": preempted_total}

    def _t_sol(self, wl: Workload, logs: list[str]) -> float | None:
        if self.t_sol_ms is None:
            return None
        try:
            t = self.t_sol_ms(wl)
            return float(t) if t is not None and float(t) > 0 else None
        except Exception as e:  # a T_SOL model that fails leaves the measurement standing
            logs.append(f"T_SOL unavailable: {type(e).__name__}: {e}")
            return None


def replay_timing_loop(data: Mapping[str, Any], n_sets: int, params: BenchParams) -> tuple[dict, str]:
    """What the timing loop must have done, from the numbers the worker reported, and whether they agree.

    Returns:
        ``({"final": {set: last use}, "snapshots": {set: use}, "calls": {set: call}}, problem or '')``.
    """
    times = data.get("times_ms")
    warm = data.get("warmup_calls")
    est = data.get("estimate_ms")
    counts = data.get("counts")
    if not isinstance(times, list) or not isinstance(warm, int) or not isinstance(est, (int, float)) \
            or not isinstance(counts, list):
        return {}, "fields missing"
    n = len(times)
    if warm < 2:
        return {}, f"{warm} warm-up calls"
    want = reps_for(float(est), params)
    if n != want:
        return {}, f"{n} timed calls where the warm-up estimate {est:.4g} ms gives {want}"
    warm_uses = [len(range(k, warm, n_sets)) for k in range(n_sets)]
    final = {k: warm_uses[k] + len(range(k, n, n_sets)) - 1 for k in range(n_sets)}
    if list(counts) != [final[k] + 1 for k in range(n_sets)]:
        return {}, f"set preparations {counts} where the loop makes {[final[k] + 1 for k in range(n_sets)]}"
    snaps: dict[int, int] = {}
    calls: dict[int, int] = {}
    for item in data.get("snapshots") or []:
        k, j = int(item[0]), int(item[1])
        if not (0 <= k < n_sets and 0 <= j < n and j % n_sets == k) or k in snaps:
            return {}, f"checked call {item} is not a timed call of its set"
        snaps[k] = warm_uses[k] + j // n_sets
        calls[k] = j
    missing = [k for k in range(n_sets) if len(range(k, n, n_sets)) and k not in snaps]
    if missing:
        return {}, f"no checked call on set(s) {missing}"
    return {"final": final, "snapshots": snaps, "calls": calls}, ""
