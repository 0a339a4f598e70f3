"""``ucutlass tune`` on a pipeline (issue 16 item 4): one Optuna study per kernel, all in one storage, round-robin.

A pipeline's time is the sum of its steps, and its kernels' choices are searched on the shapes each kernel sees
(:mod:`search.pipeline_plan`). The studies, named ``<problem>/<kernel>`` (``--study`` replaces the problem's id), live
in one storage (``study.db`` in the output folder by default), so a run resumes where it stopped. Rounds go
kernel by kernel (coordinate descent): a trial of one kernel's study picks that kernel's choices, the other kernels
are held at their current best, and the WHOLE pipeline is built and graded on the tuned workloads. The current best
is the best combination measured so far over every study (a trial's combination: its kernel's params and the others'
as held, its ``context``), or each kernel's first legal combination before anything was measured; so a trial is
compared with the combination it changes one kernel of, and the best of each kernel, combined, is a combination that
was measured. The objective is the tuner's: ``geomean over the tuned workloads of T_pipeline / T_SOL`` (lower is
better; T_SOL is the whole problem's bound). Each trial carries its kernel, the other kernels' picks (``context``),
its configuration, status and per-workload times as user attributes.

Stop rules per kernel: its budget of measured trials (``--trials``, else decided by the SOL headroom as for one
kernel, never more than its legal combinations), ``patience`` of its trials in a row that do not improve the best,
or nothing new left to propose; for the run: a best within ``(1 + ε)·T_SOL`` or the time limit. Then the best
combination is written as one program (``best.ucut``: every choice written out, comments kept) and graded as one
solution on every workload; when it fails there, the next best combinations are graded (:data:`VERIFY_TRIES` in all).

Proposals already measured with the same other kernels' picks are told their known value (no budget); a
combination the rules reject is PRUNED before any compile, as in :mod:`search.tuner`. Measuring is injected
(:class:`PipelineMeasurer`) so the loop is tested on a CPU with a fake.
"""

from __future__ import annotations

import json
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from ucutlass.errors import UcutError
from ucutlass.problem import Problem, Workload

from .budget import geomean, headroom, trial_budget
from .pipeline_plan import PipelinePlan
from .space import params_key
from .storage import fail_dead_workers, open_storage, readable, worker_id
from .study import Outcome, TuneConfig, is_duplicate, is_measured, make_sampler, objective
from .tuner import MAX_FREE_ASKS


class PipelineMeasurer(Protocol):
    """Builds and grades a concrete pipeline program; :class:`PipelineGraderMeasurer` on a GPU."""

    def reference_ms(self, workload: Workload) -> float: ...

    def __call__(self, program: Any, workloads: Sequence[Workload]) -> list[Outcome]: ...


@dataclass
class PipelineTuneResult:
    """What a pipeline's tune found.

    Attributes:
        studies: ``{kernel: study name}``, one per kernel the pipeline calls.
        picks: ``{kernel: {setting: spelling}}`` of the graded program (None entries never: every kernel picked).
        source: the text of ``best.ucut`` (the graded program), or None when no combination passed everywhere.
        best_value: geomean T_pipeline / T_SOL of the graded program on the tuned workloads (from its trial),
            or None.
        outcomes: the graded program on every workload (what the table reports).
        trials: every trial of every study: number, kernel, state, value, params and user attributes.
        stop_reasons: ``{kernel: why its search stopped}``; ``stop_reason``: the run's in words.
        how: ``"best"`` (the best combination measured: each kernel at its best with the others at theirs),
            ``"runner-up"`` (the best failed on some workload), ``"first legal"`` (nothing measured) or ``"none"``.
        verify_failures: each combination graded on every workload at the end that failed, in order: ``how``,
            ``picks``, ``reason`` (status and message of its first failing workload) and ``workloads`` (every
            workload's status, time and message), so a run with no result says why.
    """

    problem_id: str
    pipeline: str
    studies: dict[str, str]
    picks: dict[str, dict[str, str]] | None
    source: str | None
    best_value: float | None
    outcomes: list[Outcome]
    trials: list[dict]
    stop_reasons: dict[str, str]
    stop_reason: str
    tuned_workloads: list[Workload]
    budgets: dict[str, int]
    headroom: float
    seconds: float
    how: str = "best"
    extra: dict = field(default_factory=dict)
    verify_failures: list[dict] = field(default_factory=list)


#: Combinations graded on every workload at the end, best first, until one passes.
VERIFY_TRIES = 3


def _context_key(context: Mapping[str, Mapping[str, str]]) -> str:
    return json.dumps({k: dict(sorted(v.items())) for k, v in sorted(context.items())}, sort_keys=True)


class PipelineTuner:
    """One study per kernel of a pipeline, in one storage; see the module docstring.

    Args:
        plan: the :class:`search.pipeline_plan.PipelinePlan`.
        measure: builds and grades a concrete program on workloads (:class:`PipelineMeasurer`).
        t_sol_ms: T_SOL of a workload in ms (None when unknown): the budget's headroom.
        config: :class:`search.study.TuneConfig` (``trials`` is per kernel; ``dispatch`` is not used).
        storage: an Optuna storage URL or object; None: one in-memory storage for all the studies.
        study_prefix: the studies are ``<study_prefix>/<kernel>`` (default: the problem's id).
        progress: called with a dict per event (``start``, ``trial``, ``pruned``, ``verify``, ``verify-failed``).
    """

    def __init__(self, plan: PipelinePlan, measure: PipelineMeasurer, t_sol_ms: Callable[[Workload], float | None],
                 config: TuneConfig = TuneConfig(), storage: str | BaseStorage | None = None,
                 study_prefix: str | None = None, progress: Callable[[dict], None] | None = None):
        self.plan, self.measure, self.t_sol_ms, self.config = plan, measure, t_sol_ms, config
        self.storage_url = storage if isinstance(storage, str) else None
        if storage is None:
            self.storage: BaseStorage = optuna.storages.InMemoryStorage()
        else:
            self.storage = open_storage(storage) if isinstance(storage, str) else storage
        prefix = study_prefix or plan.problem.id
        self.names = {k.name: f"{prefix}/{k.name}" for k in plan.kernels}
        self.progress = progress or (lambda event: None)
        self.studies: dict[str, optuna.Study] = {}
        self.budgets: dict[str, int] = {}
        self.head = float("nan")
        self.worker_id = worker_id()

    # --- the studies ------------------------------------------------------------------------------------

    def _open(self, kernel: str, sampler: str) -> optuna.Study:
        with readable(self.storage_url, f"open study {self.names[kernel]!r}"):
            return optuna.create_study(study_name=self.names[kernel], storage=self.storage, direction="minimize",
                                       sampler=make_sampler(sampler, self.config.seed), load_if_exists=True)

    def _check_resumable(self, kernel: str, study: optuna.Study) -> None:
        now = {key: list(c.spellings) for key, c in self.plan.kernel(kernel).space.choices.items()}
        stored = study.user_attrs.get("space")
        if stored is not None and stored != now:
            raise UcutError(f"study {self.names[kernel]!r} was made for other choices of kernel {kernel} (stored "
                            f"{stored}, now {now}); resuming it would mix two search spaces: give another study name "
                            f"(--study {self.plan.problem.id}-2), or restore the choices")

    def prepare(self) -> None:
        """Time the reference on the tuned workloads, decide each kernel's budget and sampler, create (or resume)
        its study, fail the trials a killed run left RUNNING, queue an exhaustive search's combinations."""
        cfg, plan = self.config, self.plan
        self._start = time.monotonic()
        refs = [self.measure.reference_ms(w) for w in plan.tuned]
        sols = [self.t_sol_ms(w) or 0.0 for w in plan.tuned]
        self.head = headroom(refs, sols)
        for k in plan.kernels:
            budget = min(len(k.legal), cfg.trials if cfg.trials is not None else trial_budget(self.head, len(k.legal)))
            kind = cfg.sampler if cfg.sampler != "auto" else ("brute" if len(k.legal) <= budget else "tpe")
            study = self._open(k.name, kind)
            self._check_resumable(k.name, study)
            fail_dead_workers(study)
            if kind == "brute" and k.is_open:
                trials = study.get_trials(deepcopy=False)
                pending = {params_key(t.params or t.system_attrs.get("fixed_params", {})) for t in trials
                           if t.state in (TrialState.WAITING, TrialState.RUNNING) or is_measured(t)}
                order = list(k.legal)
                random.Random(cfg.seed).shuffle(order)
                for params in order:
                    if params_key(params) not in pending:
                        study.enqueue_trial(params)
            for key, value in (("problem", plan.problem.id), ("pipeline", plan.pipeline), ("kernel", k.name),
                               ("space", {key: list(c.spellings) for key, c in k.space.choices.items()}),
                               ("tuned_workloads", [w.uuid for w in plan.tuned]), ("sampler", kind),
                               ("budget", budget)):
                study.set_user_attr(key, value)
            self.studies[k.name], self.budgets[k.name] = study, budget
        self.progress({"event": "start", "kernels": {k: self.budgets[k] for k in self.budgets}, "headroom": self.head,
                       "studies": dict(self.names)})

    def measured(self) -> list[tuple[float, dict[str, dict[str, str]], str, int]]:
        """Every complete trial of every study as ``(value, picks of every kernel, kernel, number)``, best first: a
        trial's picks are its kernel's params and the other kernels' as they were held (``context``)."""
        out = []
        for kernel, study in self.studies.items():
            for t in study.get_trials(deepcopy=False):
                if t.state is TrialState.COMPLETE and not is_duplicate(t):
                    picks = {**self.plan.first_picks(), **t.user_attrs.get("context", {}), kernel: dict(t.params)}
                    out.append((t.value, picks, kernel, t.number))
        return sorted(out, key=lambda m: m[0])

    def incumbent(self) -> tuple[float, dict[str, dict[str, str]]] | None:
        """``(value, picks)`` of the best combination measured so far (every study's trials), or None."""
        done = self.measured()
        return (done[0][0], done[0][1]) if done else None

    def current_picks(self) -> dict[str, dict[str, str]]:
        """Every kernel's pick in the best combination measured so far (each kernel at its best with the others at
        theirs), or each kernel's first legal combination before anything was measured."""
        best = self.incumbent()
        return best[1] if best is not None else self.plan.first_picks()

    # --- the loop ---------------------------------------------------------------------------------------

    def work(self) -> dict[str, str]:
        """Round-robin over the kernels with something to search until each stops; ``{kernel: reason}``."""
        cfg = self.config
        reasons: dict[str, str] = {k.name: "nothing to search (one legal kernel)" for k in self.plan.kernels
                                   if not k.is_open}
        active = [k.name for k in self.plan.kernels if k.is_open]
        since_gain = {k: 0 for k in active}
        def out_of_time() -> bool:
            if cfg.time_limit_s is None or time.monotonic() - self._start < cfg.time_limit_s:
                return False
            for k in active:
                reasons[k] = f"time limit ({cfg.time_limit_s:g} s)"
            active.clear()
            return True

        while active:
            if out_of_time():
                break
            best = self.incumbent()
            if best is not None and best[0] <= 1.0 + cfg.epsilon:
                for k in active:
                    reasons[k] = f"within (1+ε)·T_SOL (ε = {cfg.epsilon:g})"
                break
            for kernel in list(active):
                if out_of_time():
                    break
                measured = sum(1 for t in self.studies[kernel].get_trials(deepcopy=False) if is_measured(t))
                if measured >= self.budgets[kernel]:
                    reasons[kernel] = f"budget ({self.budgets[kernel]} trials)"
                    active.remove(kernel)
                    continue
                before = self.incumbent()
                if not self._one_trial(kernel):
                    reasons[kernel] = "no new legal combination to propose with the other kernels as they are"
                    active.remove(kernel)
                    continue
                after = self.incumbent()
                gained = after is not None and (before is None or after[0] < before[0] * (1 - 1e-3))
                since_gain[kernel] = 0 if gained else since_gain[kernel] + 1
                if since_gain[kernel] >= cfg.patience:
                    reasons[kernel] = f"patience ({cfg.patience} trials without a gain)"
                    active.remove(kernel)
        return reasons

    def _one_trial(self, kernel: str) -> bool:
        """Ask ``kernel``'s study for a new legal combination and measure the pipeline with it; False when the
        sampler proposed only combinations already measured in this context (or illegal ones)."""
        study, kplan = self.studies[kernel], self.plan.kernel(kernel)
        dists = kplan.space.distributions()
        picks = self.current_picks()
        context = {k: v for k, v in picks.items() if k != kernel}
        ckey = _context_key(context)
        known = {}
        for t in study.get_trials(deepcopy=False):
            if is_measured(t) and _context_key(t.user_attrs.get("context", {})) == ckey:
                known[params_key(t.params)] = t.value if t.state is TrialState.COMPLETE else None
        for _ in range(MAX_FREE_ASKS):
            trial = study.ask(dists)
            trial.set_user_attr("worker", self.worker_id)
            trial.set_user_attr("kernel", kernel)
            trial.set_user_attr("context", context)
            params = {k: trial.params[k] for k in dists}
            violations = kplan.space.violations(params)
            if violations:
                trial.set_user_attr("status", "ILLEGAL")
                trial.set_user_attr("reason", "; ".join(d.message for d in violations))
                study.tell(trial, state=TrialState.PRUNED)
                self.progress({"event": "pruned", "kernel": kernel, "number": trial.number, "params": params,
                               "reason": violations[0].message})
                continue
            same = kplan.space.representative(params) or params
            key = params_key(same)
            if key in known or params_key(params) != key:
                trial.set_user_attr("duplicate", True)
                value = known.get(key)
                if value is None:
                    trial.set_user_attr("status", "DUPLICATE")
                    trial.set_user_attr("reason", "measured (or failed) before with the other kernels as they are, "
                                        "or the same kernel spelled another way")
                    study.tell(trial, state=TrialState.PRUNED)
                else:
                    study.tell(trial, value)
                continue
            self._measure(kernel, study, trial, {**picks, kernel: params})
            return True
        return False

    def _measure(self, kernel: str, study: optuna.Study, trial: optuna.Trial, picks: dict) -> None:
        kplan = self.plan.kernel(kernel)
        params = picks[kernel]
        trial.set_user_attr("config", kplan.space.concrete(params).config_name())
        program = self.plan.concrete_program(picks)
        outcomes = self.measure(program, self.plan.tuned)
        trial.set_user_attr("latency_ms", {o.workload.uuid: o.latency_ms for o in outcomes})
        bad = [o for o in outcomes if not o.ok]
        if bad:
            o = bad[0]
            trial.set_user_attr("status", o.status)
            trial.set_user_attr("reason", f"{o.workload.label()}: {o.message}"[:2000])
            study.tell(trial, state=TrialState.FAIL)
            self.progress({"event": "trial", "kernel": kernel, "number": trial.number, "state": "FAIL",
                           "params": params, "reason": f"{o.status} on {o.workload.label()}: {o.message[:200]}"})
            return
        value = objective(outcomes)
        trial.set_user_attr("status", "PASSED")
        trial.set_user_attr("speedup_geomean", geomean([o.reference_ms / o.latency_ms for o in outcomes
                                                        if o.reference_ms]) if any(o.reference_ms for o in outcomes)
                            else None)
        study.tell(trial, value)
        best = self.incumbent()
        self.progress({"event": "trial", "kernel": kernel, "number": trial.number, "state": "COMPLETE",
                       "params": params, "value": value, "best": best[0] if best else value})

    # --- the end ----------------------------------------------------------------------------------------

    def finish(self, reasons: dict[str, str]) -> PipelineTuneResult:
        """Combine each kernel's best, grade it on every workload (falling back to the best single trial's
        combination, then to the first legal one when nothing was measured); collect every study's trials."""
        plan = self.plan
        tried: list[tuple[str, dict]] = []
        for _, picks, _, _ in self.measured():
            if all(picks != p for _, p in tried):
                tried.append(("best" if not tried else "runner-up", picks))
            if len(tried) == VERIFY_TRIES:
                break
        if not tried:
            tried = [("first legal", plan.first_picks())]
        chosen = outcomes = None
        failures: list[dict] = []
        for how, picks in tried:
            self.progress({"event": "verify", "how": how, "picks": picks})
            program = plan.concrete_program(picks)
            graded = self.measure(program, plan.problem.workloads)
            if all(o.ok for o in graded):
                chosen, outcomes = (how, picks, program), graded
                break
            o = next(o for o in graded if not o.ok)
            reason = f"{o.status} on {o.workload.label()}: {o.message[:200]}"
            failures.append({"how": how, "picks": picks, "reason": reason,
                             "workloads": [{"workload": g.workload.label(), "uuid": g.workload.uuid,
                                            "status": g.status, "time_ms": g.latency_ms,
                                            "reference_ms": g.reference_ms, "message": g.message[:2000]}
                                           for g in graded]})
            self.progress({"event": "verify-failed", "how": how, "reason": reason})
        best_value = None
        if chosen is not None:
            tuned = {w.uuid for w in plan.tuned}
            best_value = objective([o for o in outcomes if o.workload.uuid in tuned]) \
                if any(o.workload.uuid in tuned for o in outcomes) else None
        rows = []
        for k in plan.kernels:
            for t in self.studies[k.name].get_trials(deepcopy=False):
                if t.state is TrialState.WAITING:
                    continue
                rows.append({"kernel": k.name, "study": self.names[k.name], "number": t.number,
                             "state": t.state.name, "value": t.value, "params": t.params,
                             **{a: v for a, v in t.user_attrs.items() if a != "kernel"}})
        if chosen is None:
            why = "no combination passed on every workload" + (f" (the best: {failures[0]['reason']})"
                                                                 if failures else "")
        else:
            why = "; ".join(f"{k}: {r}" for k, r in reasons.items())
        return PipelineTuneResult(plan.problem.id, plan.pipeline, dict(self.names),
                                  chosen[1] if chosen else None, chosen[2].source if chosen else None, best_value,
                                  list(outcomes) if chosen else [], rows, reasons, why, list(plan.tuned),
                                  dict(self.budgets), self.head, time.monotonic() - self._start,
                                  chosen[0] if chosen else "none", verify_failures=failures)

    def exhaustive(self) -> dict[str, list[dict[str, str]]]:
        """``{kernel: its legal combinations}`` for each kernel searched exhaustively (``brute``: all of them will be
        measured), after :meth:`prepare`."""
        return {k.name: list(k.legal) for k in self.plan.kernels
                if k.is_open and self.studies[k.name].user_attrs.get("sampler") == "brute"}

    def run(self, prebuild: Callable[[Mapping[str, Sequence[Mapping[str, str]]]], Any] | None = None
            ) -> PipelineTuneResult:
        """Prepare, work and finish in this process.

        Args:
            prebuild: called once after :meth:`prepare` with :meth:`exhaustive` (e.g.
                :meth:`PipelineGraderMeasurer.prebuild`: every kernel those trials need compiled at once, in
                parallel, before the first trial).
        """
        with warnings.catch_warnings():  # TPE's multivariate and constant_liar are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.prepare()
            if prebuild is not None and self.exhaustive():
                prebuild(self.exhaustive())
            return self.finish(self.work())


class PipelineGraderMeasurer:
    """Builds a concrete pipeline's bound kernels (nvcc, content-addressed cache, in parallel) and grades the
    pipeline as one solution with :class:`ucutlass.grader.Grader` (its spawned worker, reused across trials).

    Args:
        build: compiles bound kernels (default :func:`ucutlass.build.build_kernels`; a test injects a fake).

    Attributes:
        so_paths: ``{program source: {build digest: .so path}}`` of every program built (the step report loads
            the best one from here).
    """

    def __init__(self, grader: Any, problem: Problem, source_file: str, pipeline: str | None,
                 jobs: int | None = None, build: Callable[..., Sequence[Any]] | None = None):
        from ucutlass.build import build_kernels

        self.grader, self.problem, self.source_file, self.pipeline, self.jobs = \
            grader, problem, source_file, pipeline, jobs
        self.build = build or build_kernels  # (kernels, source_file=, sources=, jobs=) -> [BuildResult]
        self.so_paths: dict[str, dict[str, str]] = {}

    def reference_ms(self, workload: Workload) -> float:
        return self.grader.reference_ms(workload)

    def prebuilt(self, plan: PipelinePlan, combos: Mapping[str, Sequence[Mapping[str, str]]]) -> list[Any]:
        """The bound kernels (one per build digest) that trials of these combinations build: each kernel resolved
        with its params and bound to the problem of each of its calls, as :func:`ucutlass.bind.bind_pipeline` binds
        it (a kernel's bound form does not depend on the other kernels' picks)."""
        from ucutlass.bind import bind, rebound
        from ucutlass.errors import CheckError

        found: dict[str, Any] = {}
        for name, many in combos.items():
            calls = [kc for kc in plan.binding.kernel_calls() if kc.kernel.name == name]
            for params in many:
                kernel = plan.program.resolve({f"{name}.{k}": v for k, v in params.items()}).kernel(name)
                for kc in calls:
                    try:
                        bound = bind(rebound(kernel), kc.binding.problem).kernel
                    except CheckError:
                        continue  # the trial says why
                    found.setdefault(bound.build_digest(), bound)
        return list(found.values())

    def prebuild(self, plan: PipelinePlan, combos: Mapping[str, Sequence[Mapping[str, str]]]) -> int:
        """Compile :meth:`prebuilt`'s kernels at once (``jobs`` nvcc processes; the content-addressed cache keeps
        them, so the trials find them built); returns how many built or were cached. A failed build is left for
        its trial to report."""
        kernels = self.prebuilt(plan, combos)
        results = self.build(kernels, source_file=self.source_file, sources=None, jobs=self.jobs)
        return sum(1 for r in results if r.ok)

    def solution(self, program: Any):
        """The :class:`ucutlass.grader.SolutionRef` of a built program, or a one-line error (a failed build)."""
        from ucutlass.bind import bind_pipeline
        from ucutlass.solution import pipeline_solution

        binding = bind_pipeline(program, self.problem, self.pipeline)
        bound: dict[str, Any] = {}
        for kc in binding.kernel_calls():
            bound.setdefault(kc.bound_kernel.build_digest(), kc.bound_kernel)
        results = self.build(list(bound.values()), source_file=self.source_file,
                             sources=[program.source] * len(bound), jobs=self.jobs)
        for r in results:
            if not r.ok:
                return f"{r.name}: {r.error or r.log[-2000:]}"
        self.so_paths[program.source] = {d: str(r.so_path) for d, r in zip(bound, results)}
        name = "+".join(k.config_name() for k in bound.values())
        return pipeline_solution(self.so_paths[program.source], program.source, self.source_file, name, self.pipeline)

    def __call__(self, program: Any, workloads: Sequence[Workload]) -> list[Outcome]:
        from ucutlass.errors import CheckError

        try:
            ref = self.solution(program)
        except CheckError as e:
            return [Outcome(w, "BIND_ERROR", message=str(e)) for w in workloads]
        if isinstance(ref, str):
            return [Outcome(w, "COMPILE_ERROR", message=ref) for w in workloads]
        results = self.grader.grade(ref, list(workloads))
        by_uuid = {w.uuid: w for w in workloads}
        return [Outcome(workload=by_uuid[r.workload_uuid], status=str(r.status), latency_ms=r.latency_ms,
                        reference_ms=r.reference_latency_ms, t_sol_ms=r.t_sol_ms, message=r.reason,
                        record=r.to_json()) for r in results]
