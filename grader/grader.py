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
import math
import os
import shutil
import tempfile
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ucutlass.problem import Problem, Workload, torch_dtype

from .accuracy import ACCURACY_FACTOR, check_accuracy
from .check import compare, empty_poisoned, tolerance_against_truth
from .digest import InputDigest, changed as digest_changed
from .errors import GraderError
from .guards import wall_chargeable, wall_verdict
from .sandbox import own_run_delay_seconds, run_delay_seconds
from .inputs import (
    ALL_VARIANTS,
    NORMAL,
    apply_variant,
    grader_options,
    rescalable,
    rescale,
    rescale_factor,
    routing_inputs,
    unlisted_workload,
    variants_for,
)
from .results import Correctness, Performance, Status, WorkloadResult, collect_environment
from .solutions import SolutionRef, build_cache_dir, reference_solution
from .timing import MAX_REPS, MIN_REPS, REP_MS, WARMUP_MS, BenchParams, LatencyStats, latency_stats, reps_for
from .worker import Reply, Worker

#: Default limit for one request to a worker (a load, one correctness call, one timing run's base).
TIMEOUT_S = 60.0
#: Default limit on the time one solution's requests may take in all, over all the workloads of one grade().
SOLUTION_TIMEOUT_S = 1800.0
#: The grader's temporary folder (logs, the workers' scratch folders) is made with this prefix.
TMP_PREFIX = "ucutlass-grader-"
#: Problem files copied into each worker's scratch folder, and kept (to restore) after their digest, up
#: to this size in all.
PROBLEM_COPY_BYTES = 64 << 20
#: Starting a worker (spawn, import torch, set up the device) may take this long.
START_TIMEOUT_S = 180.0
#: Input sets rotated among in timing, at most, and the memory they may take together.
ROTATE = 4
ROTATE_BYTES = 1 << 30
#: A result's log keeps at most this many characters (its start and its end).
LOG_CHARS = 16000
#: The wall-clock check: each batch lasts about WALL_MS (within the call-count bounds), WALL_REPEATS
#: batches with and without the call, the fastest of each kept.
WALL_MS = 15.0
WALL_REPEATS = 3
#: Rounds of the wall-clock check before UNTIMED_WORK (see Grader._wall).
WALL_ATTEMPTS = 3
WALL_MIN_CALLS = 8
WALL_MAX_CALLS = 2000
#: Correctness trials and the timing hand the candidate the grader's own inputs (checked by keyed checksums, no
#: private copy) when the inputs take more than this share of the GPU's memory: L2_047's 24.6 GB of inputs, a copy
#: of them and its emulated candidate's 33 GB of work did not fit an 80 GB H100
#: (docs/benchmarks/2026-12-07-h100-untimed-moe-and-l1-020.md).
IN_PLACE_SHARE = 0.25

_LIVE: "weakref.WeakSet[Grader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # before multiprocessing's own atexit joins the (non-daemonic) workers
    for g in list(_LIVE):
        g.close()


def _charged(perf: Performance, escaped_ms: float) -> Performance:
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


class _Fail(Exception):
    """A failed workload, raised inside the grading of one workload and turned into its result."""

    def __init__(self, status: Status, reason: str, log: str = "", with_correctness: bool = False,
                 performance: Performance | None = None, discard: bool = False):
        super().__init__(reason)
        self.status, self.reason, self.log = status, reason, log
        self.with_correctness, self.performance = with_correctness, performance
        self.discard = discard  # the worker, still running, must be replaced (out of step, work left)


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


class _Tally:
    """Worst errors and accuracy over every comparison of one workload."""

    def __init__(self):
        self.abs = 0.0
        self.rel = 0.0
        self.ratio = 1.0
        self.acc: dict[str, Any] = {"checked": 0, "skipped": 0, "factor": ACCURACY_FACTOR}

    def accuracy_json(self) -> dict:
        return dict(self.acc)


class Grader:
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
        self._digest = InputDigest(dev)
        self._routing = routing_inputs(problem)
        self._ref_times: dict[str, LatencyStats] = {}
        self._workers: dict[str, Worker | None] = {"candidate": None, "reference": None}
        self._last_solution: str | None = None
        self._graded: Counter[str] = Counter()
        self._environment: dict | None = None
        _remove_stale_folders()
        self._tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self._tmp / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid())}")
        self._spawned = 0
        self._closed = False
        self._budget: dict[str, float] = {"used": 0.0}
        self._problem_files = _snapshot_files(Path(problem.path))
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
                      env=_worker_env(scratch), confine=self.confine)

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
        shared = [self._share(v.detach().clone()) if _is_tensor(v) else v for v in priv.values()]
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
        shared = [v if in_place or not _is_tensor(v) else self._share(v.detach().clone()) for v in inputs.values()]
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
        shared = [v if in_place or not _is_tensor(v) else self._share(v.detach().clone()) for v in inputs.values()]
        self._sync()
        r = self._problem_request({"op": "reference", "inputs": shared, "upcast": True}, what)
        del shared
        how = str(r.data.get("how", ""))
        return (self._fetch(r, what) if r.data.get("truth") else None), how

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

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
                if not _is_tensor(v):
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
                nbytes = sum(_nbytes(v) for v in priv.values()) * copies + sum(_nbytes(o) for o in outs) * 2
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
        now = _snapshot_files(folder)
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
            for n, v in _snapshot_files(folder).items():
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

    def _reply_failure(self, r: Reply, stage: str) -> _Fail:
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
        return _Fail(status, reason, r.log)

    def _grade_workload(self, solution: SolutionRef, wl: Workload, timed: bool, nonce: str) -> WorkloadResult:
        logs: list[str] = []
        tally = _Tally()
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
        except _Fail as f:
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

    # --- correctness -----------------------------------------------------------------------------------

    def _correctness(self, worker: Worker, solution: SolutionRef, wl: Workload, nonce: str, tally: _Tally,
                     checks: dict, stage: dict, logs: list[str]) -> float:
        """Every trial (one input distribution each), then one on an unlisted shape; raises _Fail."""
        call_ms = 0.0
        for trial in range(self.trials):
            variant = self.variants[trial % len(self.variants)]
            checks["variants"].append(variant)
            priv = self._make_inputs(wl, self.seed_of(trial, wl, "check", nonce), variant)
            checks.setdefault("private_inputs", self._keeps_copy(_bytes(priv)))  # False: in place, keyed checksums
            stage["trials"] = trial + 1
            call_ms = max(call_ms, self._trial(worker, solution, wl, priv, tally, logs, f"trial {trial} ({variant})"))
            del priv  # before the next trial's inputs are made (L2_047: two sets of 24.6 GB did not fit an H100)
        self._collect()
        if not self.unlisted_shapes:
            return call_ms
        uw = unlisted_workload(self.problem, wl)
        if uw is None:
            checks["unlisted_shape"] = {"skipped": "no var axis to move"}
            return call_ms
        label = f"unlisted shape {uw.label()}"
        try:
            priv = self._make_inputs(uw, self.seed_of(self.trials, wl, "unlisted", nonce))
        except Exception as e:  # the problem cannot make inputs for this shape: not the candidate's fault
            checks["unlisted_shape"] = {"workload": uw.label(), "skipped": f"{type(e).__name__}: {e}"[:200]}
            return call_ms
        try:
            self._trial(worker, solution, uw, priv, tally, logs, label, tolerance=wl.tolerance)
        except _Fail as f:
            if not self._reference_runs(priv, uw):
                checks["unlisted_shape"] = {"workload": uw.label(), "skipped": "the reference fails on it"}
                return call_ms
            raise f
        except GraderError as e:
            checks["unlisted_shape"] = {"workload": uw.label(), "skipped": str(e)[:200]}
            return call_ms
        checks["unlisted_shape"] = {"workload": uw.label(), "checked": True}
        self._collect()
        return call_ms

    def _reference_runs(self, priv: Mapping[str, Any], workload: Workload) -> bool:
        try:
            self._reference(priv, workload, in_place=not self._keeps_copy(_bytes(priv)))
            return True
        except GraderError:
            return False

    def _trial(self, worker: Worker, solution: SolutionRef, wl: Workload, priv: dict[str, Any], tally: _Tally,
               logs: list[str], label: str, tolerance=None) -> float:
        """One correctness call on fresh shared copies of ``priv``; returns its wall time, raises _Fail."""
        if not self._keeps_copy(_bytes(priv)):
            return self._trial_in_place(solution, wl, priv, tally, logs, label, tolerance)
        shared = [self._share(v.detach().clone()) if _is_tensor(v) else v for v in priv.values()]
        outs = self._outputs(wl)
        self._sync()
        r = self._ask(worker, {"op": "call", "key": solution.key(), "inputs": shared, "outputs": outs}, self.timeout_s)
        if not r.ok:
            raise self._reply_failure(r, label)
        logs.append(r.log)
        got = [o.clone() for o in outs]  # what is judged: copied out before anything else happens
        self._sync()
        changed = _modified(priv, shared)
        if changed:
            raise _Fail(Status.INPUT_MODIFIED, f"{label}: the candidate changed input(s) {', '.join(changed)}")
        del shared, outs
        self._judge(got, priv, wl, tolerance or wl.tolerance, tally, label)
        return float(r.data.get("wall_ms", 0.0))

    def _keeps_copy(self, nbytes: int) -> bool:
        """Whether inputs of ``nbytes`` get a private copy (``private_inputs``; by default unless they take more
        than IN_PLACE_SHARE of the GPU's memory)."""
        if self.private_inputs is not None:
            return bool(self.private_inputs)
        if self.device.type != "cuda":
            return True
        import torch

        return nbytes <= IN_PLACE_SHARE * torch.cuda.get_device_properties(self.device).total_memory

    def _input_bytes(self, wl: Workload) -> int:
        """Bytes of ``wl``'s tensor inputs, from the definition (before any is made)."""
        import torch

        sizes = {n: math.prod(shape) for n, shape in self.problem.input_shapes(wl).items() if shape is not None}
        return sum(k * torch.empty((), dtype=torch_dtype(self.problem.inputs[n].dtype)).element_size()
                   for n, k in sizes.items())

    def _trial_in_place(self, solution: SolutionRef, wl: Workload, priv: dict[str, Any], tally: _Tally,
                        logs: list[str], label: str, tolerance=None) -> float:
        """One correctness call on the grader's own inputs, for inputs too large to copy: keyed checksums
        (:mod:`.digest`) before and after the call. The candidate's worker is stopped right after its outputs
        are copied out, before the reference runs on the same memory: nothing it left running can write the
        inputs later, and its cached memory is given back to the reference. Returns the call's wall time."""
        worker = self._worker("candidate")  # a fresh one after an earlier trial in place: load the solution
        r = self._ask(worker, {"op": "load", "solution": solution}, self.timeout_s)
        if not r.ok:
            raise self._reply_failure(r, "loading the solution")
        for v in priv.values():
            if _is_tensor(v):
                self._share(v)  # a CPU tensor moves to shared memory in place (no copy kept)
        before = self._digest.of_all(priv)
        outs = self._outputs(wl)
        self._sync()
        args = list(priv.values())
        r = self._ask(worker, {"op": "call", "key": solution.key(), "inputs": args, "outputs": outs}, self.timeout_s)
        fail = None if r.ok else self._reply_failure(r, label)  # replaces a dead worker
        got = [o.clone() for o in outs] if r.ok else []
        self._sync()
        del args, outs
        if not r.dead:  # stopped even after a failure: the unlisted shape's retry runs the reference on priv
            self._discard("candidate", replace=True)
        self._collect()
        if fail is not None:
            raise fail
        logs.append(r.log)
        moved = digest_changed(before, self._digest.of_all(priv))
        if moved:
            raise _Fail(Status.INPUT_MODIFIED, f"{label}: the candidate changed input(s) {', '.join(moved)} "
                        "(seen by keyed checksums: these inputs are too large for a private copy)")
        ref = self._reference(priv, wl, in_place=True)
        moved = digest_changed(before, self._digest.of_all(priv))
        if moved:
            raise GraderError(f"{self.problem.id}: the reference changes its input(s) {', '.join(moved)}; inputs "
                              f"this large are not copied for it (Grader(private_inputs=True) copies them)")
        self._judge(got, priv, wl, tolerance or wl.tolerance, tally, label, ref=ref, in_place=True)
        return float(r.data.get("wall_ms", 0.0))

    def _judge(self, got: Sequence[Any], inputs: Mapping[str, Any], wl: Workload, tol, tally: _Tally,
               label: str, ref: dict[str, Any] | None = None, in_place: bool = False) -> None:
        """Tolerance (INCORRECT_NUMERICAL), then accuracy against the ground truth (INCORRECT_ACCURACY);
        ``ref``: the reference's outputs where already computed; ``in_place``: the problem's code runs on
        ``inputs`` themselves (no copy)."""
        ref = ref if ref is not None else self._reference(inputs, wl)
        missed = []
        for name, buf in zip(self.problem.outputs, got):
            c = compare(buf, ref[name], tol, name)
            tally.abs = max(tally.abs, c.max_absolute_error)
            tally.rel = max(tally.rel, c.max_relative_error)
            tally.ratio = min(tally.ratio, c.matched_ratio)
            if not c.ok:
                missed.append((name, buf, c.reason))
        truth, how = self._truth(inputs, wl, in_place) if self.accuracy and missed else (None, "")
        for name, buf, reason in missed:
            # Against the reference its own rounding counts against the candidate: judged against the truth.
            ok, note = tolerance_against_truth(buf, ref[name], truth.get(name) if truth else None, tol, name)
            if not ok:
                raise _Fail(Status.INCORRECT_NUMERICAL, f"{label}: {reason}" + (f" ({note})" if note else ""),
                            with_correctness=True)
            tally.acc["tolerance_against_truth"] = tally.acc.get("tolerance_against_truth", 0) + 1
            tally.acc.setdefault("tolerance_against_truth_note", f"{label}: {note}")
        if not self.accuracy:
            return
        if not missed:
            truth, how = self._truth(inputs, wl, in_place)
        tally.acc["ground_truth"] = how
        for name, buf in zip(self.problem.outputs, got):
            a = check_accuracy(buf, ref[name], truth.get(name) if truth else None, name)
            if a.skipped:
                tally.acc["skipped"] += 1
                tally.acc.setdefault("skipped_reason", a.skipped)
                continue
            tally.acc["checked"] += 1
            ratio = a.ratio if a.ratio is not None else 0.0
            if ratio >= tally.acc.get("ratio", -1.0):
                tally.acc.update(candidate_error=a.candidate_error, reference_error=a.reference_error,
                                 ratio=ratio, output=name)
            tally.acc["sparse_fraction"] = max(tally.acc.get("sparse_fraction", 0.0), a.sparse_fraction or 0.0)
            if not a.ok:
                raise _Fail(Status.INCORRECT_ACCURACY, f"{label}: {a.reason}", with_correctness=True)

    # --- timing ----------------------------------------------------------------------------------------

    def _timing(self, worker: Worker, solution: SolutionRef, wl: Workload, nonce: str, call_ms: float,
                tally: _Tally, checks: dict, stage: dict, logs: list[str]) -> Performance:
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
        uses, bad = _replay(data, len(sets), self.params)
        if bad:
            raise _Fail(Status.TAMPERED, f"timing: the worker's reply is inconsistent with the timing loop: {bad}",
                        discard=True)
        checks["l2_persisting_resets"] = int(data.get("l2_persisting_resets", 0) or 0)
        try:
            stats = latency_stats(data.get("times_ms", []))
        except ValueError as e:
            raise _Fail(Status.RUNTIME_ERROR, f"timing: {e}", with_correctness=True) from None
        for i, s in enumerate(sets):  # inputs as the last timed call left them (before wall batches move on)
            if in_place:
                changed = self._moved_in_place(s, sums[i], rescale_factor(plan["seed"], i, uses["final"][i]))
            else:
                seen = {name: (rescale(v, rescale_factor(plan["seed"], i, uses["final"][i])) if j in s.rescaled
                               else v) for j, (name, v) in enumerate(s.private.items())}  # type: ignore[union-attr]
                changed = _modified(s.private, s.base) + [f"{n} (working copy)" for n in
                                                          _modified(seen, s.work, only=s.rescaled)]
            if changed:
                raise _Fail(Status.INPUT_MODIFIED, f"timing: the candidate changed input(s) {', '.join(changed)}")
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
                    raise _Fail(Status.INPUT_MODIFIED, f"timing: the candidate changed input(s) {', '.join(moved)} "
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
                perf = _charged(perf, escaped)
                logs.append(f"timing: latency charged {escaped:.4g} ms per call: {measured}")
            elif not wall["ok"]:
                raise _Fail(Status.UNTIMED_WORK, f"timing: {measured}: work on another stream, work left after the "
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
            if not out and not torch.equal(_bits(rescale(s.base[j], factor)), _bits(s.work[j])):
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


def _start_time(pid: int) -> str:
    """When process ``pid`` started (field 22 of /proc/PID/stat, clock ticks since boot): with the pid, it
    names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _remove_stale_folders() -> None:
    """Remove the scratch folders of graders whose process is gone without closing them (killed with
    SIGKILL): their ``owner`` file names a process that no longer runs."""
    root = Path(tempfile.gettempdir())
    try:
        folders = list(root.glob(TMP_PREFIX + "*"))
    except OSError:
        return
    for folder in folders:
        try:
            pid, started = (folder / "owner").read_text().split()
        except (OSError, ValueError):
            continue  # not ours to judge (an older grader's, or being made now)
        if _start_time(int(pid)) != started:
            shutil.rmtree(folder, ignore_errors=True)


def _worker_env(scratch: Path) -> dict[str, str]:
    """A worker's environment: this process's, with every cache and temporary folder a library writes to
    moved into the worker's scratch folder (the only one it may write besides /dev and the build cache)."""
    env = dict(os.environ)
    tmp, cache = str(scratch / "tmp"), scratch / "cache"
    env.update(TMPDIR=tmp, TMP=tmp, TEMP=tmp, XDG_CACHE_HOME=str(cache), TRITON_HOME=str(cache / "triton"),
               TRITON_CACHE_DIR=str(cache / "triton" / "cache"), TORCH_EXTENSIONS_DIR=str(cache / "torch_extensions"),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), CUDA_CACHE_PATH=str(cache / "nv"),
               PYTHONDONTWRITEBYTECODE="1", TORCHINDUCTOR_COMPILE_THREADS="1")  # torch.compile: no worker pool
    return env


def _snapshot_files(folder: Path) -> dict[str, tuple[str, bytes | None]]:
    """``{name: (sha256, content)}`` of the regular files in a problem's folder (content kept up to
    :data:`PROBLEM_COPY_BYTES` in all, so a rewritten file can be restored)."""
    out: dict[str, tuple[str, bytes | None]] = {}
    kept = 0
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return out
    for p in entries:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        keep = kept + len(data) <= PROBLEM_COPY_BYTES
        kept += len(data) if keep else 0
        out[p.name] = (hashlib.sha256(data).hexdigest(), data if keep else None)
    return out


def _replay(data: Mapping[str, Any], n_sets: int, params: BenchParams) -> tuple[dict, str]:
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


def _bits(t):
    import torch

    t = t.detach().contiguous().reshape(-1)
    if t.dtype is torch.bool:
        return t.view(torch.uint8)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]) \
        if t.element_size() in (1, 2, 4, 8) else t


def _modified(expected: Mapping[str, Any], actual: Sequence[Any], only: Sequence[int] | None = None) -> list[str]:
    """Names of tensor inputs whose bits differ between ``expected`` (by name) and ``actual`` (in order)."""
    import torch

    out = []
    for j, ((name, e), a) in enumerate(zip(expected.items(), actual)):
        if only is not None and j not in only:
            continue
        if not (_is_tensor(e) and _is_tensor(a)):
            continue
        if e.shape != a.shape or e.dtype != a.dtype or not torch.equal(_bits(e), _bits(a.to(e.device))):
            out.append(name)
    return out


def _join(logs: Sequence[str]) -> str:
    return "\n".join(x.strip("\n") for x in logs if x and x.strip())


def _is_tensor(v: Any) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _nbytes(v: Any) -> int:
    return v.numel() * v.element_size() if _is_tensor(v) else 0


def _bytes(values: Mapping[str, Any]) -> int:
    return sum(_nbytes(v) for v in values.values())


__all__ = ["Grader", "TIMEOUT_S", "START_TIMEOUT_S", "ROTATE", "WALL_MS", "WALL_REPEATS"]
