"""The grader: checks a solution against a problem's reference and times both, one workload at a time.

Trust boundary: the parent (this process) generates inputs, allocates and poisons the output buffers,
and compares; the candidate runs in a worker process (:mod:`.worker`, below a supervisor that owns its
process tree, confined by :mod:`.sandbox`) that sees only shared inputs and the output buffers it must
write. The problem's own code — its reference ``run()``, the ground truth, a custom input generator, and
the reference's timing — runs in a second worker of its own, with the same deadlines: a reference that
hangs or exits is a broken problem (:class:`GraderError`), never every candidate failing, and no problem
code runs in this process. Workers persist across ``grade()`` calls and solutions; a worker that crashes,
hangs, or trips a guard is killed (with every process it started) and replaced.

Order matters for what a candidate could read: the parent computes reference outputs only *after* the
candidate's request has returned and its outputs have been copied out, so no expected output exists in
any memory the candidate's process maps (CUDA IPC maps whole allocations) while candidate code runs.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ucutlass.problem import Problem, Workload, torch_dtype

from .check import empty_poisoned
from .digest import InputDigest
from .errors import GraderError
from .housekeeping import (
    TMP_PREFIX,
    process_start_time,
    remove_stale_folders,
    snapshot_files,
    worker_env,
)
from .inputs import ALL_VARIANTS, NORMAL, apply_variant, grader_options, routing_inputs, variants_for
from .results import Correctness, Performance, Status, WorkloadResult, collect_environment
from .solutions import SolutionRef, build_cache_dir
from .timed import ROTATE, WALL_MS, WALL_REPEATS, TimedCalls
from .timing import MAX_REPS, MIN_REPS, REP_MS, WARMUP_MS, BenchParams, LatencyStats
from .trials import CorrectnessTrials, ErrorTally, Failure, is_tensor
from .worker_handle import Reply, Worker

#: Default limit for one request to a worker (a load, one correctness call, one timing run's base).
TIMEOUT_S = 60.0
#: Default limit on the time one solution's requests may take in all, over all the workloads of one grade().
SOLUTION_TIMEOUT_S = 1800.0
#: Starting a worker (spawn, import torch, set up the device) may take this long.
START_TIMEOUT_S = 180.0
#: A result's log keeps at most this many characters (its start and its end).
LOG_CHARS = 16000

_LIVE: "weakref.WeakSet[Grader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before multiprocessing's own atexit joins the (non-daemonic) workers
    for g in list(_LIVE):
        g.close()


class Grader(CorrectnessTrials, TimedCalls):
    """Grades solutions of one problem: correctness over several trials, then timing and SOL scores.

    Args:
        problem: the loaded :class:`~ucutlass.problem.Problem`.
        device: ``"cuda"`` (or ``"cuda:N"``) or ``"cpu"``; default CUDA when available.
        trials: correctness trials per workload, each with fresh inputs; default one per input
            distribution (``variants``: 3, or 5 for problems that route).
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
            candidates, slower); by default one worker serves solution after solution, and is replaced
            whenever a guard fires.
        variants: the input distributions the trials cycle through (names in
            :mod:`ucutlass.grader.inputs`); default ``normal, heavy_tailed, structured`` plus
            ``skewed_routing, adversarial_routing`` when the problem routes.
        unlisted_shapes: one more trial per workload on a shape no workload lists (default on, unless the
            definition's ``"grader"`` section says ``"unlisted_shapes": false``).
        rescale_inputs: give every timed call fresh input contents (default on, unless the definition
            says ``"rescale_inputs": false``).
        accuracy: check outputs against a float64 ground truth (INCORRECT_ACCURACY).
        wall_check: time batches of calls with the parent's clock (UNTIMED_WORK).
        solution_timeout_s: limit on the time all of one solution's requests take together within one
            :meth:`grade` (the per-request ``timeout_s`` still holds for each); past it the remaining
            workloads are TIMEOUT.
        confine: confine the workers (:mod:`.sandbox`: Landlock, a user namespace). Off only to see what
            holds without it; ``$UCUTLASS_GRADER_CONFINE=0`` sets the default.
        private_inputs: keep a private copy of each correctness trial's inputs and hand the candidate
            another (True), or hand it the grader's own inputs and compare keyed checksums
            (:mod:`.digest`) taken before and after (False). Default: a copy unless the inputs take more
            than ``IN_PLACE_SHARE`` of the GPU's memory.

    Example:
        >>> with Grader(find_problem("gemm_bias")) as g:                      # doctest: +SKIP
        ...     results = g.grade(solution_from_file("mine.py"))
        ...     print(format_table(results))

    Note:
        Workers are started with the *spawn* method, so a script that creates a Grader needs the usual
        ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, problem: Problem, *, device: str | None = None, trials: int | None = None,
                 seed: int = 0, warmup_ms: float = WARMUP_MS, rep: float = REP_MS, timeout_s: float = TIMEOUT_S,
                 t_sol_ms: Callable[[Workload], float | None] | None = None,
                 progress: Callable[[dict], Any] | None = None, rotate: int = ROTATE,
                 min_reps: int = MIN_REPS, max_reps: int = MAX_REPS, start_timeout_s: float | None = None,
                 fresh_worker: bool = False, variants: Sequence[str] | None = None,
                 unlisted_shapes: bool | None = None, rescale_inputs: bool | None = None, accuracy: bool = True,
                 wall_check: bool = True, solution_timeout_s: float = SOLUTION_TIMEOUT_S,
                 confine: bool | None = None, private_inputs: bool | None = None):
        import torch

        self.variants = tuple(variants) if variants is not None else variants_for(problem)
        unknown = [v for v in self.variants if v not in ALL_VARIANTS]
        if not self.variants or unknown:
            raise GraderError(f"unknown input distributions {unknown} (known: {', '.join(sorted(ALL_VARIANTS))})")
        if trials is None:
            trials = len(self.variants)
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
        opts = grader_options(problem)
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
        self.unlisted_shapes = bool(opts.get("unlisted_shapes", True) if unlisted_shapes is None else unlisted_shapes)
        self.rescale_inputs = bool(opts.get("rescale_inputs", True) if rescale_inputs is None else rescale_inputs)
        self.accuracy = bool(accuracy)
        self.wall_check = bool(wall_check)
        self.solution_timeout_s = float(solution_timeout_s)
        self.confine = (os.environ.get("UCUTLASS_GRADER_CONFINE", "1") != "0") if confine is None else bool(confine)
        self.private_inputs = private_inputs
        self._digest = InputDigest()
        self._routing = routing_inputs(problem)
        self._ref_times: dict[str, LatencyStats] = {}
        self._workers: dict[str, Worker | None] = {"candidate": None, "reference": None}
        self._last_solution: str | None = None
        self._graded: Counter[str] = Counter()
        self._environment: dict | None = None
        remove_stale_folders()
        self._tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self._tmp / "owner").write_text(f"{os.getpid()} {process_start_time(os.getpid())}")
        self._spawned = 0
        self._closed = False
        self._budget: dict[str, float] = {"used": 0.0}
        self._problem_files = snapshot_files(Path(problem.path))
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
        """Stop the workers (and every process they started) and remove their scratch folders and logs.
        The grader cannot be used afterwards."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for role in list(self._workers):
            self._discard(role, replace=False)
        self._problem_files_changed()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def environment(self) -> dict:
        """Where this grader measures (hardware, driver, versions, host), as recorded in results."""
        if self._environment is None:
            self._environment = collect_environment(self.device)
        return self._environment

    # --- workers ---------------------------------------------------------------------------------------

    def _spawn(self, role: str) -> Worker:
        """A new worker in a fresh scratch folder that holds a copy of the problem's files."""
        self._spawned += 1
        log = self._tmp / f"{role}-{self._spawned}.log"
        scratch = self._tmp / f"{role}-{self._spawned}"
        copy = scratch / "problem"
        for sub in ("tmp", "cache", "problem"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        for name, (_, data) in self._problem_files.items():
            if data is not None:
                (copy / name).write_bytes(data)
        spec = copy / self.problem.spec_path.name if self.problem.spec_path is not None else None
        problem = dataclasses.replace(self.problem, path=copy,
                                      spec_path=spec if spec is not None and spec.is_file() else None)
        build = build_cache_dir()
        try:
            build.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        return Worker(problem, str(self.device), log, role, scratch=scratch, writable=("/dev", str(build)),
                      env=worker_env(scratch), confine=self.confine)

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
        """What a worker reports about itself (pid, device, L2 size, flush-buffer size, guards) and how it
        is isolated (``confinement``: :meth:`.sandbox.Confinement.to_json`, ``user_namespace``, its
        supervisor's pid and its scratch folder)."""
        w = self._worker(role)
        r = w.request({"op": "info"}, self.timeout_s)
        if not r.ok:
            self._after_failure(role, r)
            raise GraderError(f"{role} worker: {r.reason}")
        return {**r.data, "confinement": w.info.get("confinement"), "user_namespace": w.userns,
                "supervisor_pid": w.supervisor_pid, "scratch": str(w.scratch)}

    def _ask(self, worker: Worker, msg: dict, timeout: float) -> Reply:
        """One request of the candidate's, within both deadlines: ``timeout`` and what is left of the
        solution's (``solution_timeout_s`` over all its requests in this :meth:`grade`)."""
        left = self.solution_timeout_s - self._budget["used"]
        if left <= 0:
            return Reply(False, Status.TIMEOUT.value, f"the solution's deadline passed: its requests took "
                         f"{self._budget['used']:.1f} s of the {self.solution_timeout_s:g} s it may take in all")
        t0 = time.monotonic()
        r = worker.request(msg, min(timeout, left))
        self._budget["used"] += time.monotonic() - t0
        self._budget["printed"] = self._budget.get("printed", 0) + r.log_bytes
        if not r.ok and r.status == Status.TIMEOUT.value and left < timeout:
            r.reason += (f" (the solution's deadline: {self.solution_timeout_s:g} s for all its requests in one "
                         "grade)")
        return r

    def _after_failure(self, role: str, r: Reply) -> None:
        if r.dead:
            self._discard(role, replace=True)

    # --- inputs ----------------------------------------------------------------------------------------

    def seed_of(self, trial: int, workload: Workload, purpose: str = "check", solution: str | None = None) -> int:
        """The input seed of a trial: a stable digest of (base seed, purpose, workload uuid, trial) and,
        when given, the solution (its key and how many times this grader graded it), so a solution never
        sees inputs another solution, or its own earlier grade, was called on."""
        blob = f"{self.seed}/{purpose}/{workload.uuid}/{trial}" + (f"/{solution}" if solution else "")
        return int.from_bytes(hashlib.sha256(blob.encode()).digest()[:4], "little") & 0x7FFFFFFF

    def _make_inputs(self, workload: Workload, seed: int, variant: str = NORMAL) -> dict[str, Any]:
        """One input set: the definition's generators here, or the problem's own (custom) generator in the
        reference worker; then the distribution ``variant``.

        Raises:
            GraderError: the problem's generator fails, hangs or exits (a broken problem).
        """
        if self.problem.custom_inputs_entrypoint:
            what = f"making the inputs of {workload.label()}"
            priv = self._fetch(self._problem_request({"op": "inputs", "workload": workload, "seed": int(seed)},
                                                     what), what)
            priv = {n: priv[n] for n in self.problem.inputs if n in priv}
        else:
            priv = self.problem.make_inputs(workload, device=self.device, seed=seed)
        return apply_variant(priv, variant, seed, self._routing) if variant != NORMAL else priv

    def _inputs(self, workload: Workload, seed: int, variant: str = NORMAL) -> tuple[dict[str, Any], list[Any]]:
        """Private inputs (for the reference) and shared copies (for a worker), in definition order."""
        priv = self._make_inputs(workload, seed, variant)
        shared = [self._share(v.detach().clone()) if is_tensor(v) else v for v in priv.values()]
        return priv, shared

    def _share(self, t):
        return t.share_memory_() if t.device.type == "cpu" else t

    def _outputs(self, workload: Workload) -> list[Any]:
        """Output buffers from the definition's shapes and dtypes, poisoned (NaN or a sentinel)."""
        shapes = self.problem.output_shapes(workload)
        return [self._share(empty_poisoned(shapes[n] or (), torch_dtype(s.dtype), self.device))
                for n, s in self.problem.outputs.items()]

    def _problem_request(self, msg: dict, what: str, timeout: float | None = None) -> Reply:
        """One request of the problem's own code to the reference worker (its reference ``run()``, the
        ground truth, its custom input generator), with the grader's deadline.

        Raises:
            GraderError: the code raised, hung past ``timeout_s``, exited or crashed: a broken problem,
                never a failure of the candidate being graded.
        """
        limit = self.timeout_s if timeout is None else timeout
        r = self._worker("reference").request(msg, limit)
        trimmed = ""
        if not r.ok and r.status == Status.RUNTIME_ERROR.value and "out of memory" in r.reason.lower():
            # Memory the other processes' caching allocators keep from earlier workloads (L2_055's batch 80 on
            # the H200): given back, the request runs once more.
            trimmed = self._trim()
            r = self._worker("reference").request(msg, limit)
        if r.ok:
            return r
        self._after_failure("reference", r)
        if r.status in (Status.RUNTIME_ERROR.value, Status.COMPILE_ERROR.value):
            raise GraderError(f"{self.problem.id}: the problem's code fails {what}: {r.reason}"
                              + (f" (also after the grader freed cached GPU memory: {trimmed})" if trimmed else ""))
        if r.status == Status.TIMEOUT.value:
            why = (f"did not finish within {limit:g} s (it hangs, or needs a longer deadline: ucutlass grade "
                   "--timeout SECONDS, Grader(timeout_s=…))")
        elif r.status == Status.CRASHED.value:
            why = f"ended the process that ran it ({r.reason})"
        else:
            why = f"failed ({r.status}: {r.reason})"
        raise GraderError(f"{self.problem.id}: broken problem: its own code {why} {what}\n{r.log}".rstrip())

    def _fetch(self, r: Reply, what: str) -> dict[str, Any]:
        """Copy what a ``reference``/``inputs`` request left in the reference worker into tensors of this
        process (numbers come in the reply), by name in the order the reply gave."""
        import torch

        described = r.data.get("outputs") or {}
        values: dict[str, Any] = {}
        buffers = {}
        for name, d in described.items():
            if "value" in d:
                values[name] = d["value"]
                continue
            t = torch.empty(tuple(int(x) for x in d["shape"]), dtype=torch_dtype(str(d["dtype"])), device=self.device)
            buffers[name] = values[name] = self._share(t)
        if buffers:
            self._problem_request({"op": "fetch", "buffers": buffers}, what)
            self._sync()
        return values

    def _reference(self, inputs: Mapping[str, Any], workload: Workload, in_place: bool = False) -> dict[str, Any]:
        """The reference's outputs (run in the reference worker, on copies of ``inputs`` unless ``in_place``),
        checked against the definition's shapes.

        Raises:
            GraderError: the reference fails, hangs or exits, returns the wrong outputs, or an output that is all
                NaN/Inf (nothing could match it: the problem is broken, not the candidate).
        """
        import torch

        what = f"on workload {workload.label()}"
        shared = [v if in_place or not is_tensor(v) else self._share(v.detach().clone()) for v in inputs.values()]
        self._sync()
        out = self._fetch(self._problem_request({"op": "reference", "inputs": shared, "upcast": False}, what), what)
        del shared
        shapes = self.problem.output_shapes(workload)
        for name in self.problem.outputs:
            if name not in out:
                raise GraderError(f"{self.problem.id}: the reference returns no output {name!r}")
            ref = torch.as_tensor(out[name], device=self.device)
            want = tuple(shapes[name] or ())
            if tuple(ref.shape) != want:
                raise GraderError(f"{self.problem.id}: the reference's {name!r} has shape {tuple(ref.shape)}, "
                                  f"the definition says {want}")
            if ref.numel() and (ref.is_floating_point() or ref.is_complex()) and not bool(torch.isfinite(ref).any()):
                raise GraderError(f"{self.problem.id}: the reference's {name!r} is all NaN/Inf on workload "
                                  f"{workload.label()} ({ref.numel()} elements): no candidate can match it; fix the "
                                  "reference or this workload's inputs and tolerance (definition.json, "
                                  "workload.jsonl)")
            out[name] = ref
        return out

    def _truth(self, inputs: Mapping[str, Any], workload: Workload,
               in_place: bool = False) -> tuple[dict[str, Any] | None, str]:
        """The ground truth (:func:`.accuracy.ground_truth`, run in the reference worker on copies of
        ``inputs`` unless ``in_place``): outputs by name or None, and the dtype used or why there is none."""
        what = f"computing the ground truth of {workload.label()}"
        if self.device.type == "cuda":
            self._trim()  # float64 needs several times the reference's memory: the candidate's cache given back
        shared = [v if in_place or not is_tensor(v) else self._share(v.detach().clone()) for v in inputs.values()]
        self._sync()
        r = self._problem_request({"op": "reference", "inputs": shared, "upcast": True}, what)
        del shared
        how = str(r.data.get("how", ""))
        return (self._fetch(r, what) if r.data.get("truth") else None), how

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    # --- timing of the reference -----------------------------------------------------------------------

    def reference_ms(self, workload: Workload) -> float:
        """Median time of the reference on ``workload`` (measured once per grader, then cached).

        Raises:
            GraderError: the reference fails in its worker.
        """
        return self._reference_stats(workload).median_ms

    def _trim(self) -> str:
        """Every process of this grader gives its cached, unused GPU memory back; returns what each still holds."""
        import gc

        held = []
        for role, w in list(self._workers.items()):
            if w is not None and w.ready and w.alive():
                r = w.request({"op": "trim"}, self.timeout_s)
                if r.ok:
                    held.append(f"{role} worker {int(r.data.get('reserved_bytes', 0)) / 2**30:.1f} GiB")
        gc.collect()
        if self.device.type == "cuda":
            import torch

            torch.cuda.ipc_collect()
            torch.cuda.empty_cache()
            held.append(f"grader {torch.cuda.memory_reserved(self.device) / 2**30:.1f} GiB")
        return "reserved " + ", ".join(held)

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

        A failing candidate (wrong output, exception, crash, hang, a guard's verdict) gives a failed
        result and grading goes on; only problems no candidate could cause raise.

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
        key = solution.key()
        if self.fresh_worker and self._last_solution not in (None, key):
            self._discard("candidate", replace=True)
        self._last_solution = key
        self._graded[key] += 1
        self._budget["used"] = 0.0
        nonce = f"{key}/{self._graded[key]}"
        results = []
        for i, wl in enumerate(wls):
            if i and self.device.type == "cuda":
                self._trim()  # the last workload's cached blocks, in every process, before this one allocates
            res = self._grade_workload(solution, wl, timed, nonce)
            changed = self._problem_files_changed()
            if changed:  # the candidate got past the confinement (or there was none): never a pass
                res = dataclasses.replace(res, status=Status.TAMPERED, reason=(
                    f"the candidate rewrote the problem's files ({', '.join(changed)}); they were restored from "
                    "the copy taken when the grader started"))
            results.append(res)
            if self.progress is not None:
                self.progress({"event": "workload", "solution": solution.name, "workload": wl.uuid,
                               "label": wl.label(), "index": i, "total": len(wls), "status": res.status.value,
                               "latency_ms": res.latency_ms, "result": res})
        return results

    def _problem_files_changed(self) -> list[str]:
        """The problem's files whose digest differs from the grader's start, and files added beside them.

        A changed file is restored where the grader kept its content; what it held is kept beside it as
        ``NAME.changed-TIME`` (nothing is lost if it was the user's own edit). Added files are left alone.
        """
        folder = Path(self.problem.path)
        now = snapshot_files(folder)
        changed = []
        for name in sorted(set(now) | set(self._problem_files)):
            before = self._problem_files.get(name)
            after = now.get(name)
            if before is not None and after is not None and before[0] == after[0]:
                continue
            changed.append(name)
            if before is None or before[1] is None:
                continue
            try:
                path = folder / name
                if path.exists():
                    os.replace(path, folder / f"{name}.changed-{time.strftime('%Y%m%d-%H%M%S')}")
                path.write_bytes(before[1])
            except OSError:
                pass
        if changed:  # report an added file (and the kept copies) once
            for n, v in snapshot_files(folder).items():
                self._problem_files.setdefault(n, (v[0], None))
        return changed

    def _result(self, solution: SolutionRef, wl: Workload, status: Status, reason: str = "", log: str = "",
                correctness: Correctness | None = None, performance: Performance | None = None,
                checks: Mapping[str, Any] | None = None) -> WorkloadResult:
        printed = int(self._budget.pop("printed", 0))
        if printed:  # what the candidate printed; the log keeps its start and end of each request
            checks = {**(checks or {}), "output_bytes": printed}
        text = "\n".join(x for x in (reason, log.strip()) if x)
        if len(text) > LOG_CHARS:
            text = text[:LOG_CHARS // 4] + "\n…\n" + text[-(LOG_CHARS * 3 // 4):]
        return WorkloadResult(definition=self.problem.name, workload_uuid=wl.uuid, axes=dict(wl.axes),
                              label=wl.label(), solution=solution.name, status=status, reason=reason,
                              log=text, environment=self.environment(), correctness=correctness,
                              performance=performance, checks=dict(checks or {}))

    def _reply_failure(self, r: Reply, stage: str) -> Failure:
        self._after_failure("candidate", r)
        try:
            status = Status(r.status)
        except ValueError:
            status = Status.RUNTIME_ERROR
        reason = f"{stage}: {r.reason}" if stage else r.reason
        if status in (Status.RUNTIME_ERROR, Status.COMPILE_ERROR) and self.confine and \
                ("PermissionError" in r.reason or "Permission denied" in r.reason or "Operation not permitted" in r.reason):
            reason += (" (the grader's sandbox: a candidate may write only beneath its scratch folder — its working "
                       "folder and $TMPDIR —, /dev and the C++ build cache, and signal only its own processes)")
        return Failure(status, reason, r.log)

    def _grade_workload(self, solution: SolutionRef, wl: Workload, timed: bool, nonce: str) -> WorkloadResult:
        logs: list[str] = []
        tally = ErrorTally()
        checks: dict[str, Any] = {"variants": [], "inputs_rescaled": self.rescale_inputs}
        stage = {"trials": 0, "timed_sets": 0}

        def correctness() -> Correctness:
            return Correctness(max_absolute_error=tally.abs, max_relative_error=tally.rel,
                               matched_ratio=tally.ratio, tolerance=wl.tolerance.to_json(),
                               trials=stage["trials"], checked_timed_sets=stage["timed_sets"],
                               accuracy=tally.accuracy_json() if self.accuracy else None)

        try:
            worker = self._worker("candidate")
            r = self._ask(worker, {"op": "load", "solution": solution}, self.timeout_s)
            if not r.ok:
                raise self._reply_failure(r, "loading the solution")
            logs.append(r.log)
            call_ms = self._correctness(worker, solution, wl, nonce, tally, checks, stage, logs)
            if not timed:
                return self._result(solution, wl, Status.PASSED, "", _join(logs), correctness(), None, checks)
            worker = self._worker("candidate")  # a new one if a skipped unlisted-shape trial killed it
            r = self._ask(worker, {"op": "load", "solution": solution}, self.timeout_s)
            if not r.ok:
                raise self._reply_failure(r, "loading the solution")
            perf = self._timing(worker, solution, wl, nonce, call_ms, tally, checks, stage, logs)
        except Failure as f:
            logs.append(f.log)
            if f.discard:
                self._discard("candidate", replace=True)
            corr = correctness() if f.with_correctness else None
            return self._result(solution, wl, f.status, f.reason, _join(logs), corr, f.performance, checks)
        if perf.t_sol_ms is not None and perf.latency_ms < perf.t_sol_ms:
            reason = (f"median {perf.latency_ms:.4g} ms is below T_SOL {perf.t_sol_ms:.4g} ms, which is "
                      "physically impossible: a wrong T_SOL, a timing artefact or a cheat; re-verify")
            return self._result(solution, wl, Status.FASTER_THAN_SOL, reason, _join(logs), correctness(), perf,
                                checks)
        return self._result(solution, wl, Status.PASSED, "", _join(logs), correctness(), perf, checks)


def _join(logs: Sequence[str]) -> str:
    return "\n".join(x.strip("\n") for x in logs if x and x.strip())


__all__ = ["Grader", "TIMEOUT_S", "START_TIMEOUT_S", "ROTATE", "WALL_MS", "WALL_REPEATS"]
