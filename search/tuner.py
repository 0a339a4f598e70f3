"""``ucutlass tune``: an Optuna study over a program's choices, built in parallel, measured one at a time.

Loop (ask-and-tell, STYLE.md "Search"): ask a batch of trials → reject the illegal ones before any
compile (``TrialState.PRUNED``, reason recorded) → render and compile the rest in parallel nvcc
processes → grade each on the GPU in the grader's spawned worker, one at a time → tell the objective
(``geomean over the tuned workloads of T_kernel / T_SOL``; lower is better, 1.0 is the speed of light).
A failed compile, a wrong result or a crash is ``TrialState.FAIL`` with its reason in the trial's user
attributes; the study goes on. The study lives in Optuna storage (SQLite by default), so an interrupted
run resumes where it stopped, and compiled kernels come back from the content-addressed cache.

Measuring and building are injected (:class:`Measurer`, ``build``), so the loop can be tested on a CPU
with fakes (STYLE.md: "Inject a fake timer to test tuner logic deterministically").
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import optuna
from optuna.trial import TrialState

from ucutlass.bind import Binding
from ucutlass.build import BuildResult
from ucutlass.ir import GemmKernel, Program
from ucutlass.problem import Problem, Workload

from .budget import StopRule, geomean, headroom, trial_budget
from .space import SearchSpace, params_key


@dataclass
class Outcome:
    """The measurement of one candidate on one workload (times in ms)."""

    workload: Workload
    status: str  # the grader's status, "PASSED" when correct and timed
    latency_ms: float | None = None
    reference_ms: float | None = None
    t_sol_ms: float | None = None
    message: str = ""
    record: dict = field(default_factory=dict)  # the grader's full JSON record

    @property
    def ok(self) -> bool:
        return self.status == "PASSED" and self.latency_ms is not None


@dataclass
class Candidate:
    """One configuration of the search: Optuna params, the concrete kernel and program, its build."""

    number: int
    params: dict[str, str]
    kernel: GemmKernel
    program: Program
    build: BuildResult | None = None


class Measurer(Protocol):
    """Grades candidates; implemented by :class:`search.measure.GraderMeasurer` on a GPU."""

    def reference_ms(self, workload: Workload) -> float: ...

    def __call__(self, candidate: Candidate, workloads: Sequence[Workload]) -> list[Outcome]: ...


BuildFn = Callable[[Sequence[Candidate]], Sequence[BuildResult]]

#: Proposals asked per wanted candidate before giving up on the sampler finding a new legal one.
MAX_FREE_ASKS = 64


@dataclass
class TuneConfig:
    """Knobs of one tuning run.

    Attributes:
        trials: trial budget of the study (a resumed study counts its earlier trials); None lets the
            SOL headroom decide (:func:`search.budget.trial_budget`).
        epsilon, patience: stop rules (see :mod:`search.budget`).
        batch: trials asked (and compiled in parallel) at a time.
        max_workloads: tuned subset size; the best is verified on every workload at the end.
        sampler: ``auto`` (``brute`` when the legal space fits in the budget, else ``tpe``), ``tpe``,
            ``random`` or ``brute`` (every legal configuration enqueued in the study, in a seeded order).
        seed: sampler seed.
        time_limit_s: stop searching after this many seconds (the best is still verified).
    """

    trials: int | None = None
    epsilon: float = 0.25
    patience: int = 12
    batch: int = 8
    max_workloads: int = 6
    sampler: str = "auto"
    seed: int = 0
    time_limit_s: float | None = None


@dataclass
class TuneResult:
    """What a tuning run found."""

    study_name: str
    best: Candidate | None
    best_value: float | None
    best_outcomes: list[Outcome]
    trials: list[dict]
    stop_reason: str
    tuned_workloads: list[Workload]
    budget: int
    legal_size: int
    space_size: int
    headroom: float
    seconds: float


def representative_workloads(binding: Binding, k: int) -> list[Workload]:
    """Up to ``k`` workloads spread evenly over the range of GEMM work (2·M·N·K), smallest and
    largest included, so decode and prefill shapes both steer the search."""
    work = sorted(binding.problem.workloads, key=lambda w: math.prod(binding.extents(w).values()))
    if len(work) <= k:
        return work
    idx = sorted({round(i * (len(work) - 1) / (k - 1)) for i in range(k)}) if k > 1 else [len(work) - 1]
    return [work[i] for i in idx]


def _objective(outcomes: Sequence[Outcome]) -> float:
    """geomean(T_kernel / T_SOL); falls back to T_kernel / T_ref when a T_SOL is missing."""
    ratios = []
    for o in outcomes:
        denom = o.t_sol_ms if o.t_sol_ms and o.t_sol_ms > 0 else o.reference_ms
        ratios.append(o.latency_ms / denom)
    return geomean(ratios)


def _make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (the default, also behind ``brute``, whose configurations are enqueued) or random."""
    if kind in ("tpe", "brute"):
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {kind!r} (valid: auto, tpe, random, brute)")


class Tuner:
    """Runs one study. See the module docstring for the loop.

    Args:
        problem, binding, space: what is tuned.
        build: compiles candidates (parallel), returns one :class:`BuildResult` each, in order.
        measure: grades a candidate on workloads (one at a time on the GPU).
        t_sol_ms: T_SOL of a workload in ms (None when unknown).
        storage: an Optuna storage URL (``sqlite:///study.db``, a journal file, PostgreSQL …) or None
            for in-memory.
        study_name: name of the study in the storage (resumed when it exists).
        progress: called with a dict after every finished trial (for a progress bar or a log).
    """

    def __init__(self, problem: Problem, binding: Binding, space: SearchSpace, *, build: BuildFn,
                 measure: Measurer, t_sol_ms: Callable[[Workload], float | None],
                 config: TuneConfig = TuneConfig(), storage: str | None = None,
                 study_name: str | None = None, progress: Callable[[dict], None] | None = None):
        self.problem, self.binding, self.space = problem, binding, space
        self.build, self.measure, self.t_sol_ms = build, measure, t_sol_ms
        self.config, self.storage = config, storage
        self.study_name = study_name or f"{problem.id}:{space.kernel_name}:{space.kernel.digest()[:12]}"
        self.progress = progress or (lambda event: None)

    # --- helpers -----------------------------------------------------------------------------------

    def _tell_pruned(self, study: optuna.Study, trial: optuna.Trial, reason: str, status: str = "ILLEGAL") -> None:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        study.tell(trial, state=TrialState.PRUNED)

    def _tell_failed(self, study: optuna.Study, trial: optuna.Trial, status: str, reason: str) -> None:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason[:2000])
        study.tell(trial, state=TrialState.FAIL)

    def _measure_checked(self, cand: Candidate, workloads: Sequence[Workload]) -> list[Outcome]:
        """Measure; a result faster than T_SOL is measured again once before it is believed."""
        outcomes = self.measure(cand, workloads)
        if any(o.status == "FASTER_THAN_SOL" for o in outcomes):
            outcomes = self.measure(cand, workloads)
        return outcomes

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> TuneResult:
        start = time.monotonic()
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
        study = optuna.create_study(study_name=self.study_name, storage=self.storage, direction="minimize",
                                    sampler=_make_sampler(kind, cfg.seed), load_if_exists=True)
        if kind == "brute":
            # Exhaustive over the legal configurations, through Optuna's own queue (asked first, in a
            # seeded order; already-finished or queued ones are skipped, so a resumed study goes on).
            order = list(legal)
            random.Random(cfg.seed).shuffle(order)
            for params in order:
                study.enqueue_trial(params, skip_if_exists=True)
        study.set_user_attr("problem", self.problem.id)
        study.set_user_attr("kernel", self.space.kernel_name)
        study.set_user_attr("tuned_workloads", [w.uuid for w in workloads])
        stop = StopRule(epsilon=cfg.epsilon, patience=cfg.patience, budget=budget, legal_size=len(legal),
                        time_limit_s=cfg.time_limit_s)
        # Resume: what earlier runs of this study measured is known (and not paid for again).
        known: dict[tuple, float | None] = {}
        for t in study.get_trials(deepcopy=False):
            if t.state in (TrialState.COMPLETE, TrialState.FAIL) and not t.user_attrs.get("duplicate"):
                key = params_key(t.params)
                known[key] = t.value if t.state is TrialState.COMPLETE else None
                stop.finished += 1  # the budget counts the study's measured trials, earlier runs included
                stop.tried.add(key)
                if t.state is TrialState.COMPLETE:
                    stop.best = min(stop.best, t.value)
        self.progress({"event": "start", "budget": budget, "legal": len(legal), "space": self.space.size,
                       "headroom": head, "sampler": kind, "resumed": len(known)})
        dists = self.space.distributions()
        while not stop.should_stop():
            batch: list[tuple[optuna.Trial, Candidate]] = []
            want = max(1, min(cfg.batch, budget - stop.finished, len(legal) - len(stop.tried)))
            # Illegal and already-measured proposals cost no compile and no budget: they are told to
            # the study (so the sampler learns) and the next proposal is asked for, up to a limit.
            for _ in range(MAX_FREE_ASKS * want):
                if len(batch) >= want:
                    break
                trial = study.ask(dists)
                params = {k: trial.params[k] for k in dists}
                key = params_key(params)
                if key in known or any(params_key(c.params) == key for _, c in batch):
                    value = known.get(key)
                    trial.set_user_attr("duplicate", True)
                    if value is None:
                        self._tell_pruned(study, trial, "duplicate of a configuration that is illegal, "
                                          "failed or in this batch", status="DUPLICATE")
                    else:
                        study.tell(trial, value)
                    continue
                violations = self.space.violations(params)
                if violations:
                    self._tell_pruned(study, trial, "; ".join(d.message for d in violations))
                    known[key] = None
                    self.progress({"event": "pruned", "number": trial.number, "params": params,
                                   "reason": violations[0].message})
                    continue
                kernel = self.space.concrete(params)
                cand = Candidate(trial.number, params, kernel, self.space.concrete_program(params))
                trial.set_user_attr("config", kernel.config_name())
                batch.append((trial, cand))
            if not batch:
                stop.reason = (f"the sampler proposed {MAX_FREE_ASKS * want} configurations in a row that "
                               "were illegal or already measured")
                break
            builds = self.build([c for _, c in batch])
            for (trial, cand), built in zip(batch, builds):
                cand.build = built
                key = params_key(cand.params)
                trial.set_user_attr("build_seconds", round(built.seconds, 1))
                trial.set_user_attr("build_cached", built.cached)
                if not built.ok:
                    self._tell_failed(study, trial, "COMPILE_ERROR", built.error or built.log[-2000:])
                    known[key] = None
                    stop.record(None, key)
                    self.progress({"event": "trial", "number": trial.number, "state": "FAIL",
                                   "params": cand.params, "reason": "compile: " + built.error})
                    continue
                outcomes = self._measure_checked(cand, workloads)
                bad = [o for o in outcomes if not o.ok]
                trial.set_user_attr("latency_ms", {o.workload.uuid: o.latency_ms for o in outcomes})
                if bad:
                    o = bad[0]
                    self._tell_failed(study, trial, o.status, f"{o.workload.label()}: {o.message}")
                    known[key] = None
                    stop.record(None, key)
                    self.progress({"event": "trial", "number": trial.number, "state": "FAIL",
                                   "params": cand.params, "reason": f"{o.status} on {o.workload.label()}"})
                    continue
                value = _objective(outcomes)
                trial.set_user_attr("status", "PASSED")
                trial.set_user_attr("speedup_geomean", geomean([o.reference_ms / o.latency_ms for o in outcomes]))
                study.tell(trial, value)
                known[key] = value
                stop.record(value, key)
                self.progress({"event": "trial", "number": trial.number, "state": "COMPLETE",
                               "params": cand.params, "value": value, "best": stop.best})
            # The batch is measured to the end even when a stop rule fired: its builds are paid for.
        return self._finish(study, workloads, budget, len(legal), head, stop.reason, start)

    def _finish(self, study, workloads, budget, legal_size, head, reason, start) -> TuneResult:
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                    if not t.user_attrs.get("duplicate")]
        rows = [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
                 **{k: v for k, v in t.user_attrs.items()}}
                for t in study.get_trials(deepcopy=False) if t.state is not TrialState.WAITING]
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
                           "reason": next(f"{o.status} on {o.workload.label()}" for o in outcomes if not o.ok)})
        return TuneResult(self.study_name, best, best_value, outcomes if best else [], rows, reason,
                          list(workloads), budget, legal_size, self.space.size, head,
                          time.monotonic() - start)
