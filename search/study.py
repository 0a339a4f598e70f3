"""What a tune's study is made of, apart from the loop that runs it (:mod:`search.tuner`): the run's knobs
(:class:`TuneConfig`) and decisions (:class:`Setup`), a candidate and its outcomes, what a run returns
(:class:`TuneResult`, :class:`Dispatch`), the objective, the sampler, and what a stored trial is (measured,
a duplicate, interrupted, in flight). Shared by the one-kernel tuner, the pipeline tuner
(:mod:`search.pipeline_tune`), the distributed workers and the reports."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from ucutlass.bind import Binding
from ucutlass.build import BuildResult
from ucutlass.ir import GemmKernel, Program
from ucutlass.problem import Workload

from .budget import geomean


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

    def dispatch(self, program: Program, builds: Sequence[BuildResult], workloads: Sequence[Workload]
                 ) -> list[Outcome]:
        """Grade a dispatch program (its kernels built in ``builds``, in order) as one solution."""
        ...


BuildFn = Callable[[Sequence[Candidate]], Sequence[BuildResult]]


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
        dispatch: at most this many kernels in the result, one per range of M (a GEMM's dispatch,
            :mod:`search.portfolio`); 1 keeps the single best configuration.
        dispatch_gain: a kernel joins the dispatch, and a range stays apart from its neighbour, only when it
            shortens the geomean time over every workload by at least this fraction.
        dispatch_workloads: the dispatch's candidates are timed on this many workloads spread over the range of
            work (:func:`representative_workloads`); the dispatch chosen is then graded on every workload.
        sol_timeout_s: T_SOL counts the problem's reference in a child process; loading it, and counting each
            workload, must each finish within this many seconds (``ucutlass tune --timeout``).
    """

    trials: int | None = None
    epsilon: float = 0.25
    patience: int = 12
    batch: int = 8
    max_workloads: int = 6
    sampler: str = "auto"
    seed: int = 0
    time_limit_s: float | None = None
    dispatch: int = 3
    dispatch_gain: float = 0.05
    dispatch_workloads: int = 12
    sol_timeout_s: float = 60.0


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
    search_seconds: float | None = None  # from the first trial asked to the last told (no verification)
    dispatch: "Dispatch | None" = None  # several kernels by range of M, when they beat the single best


@dataclass
class Dispatch:
    """The kernels ``tune`` keeps when one configuration is not fastest everywhere (:mod:`search.portfolio`).

    Attributes:
        source: the concrete `.ucut` dispatch program (``kernel … when M <= 64 { … }``), written as best.ucut.
        kernels: per kernel of the program, in order: ``{"kernel", "when", "trial", "params", "config"}``.
        outcomes: the dispatch graded as one solution on every workload (what the table reports).
        single_outcomes: the single best configuration on every workload, for comparison.
        served: ``{workload uuid: the kernel that serves it}``.
    """

    source: str
    kernels: list[dict]
    outcomes: list[Outcome]
    single_outcomes: list[Outcome]
    served: dict[str, str]


def representative_workloads(binding: Binding, k: int) -> list[Workload]:
    """Up to ``k`` workloads spread evenly over the range of GEMM work (2·M·N·K), smallest and
    largest included, so decode and prefill shapes both steer the search."""
    work = sorted(binding.problem.workloads, key=lambda w: math.prod(binding.extents(w).values()))
    if len(work) <= k:
        return work
    idx = sorted({round(i * (len(work) - 1) / (k - 1)) for i in range(k)}) if k > 1 else [len(work) - 1]
    return [work[i] for i in idx]


def objective(outcomes: Sequence[Outcome]) -> float:
    """geomean(T_kernel / T_SOL); falls back to T_kernel / T_ref when a T_SOL is missing."""
    ratios = []
    for o in outcomes:
        denom = o.t_sol_ms if o.t_sol_ms and o.t_sol_ms > 0 else o.reference_ms
        ratios.append(o.latency_ms / denom)
    return geomean(ratios)


def make_sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (the default, also behind ``brute``, whose configurations are enqueued) or random."""
    if kind in ("tpe", "brute"):
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown sampler {kind!r} (valid: auto, tpe, random, brute)")


@dataclass
class Setup:
    """What a run decided before its first trial; kept in the study's ``setup`` user attribute, so every
    worker of the study reads the same decisions.

    Attributes:
        budget: measured trials (complete or failed) the study may have, earlier runs included.
        sampler: ``tpe``, ``random`` or ``brute``.
        headroom: geomean(T_ref / T_SOL) over the tuned workloads.
        legal: legal configurations in the space.
        tuned: uuids of the tuned workloads.
        finished_at_start: measured trials when the run started (they count for the budget and the best,
            not for patience).
    """

    budget: int
    sampler: str
    headroom: float
    legal: int
    tuned: list[str]
    finished_at_start: int = 0


# --- what a stored trial is -----------------------------------------------------------------------------

def trial_params(t: FrozenTrial) -> dict:
    """A trial's params; for a queued trial not yet asked, the params it was queued with."""
    return t.params or t.system_attrs.get("fixed_params", {})


def is_duplicate(t: FrozenTrial) -> bool:
    """Given up because its configuration was measured, queued twice or held by another worker."""
    return bool(t.user_attrs.get("duplicate"))


def is_interrupted(t: FrozenTrial) -> bool:
    """Failed because its worker stopped (killed, crashed, lost): a FAIL the tuner did not tell itself."""
    return t.state is TrialState.FAIL and "status" not in t.user_attrs


def is_measured(t: FrozenTrial) -> bool:
    """A configuration built and measured (or failed doing so): what the budget counts."""
    return t.state in (TrialState.COMPLETE, TrialState.FAIL) and not is_duplicate(t) and not is_interrupted(t)


def is_candidate(t: FrozenTrial) -> bool:
    """A legal configuration some worker is building or measuring now."""
    return t.state is TrialState.RUNNING and "config" in t.user_attrs and not is_duplicate(t)
