"""``ucutlass tune``: an Optuna study over a program's choices, built in parallel, measured one at a time.

Loop (ask-and-tell, STYLE.md "Search"): ask a batch of trials → reject the illegal ones before any
compile (``TrialState.PRUNED``, reason recorded) → render and compile the rest in parallel nvcc
processes → grade each on the GPU in the grader's spawned worker, one at a time → tell the objective
(``geomean over the tuned workloads of T_kernel / T_SOL``; lower is better, 1.0 is the speed of light).
Builds run ahead: once a batch is built, the next batch is asked and compiled (in a thread driving the
nvcc processes) while this one is measured, so the GPU does not wait for nvcc between batches. The cost:
the sampler proposes a batch before it has seen the previous one's values; a batch built ahead when a
stop rule fires is not measured (its trials are PRUNED, ``UNMEASURED``).
A failed compile, a wrong result or a crash is ``TrialState.FAIL`` with its reason in the trial's user
attributes; the study goes on. The study lives in Optuna storage (SQLite by default), so an interrupted
run resumes where it stopped, and compiled kernels come back from the content-addressed cache.

A run has three steps: :meth:`Tuner.prepare` (time the reference, decide budget and sampler, create the
study, queue the configurations of an exhaustive search, store the decisions in the study's ``setup``
attribute), :meth:`Tuner.work` (the loop) and :meth:`Tuner.finish` (verify the best on every workload,
collect the trials). Several workers (processes, GPUs, hosts: :mod:`search.distributed`) each run
:meth:`~Tuner.work` on the same study; everything the loop decides from is read from the storage each
round, so the stop rules hold for the study as a whole. Across workers:

- a configuration is measured once: after ``ask()`` a worker stamps the trial (``worker``, ``claimed``)
  and gives it up as a duplicate when the study already has that configuration measured, or running
  under another claim that wins (TPE's ``constant_liar`` keeps proposals apart in the first place; the
  exhaustive search pops Optuna's queue, which hands each queued trial to one worker);
- a batch is sized to the worker's share of what is left, and a worker with nothing left to ask waits
  while other workers still measure (a trial of a worker that dies comes back to the queue);
- the trials of a dead worker are failed and queued again once (:mod:`search.storage`); they carry no
  ``status`` and count for nothing.

Measuring and building are injected (:class:`Measurer`, ``build``), so the loop can be tested on a CPU
with fakes (STYLE.md: "Inject a fake timer to test tuner logic deterministically").
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
import random
import time
import warnings
from typing import Callable, Sequence

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from ucutlass.bind import Binding
from ucutlass.build import BuildResult
from ucutlass.errors import UcutError
from ucutlass.problem import Problem, Workload

from .budget import StopRule, geomean, headroom, trial_budget
from .portfolio import choose, contenders, ranges
from .space import SearchSpace, params_key
from .storage import (Heartbeat, fail_dead_workers, fail_stale_trials, heartbeat_enabled, open_storage, readable,
                      worker_id)
from .study import (BuildFn, Candidate, Dispatch, Measurer, Outcome, Setup, TuneConfig, TuneResult, is_candidate,
                    is_duplicate, is_interrupted, is_measured, make_sampler, objective, representative_workloads,
                    trial_params)


#: Proposals asked per wanted candidate before giving up on the sampler finding a new legal one.
MAX_FREE_ASKS = 64
#: Longest wait for a higher-numbered claim on the same configuration to be decided (its worker died).
CLAIM_WAIT_S = 30.0
CLAIM_POLL_S = 0.05


def _first_line(message: str, limit: int = 200) -> str:
    """The first non-empty line of a grader message, cut to ``limit`` characters (for progress lines)."""
    line = next((ln.strip() for ln in (message or "").splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _completion_order(t: FrozenTrial) -> tuple[float, int]:
    return (t.datetime_complete.timestamp() if t.datetime_complete else 0.0, t.number)


class Tuner:
    """Runs one study, alone (:meth:`run`) or as one of several workers (:meth:`work`). See the module
    docstring for the loop.

    Args:
        problem, binding, space: what is tuned.
        build: compiles candidates (parallel), returns one :class:`BuildResult` each, in order.
        measure: grades a candidate on workloads (one at a time on the GPU).
        t_sol_ms: T_SOL of a workload in ms (None when unknown).
        storage: an Optuna storage URL (``sqlite:///study.db``, ``journal:///study.log``,
            ``postgresql+psycopg://…``: :mod:`search.storage`), a storage object, or None for in-memory.
        study_name: name of the study in the storage (resumed when it exists).
        progress: called with a dict after every finished trial (for a progress bar or a log).
        worker_index: this worker's index among the study's workers (its sampler's seed is
            ``config.seed + worker_index``, so workers propose different configurations).
        workers: how many workers share the study (each asks its share of what is left).
        poll_s: how often a worker with nothing to ask looks at the study again.
    """

    def __init__(self, problem: Problem, binding: Binding, space: SearchSpace, *, build: BuildFn,
                 measure: Measurer, t_sol_ms: Callable[[Workload], float | None],
                 config: TuneConfig = TuneConfig(), storage: str | BaseStorage | None = None,
                 study_name: str | None = None, progress: Callable[[dict], None] | None = None,
                 worker_index: int = 0, workers: int = 1, poll_s: float = 1.0):
        self.problem, self.binding, self.space = problem, binding, space
        self.build, self.measure, self.t_sol_ms = build, measure, t_sol_ms
        self.config = config
        self.storage_url = storage if isinstance(storage, str) else None  # named in storage errors
        self.storage = open_storage(storage) if storage is None or isinstance(storage, str) else storage
        self.study_name = study_name or f"{problem.id}:{space.kernel_name}:{space.kernel.digest()[:12]}"
        self.progress = progress or (lambda event: None)
        self.worker_index, self.workers, self.poll_s = worker_index, max(1, workers), poll_s
        self.worker_id = worker_id()
        self.study: optuna.Study | None = None
        self.setup: Setup | None = None
        self._start: float | None = None
        self.search_seconds: float | None = None

    # --- helpers -----------------------------------------------------------------------------------

    def _tell(self, study: optuna.Study, trial: optuna.Trial, hb: Heartbeat, value: float | None = None,
              state: TrialState | None = None) -> bool:
        """Tell a trial; False when it was failed meanwhile as stale (see :mod:`search.storage`)."""
        try:
            study.tell(trial, value, state=state)
            return True
        except (ValueError, RuntimeError) as e:  # UpdateFinishedTrialError is a RuntimeError
            self.progress({"event": "lost", "number": trial.number, "reason": str(e)})
            return False
        finally:
            hb.release(trial.number)

    def _tell_pruned(self, study, trial, hb, reason: str, status: str = "ILLEGAL") -> None:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        self._tell(study, trial, hb, state=TrialState.PRUNED)

    def _tell_failed(self, study, trial, hb, status: str, reason: str) -> None:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason[:2000])
        self._tell(study, trial, hb, state=TrialState.FAIL)

    def _measure_checked(self, cand: Candidate, workloads: Sequence[Workload]) -> list[Outcome]:
        """Measure; a result faster than T_SOL is measured again once before it is believed."""
        outcomes = self.measure(cand, workloads)
        if any(o.status == "FASTER_THAN_SOL" for o in outcomes):
            outcomes = self.measure(cand, workloads)
        return outcomes

    def _open(self, sampler_kind: str, create: bool) -> optuna.Study:
        """Create (or resume) the study, or load it (a worker).

        Raises:
            StorageError: the storage is corrupt or truncated (names the file and what to do).
        """
        sampler = make_sampler(sampler_kind, self.config.seed + self.worker_index)
        with readable(self.storage_url, f"open study {self.study_name!r}"):
            if create:
                return optuna.create_study(study_name=self.study_name, storage=self.storage, direction="minimize",
                                           sampler=sampler, load_if_exists=True)
            return optuna.load_study(study_name=self.study_name, storage=self.storage, sampler=sampler)

    def _choices(self) -> dict[str, list[str]]:
        """The space's open choices as stored in the study (``space``): key → spellings, in order."""
        return {key: list(c.spellings) for key, c in self.space.choices.items()}

    def _check_resumable(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> None:
        """A resumed study must have been made for these choices: its ``space`` attribute (or, in a study from
        before it was stored, its trials' parameters) must match, or the sampler would propose options that no
        longer exist and the best configuration could not be rebuilt.

        Raises:
            UcutError: the choices changed; names what changed and suggests a new study name (``--study``).
        """
        now = self._choices()
        stored = study.user_attrs.get("space")
        changed: list[str] = []
        if stored is not None:
            for key in sorted(set(stored) | set(now)):
                if stored.get(key) != now.get(key):
                    was = "{" + ", ".join(stored[key]) + "}" if key in stored else "not a choice"
                    is_ = "{" + ", ".join(now[key]) + "}" if key in now else "not a choice"
                    changed.append(f"{key} was {was}, is {is_}")
        else:
            for t in trials:
                for key, value in trial_params(t).items():
                    if key not in now or str(value) not in now[key]:
                        changed.append(f"trial {t.number} has {key} = {value}, not an option now")
                        break
                if changed:
                    break
        if changed:
            raise UcutError(f"study {self.study_name!r} was made for other choices of kernel "
                            f"{self.space.kernel_name} ({'; '.join(changed[:5])}); resuming it would mix two search "
                            f"spaces: give a new study name (--study {self.study_name}-2), or restore the choices")

    def _stop_rule(self, trials: Sequence[FrozenTrial]) -> StopRule:
        """The stop rule of the whole study, replayed from its measured trials in completion order."""
        s, cfg = self.setup, self.config
        rule = StopRule(epsilon=cfg.epsilon, patience=cfg.patience, budget=s.budget, legal_size=s.legal,
                        time_limit_s=cfg.time_limit_s, started=self._start)
        best_known_at = None  # when the trial holding the best finished: later proposals knew of it
        for i, t in enumerate(sorted((t for t in trials if is_measured(t)), key=_completion_order)):
            value = t.value if t.state is TrialState.COMPLETE else None
            if i < s.finished_at_start:
                rule.record_earlier(value, params_key(t.params))
                continue
            informed = best_known_at is None or t.datetime_start is None or t.datetime_start >= best_known_at
            if rule.record(value, params_key(t.params), informed=informed):
                best_known_at = t.datetime_complete
        return rule

    def _tuned_workloads(self) -> list[Workload]:
        by_uuid = {w.uuid: w for w in self.problem.workloads}
        return [by_uuid[u] for u in self.setup.tuned]

    # --- the run -------------------------------------------------------------------------------------

    def run(self) -> TuneResult:
        """Prepare, work and finish in this process."""
        self.prepare()
        return self.finish(self.work())

    def prepare(self) -> Setup:
        """Time the reference, decide budget and sampler, create (or resume) the study, fail the trials
        that a killed run left RUNNING, queue the configurations of an exhaustive search, and store the
        decisions in the study (``setup``)."""
        self._start = time.monotonic()
        cfg = self.config
        workloads = representative_workloads(self.binding, cfg.max_workloads)
        for w in workloads:
            self.progress({"event": "reference", "workload": w.label()})
        refs = [self.measure.reference_ms(w) for w in workloads]
        sols = [self.t_sol_ms(w) for w in workloads]
        head = headroom(refs, [s or 0.0 for s in sols])
        legal = self.space.legal_params()
        budget = cfg.trials if cfg.trials is not None else trial_budget(head, len(legal))
        kind = cfg.sampler
        if kind == "auto":
            kind = "brute" if len(legal) <= budget else "tpe"
        study = self.study = self._open(kind, create=True)
        with readable(self.storage_url, f"read the trials of study {self.study_name!r}"):
            trials = study.get_trials(deepcopy=False)
        self._check_resumable(study, trials)
        fail_dead_workers(study)  # trials a killed run left RUNNING
        trials = study.get_trials(deepcopy=False)
        if kind == "brute":
            # Exhaustive over the legal configurations, through Optuna's own queue (asked first, in a
            # seeded order); configurations measured, queued or running are not queued again.
            pending = {params_key(trial_params(t)) for t in trials
                       if t.state in (TrialState.WAITING, TrialState.RUNNING) or is_measured(t)}
            order = list(legal)
            random.Random(cfg.seed).shuffle(order)
            for params in order:
                if params_key(params) not in pending:
                    study.enqueue_trial(params)
        measured = [t for t in trials if is_measured(t)]
        self.setup = Setup(budget=budget, sampler=kind, headroom=head, legal=len(legal),
                           tuned=[w.uuid for w in workloads], finished_at_start=len(measured))
        study.set_user_attr("problem", self.problem.id)
        study.set_user_attr("kernel", self.space.kernel_name)
        study.set_user_attr("space", self._choices())
        study.set_user_attr("tuned_workloads", [w.uuid for w in workloads])
        # The tuned workloads' reference (torch) and T_SOL times, ms: with each trial's ``latency_ms`` they give its
        # speedups from the storage alone, e.g. of a run cut before its verification wrote results.json.
        study.set_user_attr("reference_ms", {w.uuid: r for w, r in zip(workloads, refs)})
        study.set_user_attr("t_sol_ms", {w.uuid: t for w, t in zip(workloads, sols)})
        study.set_user_attr("setup", dataclasses.asdict(self.setup))
        study.set_user_attr("stop_reason", "")
        self.progress({"event": "start", "budget": budget, "legal": len(legal), "space": self.space.size,
                       "headroom": head, "sampler": kind, "resumed": len({params_key(t.params) for t in measured}),
                       "workers": self.workers})
        return self.setup

    def attach(self) -> Setup:
        """Join a study that :meth:`prepare` set up (in another process): load it and its ``setup``."""
        study = optuna.load_study(study_name=self.study_name, storage=self.storage,
                                  sampler=optuna.samplers.RandomSampler())
        if "setup" not in study.user_attrs:
            raise RuntimeError(f"study {self.study_name} has no setup: prepare() it before starting workers")
        self.setup = Setup(**study.user_attrs["setup"])
        study.sampler = make_sampler(self.setup.sampler, self.config.seed + self.worker_index)
        self.study = study
        self._start = self._start or time.monotonic()
        return self.setup

    def work(self) -> str:
        """Ask, build, measure and tell until a stop rule of the study fires; return its reason."""
        if self.study is None:
            self.attach()
        study = self.study
        workloads = self._tuned_workloads()
        dists = self.space.distributions()
        beats = heartbeat_enabled(self.storage)
        began = time.monotonic()
        ahead: tuple[list, cf.Future] | None = None  # the next batch, asked and building
        with Heartbeat(self.storage, self.study_name) as hb, warnings.catch_warnings(), \
                cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ucutlass-build") as builder:
            # Optuna warns that its heartbeat is meant for optimize(); Heartbeat beats for ask-and-tell.
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            try:
                while True:
                    if beats:
                        fail_stale_trials(study)  # trials of workers whose heartbeat stopped
                    stop = self._stop_rule(study.get_trials(deepcopy=False))
                    if stop.should_stop():
                        reason = stop.reason
                        break
                    if ahead is None:
                        asked = self._ask_batch(study, dists, hb)
                        if isinstance(asked, str):
                            if asked:
                                reason = asked
                                break
                            continue  # nothing left to ask while others measure: looked again
                        ahead = (asked, builder.submit(self.build, [c for _, c in asked]))
                    batch, pending = ahead
                    ahead = None
                    builds = pending.result()
                    # Ask the next batch and compile it while this one is measured (nvcc beside the grader).
                    if not self._stop_rule(study.get_trials(deepcopy=False)).should_stop():
                        asked = self._ask_batch(study, dists, hb, wait=False)
                        if not isinstance(asked, str):
                            ahead = (asked, builder.submit(self.build, [c for _, c in asked]))
                    self._run_batch(study, batch, workloads, hb, stop, builds)
                    # The batch is measured to the end even when a stop rule fired: its builds are paid for.
            finally:
                if ahead is not None:  # built ahead, but the study stopped (or the loop was interrupted)
                    ahead[1].cancel()
                    for trial, _ in ahead[0]:
                        self._tell_pruned(study, trial, hb, "built ahead, not measured: the study stopped first",
                                          status="UNMEASURED")
        self.search_seconds = time.monotonic() - began
        study.set_user_attr("stop_reason", reason)
        return reason

    def _ask_batch(self, study, dists, hb: Heartbeat, wait: bool = True) -> list[tuple[optuna.Trial, Candidate]] | str:
        """The next batch, sized to this worker's share of what is left of the budget (trials being built
        or measured count as taken); ``""`` when nothing is left to ask for now (after a pause of
        ``poll_s`` with ``wait``), or the reason the search must stop."""
        s, cfg = self.setup, self.config
        trials = study.get_trials(deepcopy=False)
        stop = self._stop_rule(trials)
        known = {params_key(t.params): (t.value if t.state is TrialState.COMPLETE else None)
                 for t in trials if is_measured(t)
                 or (t.state is TrialState.PRUNED and t.user_attrs.get("status") == "ILLEGAL")}
        taken = {params_key(t.params) for t in trials if is_candidate(t)} - stop.tried
        left = min(s.budget - stop.finished - len(taken), s.legal - len(stop.tried) - len(taken))
        if left <= 0:
            if wait:
                # What is left is being measured by other workers; one of them may die and its trial
                # come back to the queue.
                fail_dead_workers(study)
                time.sleep(self.poll_s)
            return ""
        want = max(1, min(cfg.batch, -(-left // self.workers)))
        batch = self._ask(study, dists, want, known, hb)
        if not batch:
            return (f"the sampler proposed {MAX_FREE_ASKS * want} configurations in a row that were "
                    "illegal, already measured or taken by another worker")
        return batch

    def _ask(self, study, dists, want: int, known: dict, hb: Heartbeat) -> list[tuple[optuna.Trial, Candidate]]:
        """Ask until ``want`` new legal configurations are held. Illegal, measured and taken proposals
        cost no compile and no budget: they are told to the study (so the sampler learns) and the next
        proposal is asked for, up to a limit."""
        batch: list[tuple[optuna.Trial, Candidate]] = []
        for _ in range(MAX_FREE_ASKS * want):
            if len(batch) >= want:
                break
            trial = study.ask(dists)
            trial.set_user_attr("worker", self.worker_id)
            hb.hold(trial.number)
            params = {k: trial.params[k] for k in dists}
            key = params_key(params)
            if key in known or any(params_key(c.params) == key for _, c in batch):
                self._tell_duplicate(study, trial, hb, known.get(key),
                                     "duplicate of a configuration that is illegal, failed or in this batch")
                continue
            violations = self.space.violations(params)
            if violations:
                self._tell_pruned(study, trial, hb, "; ".join(d.message for d in violations))
                known[key] = None
                self.progress({"event": "pruned", "number": trial.number, "params": params,
                               "reason": violations[0].message})
                continue
            same = self.space.representative(params)
            if same is not None and params_key(same) != key:  # one kernel spelled two ways: measure it once
                self._tell_duplicate(study, trial, hb, known.get(params_key(same)),
                                     f"the same kernel as {', '.join(f'{k} = {v}' for k, v in same.items())}")
                continue
            other = self._claim(study, trial, key)
            if other is not None:
                value = other.value if other.state is TrialState.COMPLETE else None
                self._tell_duplicate(study, trial, hb, value, f"configuration of trial {other.number} "
                                     f"({other.state.name.lower()} on worker {other.user_attrs.get('worker')})")
                continue
            kernel = self.space.concrete(params)
            cand = Candidate(trial.number, params, kernel, self.space.concrete_program(params))
            trial.set_user_attr("config", kernel.config_name())
            batch.append((trial, cand))
        return batch

    def _tell_duplicate(self, study, trial, hb, value: float | None, reason: str) -> None:
        trial.set_user_attr("duplicate", True)
        if value is None:
            self._tell_pruned(study, trial, hb, reason, status="DUPLICATE")
        else:
            self._tell(study, trial, hb, value)  # the sampler learns the known value

    def _claim(self, study: optuna.Study, trial: optuna.Trial, key) -> FrozenTrial | None:
        """Stamp ``trial`` as claimed, then look at the study: the trial that already has this
        configuration (measured, claimed under a lower number, or claimed under a higher number and
        decided to build it), or None when it is ours to build.

        Claims are written before they are read, so of two workers that propose the same configuration
        at once at least one sees the other's claim. A worker that sees a lower-numbered claim gives
        way at once; one that sees only higher-numbered claims waits until their workers have decided
        (built: ``config`` is set; given up: ``duplicate``), since such a worker may not have seen this
        claim. Waits go from lower to higher numbers only, so they cannot form a cycle; a worker that
        dies while undecided is waited for at most ``CLAIM_WAIT_S``. (Clock stamps cannot order claims:
        a stamp taken before a write that is delayed says nothing about when the write is seen.)"""
        trial.set_user_attr("claimed", time.time())
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            undecided = False
            trials = study.get_trials(deepcopy=False)
            retried = next((t.system_attrs.get("failed_trial") for t in trials if t.number == trial.number), None)
            for t in trials:
                if t.number == trial.number or is_duplicate(t) or params_key(trial_params(t)) != key:
                    continue
                if is_measured(t):
                    return t
                if t.number == retried:  # the dead worker's trial this one retries, being failed now
                    continue
                if t.state is TrialState.RUNNING and "claimed" in t.user_attrs:
                    if t.number < trial.number or "config" in t.user_attrs:
                        return t
                    undecided = True
            if not undecided or time.monotonic() > deadline:
                return None
            time.sleep(CLAIM_POLL_S)

    def _run_batch(self, study, batch, workloads, hb: Heartbeat, stop: StopRule,
                   builds: Sequence[BuildResult] | None = None) -> None:
        if builds is None:
            builds = self.build([c for _, c in batch])
        for i, ((trial, cand), built) in enumerate(zip(batch, builds)):
            if self._out_of_time() and math.isfinite(stop.best):
                # --time-limit holds within a batch too (a batch of 16 took 224 s past a 300 s limit on an H100,
                # and the call's end then cut the verification): the rest is told UNMEASURED, as a batch built
                # ahead is. Not before something passed, so a tune that was given time always has a best.
                for late, _ in batch[i:]:
                    self._tell_pruned(study, late, hb, "the time limit was reached before it was measured",
                                      status="UNMEASURED")
                self.progress({"event": "cut", "unmeasured": len(batch) - i,
                               "reason": f"time limit of {self.config.time_limit_s:g} s reached"})
                return
            cand.build = built
            try:
                self._run_one(study, trial, cand, built, workloads, hb, stop)
            except optuna.exceptions.UpdateFinishedTrialError as e:  # failed meanwhile as stale
                hb.release(trial.number)
                self.progress({"event": "lost", "number": trial.number, "reason": str(e)})

    def _out_of_time(self) -> bool:
        """True once the run's ``--time-limit`` (counted from :meth:`prepare` or :meth:`attach`) has passed."""
        limit = self.config.time_limit_s
        return limit is not None and self._start is not None and time.monotonic() - self._start >= limit

    def _run_one(self, study, trial, cand: Candidate, built: BuildResult, workloads, hb, stop: StopRule) -> None:
        trial.set_user_attr("build_seconds", round(built.seconds, 1))
        trial.set_user_attr("build_cached", built.cached)
        key = params_key(cand.params)
        if not built.ok:
            self._tell_failed(study, trial, hb, "COMPILE_ERROR", built.error or built.log[-2000:])
            stop.record(None, key)
            self.progress({"event": "trial", "number": trial.number, "state": "FAIL",
                           "params": cand.params, "reason": "compile: " + built.error})
            return
        outcomes = self._measure_checked(cand, workloads)
        bad = [o for o in outcomes if not o.ok]
        trial.set_user_attr("latency_ms", {o.workload.uuid: o.latency_ms for o in outcomes})
        if bad:
            o = bad[0]
            self._tell_failed(study, trial, hb, o.status, f"{o.workload.label()}: {o.message}")
            stop.record(None, key)
            self.progress({"event": "trial", "number": trial.number, "state": "FAIL",
                           "params": cand.params,
                           "reason": f"{o.status} on {o.workload.label()}: {_first_line(o.message)}"})
            return
        value = objective(outcomes)
        trial.set_user_attr("status", "PASSED")
        trial.set_user_attr("speedup_geomean", geomean([o.reference_ms / o.latency_ms for o in outcomes]))
        if self._tell(study, trial, hb, value):
            stop.record(value, key)
            self.progress({"event": "trial", "number": trial.number, "state": "COMPLETE",
                           "params": cand.params, "value": value, "best": stop.best})

    def stop_reason(self) -> str:
        """Why the study stopped, judged from the storage (for a coordinator whose workers have exited)."""
        stop = self._stop_rule(self.study.get_trials(deepcopy=False))
        if stop.should_stop():
            return stop.reason
        return self.study.user_attrs.get("stop_reason") or "the workers stopped before a stop rule fired"

    def finish(self, reason: str) -> TuneResult:
        """Verify the best configurations (best first) on every workload until one passes; collect the
        trials of the study (every worker's)."""
        study, s = self.study, self.setup
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state is TrialState.COMPLETE and not is_duplicate(t)]
        rows = []
        for t in trials:
            if t.state is TrialState.WAITING:
                continue
            row = {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                   **{k: v for k, v in t.user_attrs.items() if k != "claimed"}}
            if is_interrupted(t):
                row.update(status="INTERRUPTED", reason="its worker stopped (killed, crashed or lost) before it "
                           "finished; the configuration was queued again")
            if "failed_trial" in t.system_attrs:
                row["retry_of"] = t.system_attrs["failed_trial"]
            rows.append(row)
        best = best_value = None
        outcomes: list[Outcome] = []
        for t in sorted(complete, key=lambda t: t.value):
            params = {k: t.params[k] for k in self.space.choices}
            kernel = self.space.concrete(params)
            cand = Candidate(t.number, params, kernel, self.space.concrete_program(params))
            cand.build = self.build([cand])[0]
            self.progress({"event": "verify", "number": t.number})
            outcomes = self._measure_checked(cand, self.problem.workloads)
            if all(o.ok for o in outcomes):
                best, best_value = cand, t.value
                break
            self.progress({"event": "verify-failed", "number": t.number,
                           "reason": next(f"{o.status} on {o.workload.label()}: {_first_line(o.message)}"
                                          for o in outcomes if not o.ok)})
        dispatch = self._dispatch(best, outcomes, complete) if best is not None else None
        return TuneResult(self.study_name, best, best_value, outcomes if best else [], rows, reason,
                          self._tuned_workloads(), s.budget, s.legal, self.space.size, s.headroom,
                          time.monotonic() - self._start, self.search_seconds, dispatch)

    def _dispatch(self, best: Candidate, outcomes: Sequence[Outcome], complete: Sequence[FrozenTrial]
                  ) -> Dispatch | None:
        """Several kernels by range of M when they beat ``best`` (:mod:`search.portfolio`): the configurations
        fastest on some tuned workload are timed on ``dispatch_workloads`` workloads spread over the range of work,
        the few that shorten the geomean there are kept, and the dispatch program they make is built and graded as
        one solution on every workload. None when one kernel is as good (or the kernel is not a plain GEMM, or M
        does not vary, or the dispatch fails its check)."""
        from ucutlass.arch import resolve_swap_ab
        from ucutlass.lang import kernel_block, pin_swap_ab, render_dispatch
        from ucutlass.lang import parse

        cfg = self.config
        if cfg.dispatch < 2 or getattr(self.space.kernel, "family", "gemm") != "gemm":
            return None
        workloads = list(self.problem.workloads)
        mode_of = {w.uuid: int(self.binding.extents(w)["M"]) for w in workloads}
        if len(set(mode_of.values())) < 2:
            return None
        best_key = params_key(best.params)
        trial_of = {params_key(t.params): t for t in complete}
        trial_times = {k: {u: ms for u, ms in (t.user_attrs.get("latency_ms") or {}).items() if ms}
                       for k, t in trial_of.items()}
        others = [k for k in contenders(trial_times, self.setup.tuned) if k != best_key][:cfg.dispatch]
        if not others:
            return None
        cands = {best_key: best}
        for k in others:
            params = {p: dict(k)[p] for p in self.space.choices}
            cands[k] = Candidate(trial_of[k].number, params, self.space.concrete(params),
                                 self.space.concrete_program(params))
        for k, built in zip(others, self.build([cands[k] for k in others])):
            cands[k].build = built
        sample = representative_workloads(self.binding, cfg.dispatch_workloads)
        times = {best_key: {o.workload.uuid: o.latency_ms for o in outcomes if o.ok}}
        for k in others:
            self.progress({"event": "dispatch-measure", "number": cands[k].number, "workloads": len(sample)})
            if not cands[k].build.ok:
                continue
            times[k] = {o.workload.uuid: o.latency_ms for o in self._measure_checked(cands[k], sample) if o.ok}
        uuids = [w.uuid for w in sample]
        chosen = choose(times, uuids, best_key, cfg.dispatch, cfg.dispatch_gain)
        rngs = ranges(times, chosen, {u: mode_of[u] for u in uuids}, cfg.dispatch_gain, max_ranges=cfg.dispatch)
        if len(rngs) == 1:
            return None  # one configuration serves every workload best: the single best stays
        base = best.kernel.name
        # swap_ab = auto pinned to what each kernel was measured with (under a when it would follow the when)
        blocks = [(pin_swap_ab(kernel_block(cands[r.config].program.source, base),
                               resolve_swap_ab(cands[r.config].kernel)),
                   base if r.upper is None else f"{base}_m{r.upper}", None if r.upper is None else ("M", r.upper))
                  for r in rngs]
        program = parse(render_dispatch(blocks), best.program.file)
        kernels = program.dispatch()
        members = [Candidate(cands[r.config].number, cands[r.config].params, k, program)
                   for r, k in zip(rngs, kernels)]
        builds = self.build(members)
        if not all(b.ok for b in builds):
            self.progress({"event": "dispatch-failed", "reason": next(b.error for b in builds if not b.ok)})
            return None
        self.progress({"event": "dispatch-verify", "kernels": [k.name for k in kernels]})
        graded = self.measure.dispatch(program, builds, workloads)
        bad = [o for o in graded if not o.ok]
        if bad:
            self.progress({"event": "dispatch-failed",
                           "reason": f"{bad[0].status} on {bad[0].workload.label()}: {_first_line(bad[0].message)}"})
            return None
        info = [{"kernel": k.name, "when": None if r.upper is None else f"M <= {r.upper}", "trial": m.number,
                 "params": m.params, "config": m.kernel.config_name()}
                for r, k, m in zip(rngs, kernels, members)]
        name_of = {id(r): k.name for r, k in zip(rngs, kernels)}
        served = {u: name_of[id(next(r for r in rngs if r.upper is None or m <= r.upper))] for u, m in mode_of.items()}
        return Dispatch(program.source, info, graded, list(outcomes), served)
