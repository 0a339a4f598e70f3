"""The grader: checks a solution against a problem's reference and times both, one workload at a time.

Trust boundary: the parent (this process) generates inputs, runs the reference, allocates and poisons the
output buffers and compares; the candidate runs in a spawned worker process (:mod:`.worker`) that sees
only shared inputs and the output buffers it must write. The reference is timed in a second worker of
its own through the same path (so candidate code never shares a process with the reference's timing),
and its time is cached per workload for the grader's lifetime. Workers persist across ``grade()`` calls
and solutions; a worker that crashes or hangs is killed and replaced.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import math
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ucutlass.problem import Problem, Workload, torch_dtype

from .check import compare, empty_poisoned
from .errors import GraderError
from .results import Correctness, Performance, Status, WorkloadResult, collect_environment
from .solutions import SolutionRef, reference_solution
from .timing import MAX_REPS, MIN_REPS, REP_MS, WARMUP_MS, BenchParams, LatencyStats, latency_stats
from .worker import Reply, Worker

#: Default limit for one request to a worker (a load, one correctness call, one timing run's base).
TIMEOUT_S = 60.0
#: Starting a worker (spawn, import torch, set up the device) may take this long.
START_TIMEOUT_S = 180.0
#: Input sets rotated among in timing, at most, and the memory they may take together.
ROTATE = 4
ROTATE_BYTES = 1 << 30
#: A result's log keeps at most this many characters (its start and its end).
LOG_CHARS = 16000

_LIVE: "weakref.WeakSet[Grader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before multiprocessing's own atexit joins the (non-daemonic) workers
    for g in list(_LIVE):
        g.close()


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


class Grader:
    """Grades solutions of one problem: correctness over several trials, then timing and SOL scores.

    Args:
        problem: the loaded :class:`~ucutlass.problem.Problem`.
        device: ``"cuda"`` (or ``"cuda:N"``) or ``"cpu"``; default CUDA when available.
        trials: correctness trials per workload, each with fresh inputs (default 3).
        seed: base seed; a trial's inputs come from :meth:`seed_of`.
        warmup_ms: warm-up time before timed calls.
        rep: milliseconds of timed calls to aim for (triton's ``rep``); at least ``min_reps`` calls.
        timeout_s: limit for one request to a worker (loading the solution, one correctness call; a
            timing run gets this plus its expected length). Past it the worker is killed: TIMEOUT.
        t_sol_ms: ``T_SOL`` of a workload in ms (or None when unknown), for SOL scores.
        progress: called with an event dict after each workload
            (``{"event": "workload", "solution", "workload", "label", "index", "total", "status",
            "latency_ms", "result"}``).
        rotate: input sets rotated among in timing (fewer when they would exceed 1 GiB).
        min_reps / max_reps: bounds on the number of timed calls.
        start_timeout_s: limit for starting a worker.
        fresh_worker: start a new candidate worker for every solution (stronger isolation between
            candidates, slower); by default one worker serves solution after solution.

    Example:
        >>> with Grader(find_problem("gemm_bias")) as g:                      # doctest: +SKIP
        ...     results = g.grade(solution_from_file("mine.py"))
        ...     print(format_table(results))

    Note:
        Workers are started with the *spawn* method, so a script that creates a Grader needs the usual
        ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, problem: Problem, *, device: str | None = None, trials: int = 3, seed: int = 0,
                 warmup_ms: float = WARMUP_MS, rep: float = REP_MS, timeout_s: float = TIMEOUT_S,
                 t_sol_ms: Callable[[Workload], float | None] | None = None,
                 progress: Callable[[dict], Any] | None = None, rotate: int = ROTATE,
                 min_reps: int = MIN_REPS, max_reps: int = MAX_REPS, start_timeout_s: float | None = None,
                 fresh_worker: bool = False):
        import torch

        if trials < 1:
            raise GraderError(f"trials must be at least 1, got {trials}")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dev = torch.device(device)
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise GraderError(f"device {device!r} asked for, but CUDA is not available")
            dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        elif dev.type != "cpu":
            raise GraderError(f"device {device!r}: the grader runs on 'cuda' or 'cpu'")
        self.problem = problem
        self.device = dev
        self.trials = int(trials)
        self.seed = int(seed)
        self.params = BenchParams(warmup_ms=float(warmup_ms), rep_ms=float(rep), min_reps=int(min_reps),
                                  max_reps=int(max_reps))
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s if start_timeout_s is not None
                                     else max(START_TIMEOUT_S, timeout_s))
        self.t_sol_ms = t_sol_ms
        self.progress = progress
        self.rotate = max(1, int(rotate))
        self.fresh_worker = fresh_worker
        self._ref_module = problem.reference_module()
        self._ref_times: dict[str, LatencyStats] = {}
        self._workers: dict[str, Worker | None] = {"candidate": None, "reference": None}
        self._last_solution: str | None = None
        self._environment: dict | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="ucutlass-grader-"))
        self._spawned = 0
        self._closed = False
        _LIVE.add(self)

    # --- lifecycle -------------------------------------------------------------------------------------

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop the workers and remove their logs. The grader cannot be used afterwards."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for role in list(self._workers):
            self._discard(role, replace=False)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def environment(self) -> dict:
        """Where this grader measures (hardware, driver, versions, host), as recorded in results."""
        if self._environment is None:
            self._environment = collect_environment(self.device)
        return self._environment

    # --- workers ---------------------------------------------------------------------------------------

    def _spawn(self, role: str) -> Worker:
        self._spawned += 1
        log = self._tmp / f"{role}-{self._spawned}.log"
        return Worker(self.problem, str(self.device), log, role)

    def _discard(self, role: str, replace: bool = True) -> None:
        """Stop a role's worker; with ``replace`` start its successor now, so it boots in the background."""
        w = self._workers.get(role)
        if w is not None:
            w.close(timeout=2.0)
        self._workers[role] = self._spawn(role) if replace and not self._closed else None

    def _worker(self, role: str) -> Worker:
        """The role's worker, ready; started (or restarted, if it died) as needed.

        Raises:
            GraderError: a fresh worker cannot start (this is no candidate's fault).
        """
        if self._closed:
            raise GraderError("this Grader is closed")
        w = self._workers.get(role)
        if w is None or (w.ready and not w.alive()):
            if w is not None:
                w.close(timeout=0.5)
            w = self._workers[role] = self._spawn(role)
        r = w.wait_ready(self.start_timeout_s)
        if not r.ok:
            self._discard(role, replace=False)
            raise GraderError(f"the grader's {role} worker did not start: {r.reason}\n{r.log}".rstrip())
        return w

    def worker_info(self, role: str = "candidate") -> dict:
        """What a worker reports about itself (pid, device, L2 size, flush-buffer size)."""
        r = self._worker(role).request({"op": "info"}, self.timeout_s)
        if not r.ok:
            self._after_failure(role, r)
            raise GraderError(f"{role} worker: {r.reason}")
        return r.data

    def _after_failure(self, role: str, r: Reply) -> None:
        if r.dead:
            self._discard(role, replace=True)

    # --- inputs ----------------------------------------------------------------------------------------

    def seed_of(self, trial: int, workload: Workload, purpose: str = "check") -> int:
        """The input seed of a trial: a stable digest of (base seed, purpose, workload uuid, trial)."""
        blob = f"{self.seed}/{purpose}/{workload.uuid}/{trial}".encode()
        return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little") & 0x7FFFFFFF

    def _inputs(self, workload: Workload, seed: int) -> tuple[dict[str, Any], list[Any]]:
        """Private inputs (for the reference) and shared copies (for a worker), in definition order."""
        priv = self.problem.make_inputs(workload, device=self.device, seed=seed, module=self._ref_module)
        shared = [self._share(v.detach().clone()) if _is_tensor(v) else v for v in priv.values()]
        return priv, shared

    def _share(self, t):
        return t.share_memory_() if t.device.type == "cpu" else t

    def _outputs(self, workload: Workload) -> list[Any]:
        """Output buffers from the definition's shapes and dtypes, poisoned (NaN or a sentinel)."""
        shapes = self.problem.output_shapes(workload)
        return [self._share(empty_poisoned(shapes[n] or (), torch_dtype(s.dtype), self.device))
                for n, s in self.problem.outputs.items()]

    def _reference(self, inputs: Mapping[str, Any], workload: Workload) -> dict[str, Any]:
        """The reference's outputs (in this process), checked against the definition's shapes."""
        import torch

        try:
            out = self.problem.run_reference(inputs, module=self._ref_module)
        except Exception as e:
            raise GraderError(f"{self.problem.id}: the reference fails on workload {workload.label()}: "
                              f"{type(e).__name__}: {e}") from e
        shapes = self.problem.output_shapes(workload)
        for name in self.problem.outputs:
            if name not in out:
                raise GraderError(f"{self.problem.id}: the reference returns no output {name!r}")
            ref = torch.as_tensor(out[name], device=self.device)
            want = tuple(shapes[name] or ())
            if tuple(ref.shape) != want:
                raise GraderError(f"{self.problem.id}: the reference's {name!r} has shape {tuple(ref.shape)}, "
                                  f"the definition says {want}")
            out[name] = ref
        return out

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _timing_sets(self, workload: Workload, purpose: str, with_reference: bool):
        """Pre-generated input sets (shared), poisoned outputs and, if asked, their reference outputs.

        Up to ``rotate`` sets, fewer when the sets (inputs twice: private and shared) would pass 1 GiB.
        """
        sets, refs = [], []
        n = self.rotate
        i = 0
        while i < n:
            priv, shared = self._inputs(workload, self.seed_of(i, workload, purpose))
            outs = self._outputs(workload)
            if i == 0:
                nbytes = sum(_nbytes(v) for v in priv.values()) * 2 + sum(_nbytes(o) for o in outs) * 2
                n = max(1, min(self.rotate, ROTATE_BYTES // max(nbytes, 1)))
            refs.append(self._reference(priv, workload) if with_reference else None)
            sets.append((shared, outs))
            i += 1
        self._sync()
        return sets, refs

    # --- timing of the reference -----------------------------------------------------------------------

    def reference_ms(self, workload: Workload) -> float:
        """Median time of the reference on ``workload`` (measured once per grader, then cached).

        Raises:
            GraderError: the reference fails in its worker.
        """
        return self._reference_stats(workload).median_ms

    def _reference_stats(self, workload: Workload) -> LatencyStats:
        cached = self._ref_times.get(workload.uuid)
        if cached is not None:
            return cached
        ref = reference_solution(self.problem)
        w = self._worker("reference")
        r = w.request({"op": "load", "solution": ref}, self.timeout_s)
        if r.ok:
            sets, _ = self._timing_sets(workload, "reference-timing", with_reference=False)
            # The reference is trusted not to hang: allow every call up to timeout_s.
            r = w.request({"op": "bench", "key": ref.key(), "sets": sets, "params": dataclasses.asdict(self.params)},
                          self._bench_timeout(self.timeout_s * 1e3))
            del sets
            self._collect()
        if not r.ok:
            self._after_failure("reference", r)
            raise GraderError(f"{self.problem.id}: timing the reference on {workload.label()} failed: "
                              f"{r.status}: {r.reason}\n{r.log}".rstrip())
        stats = latency_stats(r.data["times_ms"])
        self._ref_times[workload.uuid] = stats
        return stats

    def _bench_timeout(self, call_ms: float) -> float:
        p = self.params
        expected_s = (p.warmup_ms + p.rep_ms) / 1e3 + (p.min_reps + 2 + self.rotate) * call_ms / 1e3
        return self.timeout_s + 3.0 * expected_s

    def _collect(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.ipc_collect()

    # --- grading ---------------------------------------------------------------------------------------

    def _select(self, workloads) -> list[Workload]:
        if workloads is None:
            return list(self.problem.workloads)
        if isinstance(workloads, (Workload, int, str)):
            workloads = [workloads]
        out = []
        by_uuid = {w.uuid: w for w in self.problem.workloads}
        for w in workloads:
            if isinstance(w, Workload):
                out.append(w)
            elif isinstance(w, int) and -len(self.problem.workloads) <= w < len(self.problem.workloads):
                out.append(self.problem.workloads[w])
            elif isinstance(w, str) and w in by_uuid:
                out.append(by_uuid[w])
            else:
                raise GraderError(f"{self.problem.id}: no workload {w!r}")
        return out

    def grade(self, solution: SolutionRef, workloads: Iterable[Workload | int | str] | None = None, *,
              timed: bool = True) -> list[WorkloadResult]:
        """Grade ``solution`` on ``workloads`` (default: all of the problem's), one result per workload.

        A failing candidate (wrong output, exception, crash, hang) gives a failed result and grading
        goes on; only problems no candidate could cause raise.

        Args:
            solution: the recipe of the candidate.
            workloads: Workload objects, indices or uuids.
            timed: also time passing workloads (and the reference) and compute speedup and SOL score.

        Raises:
            GraderError: the reference fails, a worker cannot start, or the grader is closed.
        """
        if not isinstance(solution, SolutionRef):
            raise GraderError(f"grade() takes a SolutionRef, got {type(solution).__name__} "
                              "(see solution_from_file)")
        wls = self._select(workloads)
        if self.fresh_worker and self._last_solution not in (None, solution.key()):
            self._discard("candidate", replace=True)
        self._last_solution = solution.key()
        results = []
        for i, wl in enumerate(wls):
            res = self._grade_workload(solution, wl, timed)
            results.append(res)
            if self.progress is not None:
                self.progress({"event": "workload", "solution": solution.name, "workload": wl.uuid,
                               "label": wl.label(), "index": i, "total": len(wls), "status": res.status.value,
                               "latency_ms": res.latency_ms, "result": res})
        return results

    def _result(self, solution: SolutionRef, wl: Workload, status: Status, reason: str = "", log: str = "",
                correctness: Correctness | None = None, performance: Performance | None = None) -> WorkloadResult:
        text = "\n".join(x for x in (reason, log.strip()) if x)
        if len(text) > LOG_CHARS:
            text = text[:LOG_CHARS // 4] + "\n…\n" + text[-(LOG_CHARS * 3 // 4):]
        return WorkloadResult(definition=self.problem.name, workload_uuid=wl.uuid, axes=dict(wl.axes),
                              label=wl.label(), solution=solution.name, status=status, reason=reason,
                              log=text, environment=self.environment(), correctness=correctness,
                              performance=performance)

    def _failed(self, solution: SolutionRef, wl: Workload, r: Reply, logs: list[str], stage: str) -> WorkloadResult:
        self._after_failure("candidate", r)
        try:
            status = Status(r.status)
        except ValueError:
            status = Status.RUNTIME_ERROR
        reason = f"{stage}: {r.reason}" if stage else r.reason
        return self._result(solution, wl, status, reason, _join(logs + [r.log]))

    def _grade_workload(self, solution: SolutionRef, wl: Workload, timed: bool) -> WorkloadResult:
        tol = wl.tolerance
        logs: list[str] = []
        worker = self._worker("candidate")
        r = worker.request({"op": "load", "solution": solution}, self.timeout_s)
        if not r.ok:
            return self._failed(solution, wl, r, logs, "loading the solution")
        logs.append(r.log)
        key = solution.key()

        # Correctness: fresh inputs every trial; the parent compares buffers it owns.
        worst = {"abs": 0.0, "rel": 0.0, "ratio": 1.0}
        call_ms = 0.0
        for trial in range(self.trials):
            priv, shared = self._inputs(wl, self.seed_of(trial, wl))
            ref = self._reference(priv, wl)
            outs = self._outputs(wl)
            self._sync()
            r = worker.request({"op": "call", "key": key, "inputs": shared, "outputs": outs}, self.timeout_s)
            if not r.ok:
                return self._failed(solution, wl, r, logs, f"trial {trial}")
            logs.append(r.log)
            call_ms = max(call_ms, float(r.data.get("wall_ms", 0.0)))
            bad = self._check(outs, ref, tol, worst)
            del priv, shared, outs, ref
            if bad:
                return self._result(solution, wl, Status.INCORRECT_NUMERICAL, f"trial {trial}: {bad}",
                                    _join(logs), correctness=self._correctness(worst, tol, trial + 1, 0))
        self._collect()
        if not timed:
            return self._result(solution, wl, Status.PASSED, "", _join(logs),
                                correctness=self._correctness(worst, tol, self.trials, 0))

        # Timing: the reference first (cached), then the candidate on rotated, pre-generated sets.
        ref_stats = self._reference_stats(wl)
        sets, refs = self._timing_sets(wl, "timing", with_reference=True)
        r = worker.request({"op": "bench", "key": key, "sets": sets, "params": dataclasses.asdict(self.params)},
                           self._bench_timeout(call_ms))
        if not r.ok:
            return self._failed(solution, wl, r, logs, "timing")
        logs.append(r.log)
        # The last timed call on each set must be right too (no fast path only while being timed).
        for i, ((_, outs), ref) in enumerate(zip(sets, refs)):
            bad = self._check(outs, ref, tol, worst)
            if bad:
                return self._result(solution, wl, Status.INCORRECT_NUMERICAL, f"timed call on set {i}: {bad}",
                                    _join(logs), correctness=self._correctness(worst, tol, self.trials, i + 1))
        correctness = self._correctness(worst, tol, self.trials, len(sets))
        del sets, refs
        self._collect()
        try:
            stats = latency_stats(r.data.get("times_ms", []))
        except ValueError as e:
            return self._result(solution, wl, Status.RUNTIME_ERROR, f"timing: {e}", _join(logs),
                                correctness=correctness)
        t_sol = None
        if self.t_sol_ms is not None:
            try:
                t_sol = self.t_sol_ms(wl)
                t_sol = float(t_sol) if t_sol is not None and float(t_sol) > 0 else None
            except Exception as e:  # a T_SOL model that fails leaves the measurement standing
                logs.append(f"T_SOL unavailable: {type(e).__name__}: {e}")
                t_sol = None
        faster = t_sol is not None and stats.median_ms < t_sol
        perf = Performance(
            latency_ms=stats.median_ms, latency_p20_ms=stats.p20_ms, latency_p80_ms=stats.p80_ms,
            reference_latency_ms=ref_stats.median_ms,
            speedup_factor=ref_stats.median_ms / stats.median_ms if stats.median_ms > 0 else math.inf,
            t_sol_ms=t_sol, sol_score=None if faster else _sol_score(stats.median_ms, ref_stats.median_ms, t_sol),
            timed_calls=stats.n, reference_latency_p20_ms=ref_stats.p20_ms,
            reference_latency_p80_ms=ref_stats.p80_ms, reference_timed_calls=ref_stats.n)
        if faster:
            reason = (f"median {stats.median_ms:.4g} ms is below T_SOL {t_sol:.4g} ms, which is physically "
                      "impossible: a wrong T_SOL, a timing artefact or a cheat; re-verify")
            return self._result(solution, wl, Status.FASTER_THAN_SOL, reason, _join(logs),
                                correctness=correctness, performance=perf)
        return self._result(solution, wl, Status.PASSED, "", _join(logs), correctness=correctness,
                            performance=perf)

    def _check(self, outs: Sequence[Any], ref: Mapping[str, Any], tol, worst: dict) -> str:
        """Compare every output; fold errors into ``worst``; return the first failure's reason or ''."""
        reason = ""
        for name, buf in zip(self.problem.outputs, outs):
            c = compare(buf, ref[name], tol, name)
            worst["abs"] = max(worst["abs"], c.max_absolute_error)
            worst["rel"] = max(worst["rel"], c.max_relative_error)
            worst["ratio"] = min(worst["ratio"], c.matched_ratio)
            if not c.ok and not reason:
                reason = c.reason
        return reason

    @staticmethod
    def _correctness(worst: dict, tol, trials: int, timed_sets: int) -> Correctness:
        return Correctness(max_absolute_error=worst["abs"], max_relative_error=worst["rel"],
                           matched_ratio=worst["ratio"], tolerance=tol.to_json(), trials=trials,
                           checked_timed_sets=timed_sets)


def _join(logs: Sequence[str]) -> str:
    return "\n".join(x.strip("\n") for x in logs if x.strip())


def _is_tensor(v: Any) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _nbytes(v: Any) -> int:
    return v.numel() * v.element_size() if _is_tensor(v) else 0


__all__ = ["Grader", "TIMEOUT_S", "START_TIMEOUT_S", "ROTATE"]
