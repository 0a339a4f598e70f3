"""The tuner's loop on a CPU, with an injected builder and a fake timer (no nvcc, no GPU)."""

from __future__ import annotations

import json
import math
import time

import optuna
import pytest

from search_fakes import FakeBuild, FakeMeasure, make_plan, make_tuner  # tests/ is on sys.path

from ucutlass.lang import parse
from ucutlass.search import StopRule, TuneConfig, trial_budget
from ucutlass.search.report import format_table, write_outputs
from ucutlass.search.study import representative_workloads

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def tune_plan():
    return make_plan()


def test_plan_prunes_illegal_configs_before_any_compile(tune_plan):
    assert tune_plan.space.size == 16
    # cooperative needs tile M >= 128 (64x128x64), pingpong cannot take tile M = 256
    assert len(tune_plan.legal) == 12
    assert any("cooperative" in m for m in tune_plan.rejected)
    assert len(tune_plan.tuned) == 3


def test_the_rules_run_once_per_combination(monkeypatch):
    """Enumerating the legal space, then asking a proposal's violations, representative and kernel (as the
    tuner's ask loop does) checks each combination against each workload once, not once per question."""
    import ucutlass.search.space as space_module

    calls = []
    real = space_module.arch.check_kernel
    monkeypatch.setattr(space_module.arch, "check_kernel", lambda k, ext=None: calls.append(1) or real(k, ext))
    space = make_plan().space
    calls.clear()
    space._memo.clear()
    space.__dict__.pop("_legal_by_identity", None)  # made by the plan: enumerate again, counted
    space.legal_params()
    per_pass = len(calls)
    assert per_pass == space.size * len(space.extents or ({},))
    for p in space.all_params():
        space.violations(p), space.representative(p), space.concrete(p)
    assert len(calls) == per_pass


def test_representative_workloads_span_smallest_and_largest(tune_plan):
    b = tune_plan.binding
    work = [math.prod(b.extents(w).values()) for w in tune_plan.problem.workloads]
    chosen = representative_workloads(b, 3)
    sizes = [math.prod(b.extents(w).values()) for w in chosen]
    assert min(sizes) == min(work) and max(sizes) == max(work)


def test_tuner_finds_the_fastest_legal_config_and_records_failures(tune_plan):
    build, measure = FakeBuild(), FakeMeasure(crash_tile="128x128x64")
    result = make_tuner(tune_plan, build, measure, config=TuneConfig(batch=4, seed=1, trials=40, epsilon=0.0,
                                                                     patience=100, sampler="brute")).run()
    # 256x128x64 fails to "compile", 128x128x64 "crashes": the best is 128x192x64 with cluster 2
    assert result.best.params["tile"] == "128x192x64"
    assert result.best.params["cluster"] == "2x1x1"
    assert result.best.params["schedule"] == "cooperative"
    assert result.best_value == pytest.approx(1.2 * 0.9)
    states = {t["number"]: (t["state"], t.get("status")) for t in result.trials}
    assert ("FAIL", "COMPILE_ERROR") in states.values()
    assert ("FAIL", "CRASHED") in states.values()
    # exhaustive mode enqueues only legal configurations
    assert all(state != "PRUNED" for state, _ in states.values())
    # the space was exhausted: every legal config measured or failed exactly once (then verified)
    assert "all 12 legal configurations tried" in result.stop_reason
    # the best is verified on every workload, not only the tuned ones
    assert len(result.best_outcomes) == len(tune_plan.problem.workloads)


def test_tpe_prunes_illegal_proposals_without_building_them(tune_plan):
    build, measure = FakeBuild(), FakeMeasure()
    cfg = TuneConfig(batch=4, seed=0, trials=30, epsilon=0.0, patience=100, sampler="tpe")
    result = make_tuner(tune_plan, build, measure, config=cfg).run()
    pruned = [t for t in result.trials if t["state"] == "PRUNED" and t.get("status") == "ILLEGAL"]
    assert pruned and all(tune_plan.space.violations(t["params"]) for t in pruned)
    assert all("cooperative" in t["reason"] or "pingpong" in t["reason"] for t in pruned)
    for params in build.calls:  # no illegal configuration ever reached the builder
        assert not tune_plan.space.violations(params)
    assert result.best is not None
    # pruned and duplicate proposals are free: the budget buys 12 distinct legal configurations
    measured = {json.dumps(t["params"], sort_keys=True) for t in result.trials
                if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")}
    assert len(measured) == 12 and "all 12 legal configurations tried" in result.stop_reason


def test_stop_rule_within_epsilon_of_sol(tune_plan):
    build, measure = FakeBuild(), FakeMeasure()
    cfg = TuneConfig(batch=2, seed=0, trials=40, epsilon=0.5, sampler="brute")  # 1.2·0.9 ≤ 1.5 stops early
    result = make_tuner(tune_plan, build, measure, config=cfg).run()
    assert "within 50% of T_SOL" in result.stop_reason
    assert result.best_value <= 1.5


def test_study_resumes_from_storage_without_measuring_again(tune_plan, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    cfg = TuneConfig(batch=4, seed=3, trials=8, epsilon=0.0, patience=100, sampler="brute")
    m1 = FakeMeasure()
    r1 = make_tuner(tune_plan, FakeBuild(), m1, config=cfg, storage=storage, study_name="s").run()
    first = {json.dumps(p, sort_keys=True) for p in m1.measured}
    m2 = FakeMeasure()
    cfg2 = TuneConfig(batch=4, seed=3, trials=24, epsilon=0.0, patience=100, sampler="brute")
    r2 = make_tuner(tune_plan, FakeBuild(), m2, config=cfg2, storage=storage, study_name="s").run()
    second = [json.dumps(p, sort_keys=True) for p in m2.measured]
    # the resumed run measures new configurations; only the final verification repeats the best
    repeated = [p for p in second if p in first]
    assert len(repeated) <= 1
    assert len(r2.trials) > len(r1.trials)
    assert r2.best_value <= r1.best_value


def test_budget_grows_with_headroom_and_is_capped_by_the_space():
    assert trial_budget(1.0, 100) == 8
    assert trial_budget(2.0, 100) == 24
    assert trial_budget(8.0, 100) == 56
    assert trial_budget(8.0, 10) == 10
    assert trial_budget(1e9, 1000) == 96


def test_stop_rule_patience():
    rule = StopRule(epsilon=0.1, patience=3, budget=100)
    for v in (3.0, 2.0, 2.0, 2.0):
        rule.record(v)
    assert not rule.should_stop()
    rule.record(1.99)  # less than 1% gain
    assert rule.should_stop() and "without" in rule.reason


def test_stop_rule_time_limit():
    rule = StopRule(budget=100, time_limit_s=0.0)
    assert rule.should_stop() and "time limit" in rule.reason


def test_time_limit_cuts_a_batch_between_trials(tune_plan):
    """--time-limit holds inside a batch: once it has passed (and something passed), the batch's other trials are
    told UNMEASURED instead of measured (an H100 tune with a 300 s limit measured a 16-trial batch to 514 s)."""
    measure = FakeMeasure(delay_s=0.3)
    cfg = TuneConfig(batch=12, seed=0, trials=40, epsilon=0.0, patience=100, sampler="brute", time_limit_s=0.5)
    t0 = time.monotonic()
    result = make_tuner(tune_plan, FakeBuild(), measure, config=cfg).run()
    search = result.search_seconds
    states = [(t["state"], t.get("status")) for t in result.trials]
    measured = sum(1 for state, _ in states if state in ("COMPLETE", "FAIL"))
    unmeasured = sum(1 for _, status in states if status == "UNMEASURED")
    assert result.best is not None and 1 <= measured < 12 and unmeasured == 12 - measured  # one batch of 12
    assert "time limit" in result.stop_reason
    assert search < 12 * 0.3 - 1.0, search  # the limit and one trial past it, not the whole batch
    assert time.monotonic() - t0 < 12 * 0.3 + 10


def test_the_study_keeps_the_reference_times(tune_plan):
    """The tuned workloads' reference and T_SOL times are in the study, so a run cut before its verification still
    gives each trial's speedups from the storage alone."""
    tuner = make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=TuneConfig(batch=4, seed=1, trials=4,
                                                                                sampler="brute"))
    tuner.run()
    attrs = tuner.study.user_attrs
    assert set(attrs["reference_ms"]) == set(attrs["tuned_workloads"]) == set(attrs["t_sol_ms"])
    for t in tuner.study.get_trials(deepcopy=False):
        if t.state.name == "COMPLETE":
            ratios = [attrs["reference_ms"][u] / ms for u, ms in t.user_attrs["latency_ms"].items()]
            assert math.prod(ratios) ** (1 / len(ratios)) == pytest.approx(t.user_attrs["speedup_geomean"])


def test_report_files(tune_plan, tmp_path):
    result = make_tuner(tune_plan, FakeBuild(), FakeMeasure(),
                        config=TuneConfig(batch=4, seed=1, trials=12, sampler="brute")).run()
    paths = write_outputs(result, tmp_path)
    best = paths["best"].read_text()
    assert "{" not in best.split("epilogue")[0].split("schedule")[1]  # choices resolved in the text
    reparsed = parse(best).kernel()
    assert reparsed.is_concrete()
    assert reparsed.tile == result.best.kernel.tile
    doc = json.loads(paths["json"].read_text())
    assert doc["best"]["config"] == result.best.kernel.config_name()
    assert len(doc["workloads"]) == len(tune_plan.problem.workloads)
    table = format_table(result)
    assert "geomean speedup" in table
    assert paths["csv"].read_text().count("\n") == len(result.trials) + 1


def _brute(**kw):
    return TuneConfig(batch=4, seed=1, trials=12, sampler="brute", epsilon=0.0, patience=100, **kw)


def test_dispatch_when_small_and_large_m_want_different_kernels(tune_plan, tmp_path):
    """Decode (M < 1000) is fastest on 64-row tiles, prefill on 128x192 tiles: tune keeps both, by range of M."""
    measure = FakeMeasure(by_m=True)
    result = make_tuner(tune_plan, FakeBuild(), measure, config=_brute()).run()
    d = result.dispatch
    assert d is not None
    assert [k["when"] for k in d.kernels] == ["M <= 252", None]  # √(64 · 1000): between decode's and prefill's M
    assert d.kernels[0]["params"]["tile"] == "64x128x64" and d.kernels[0]["kernel"] == "qkv_proj_m252"
    assert d.kernels[1]["params"]["tile"] == "128x192x64" and d.kernels[1]["kernel"] == "qkv_proj"
    assert measure.dispatches == [["qkv_proj_m252", "qkv_proj"]]  # graded once, as one solution
    by_label = {o.workload.label(): o.latency_ms for o in d.outcomes}
    single = {o.workload.label(): o.latency_ms for o in d.single_outcomes}
    assert all(by_label[w] <= single[w] for w in by_label)
    assert by_label["batch_size=1,seq_len=1"] < single["batch_size=1,seq_len=1"]
    paths = write_outputs(result, tmp_path)
    program = parse(paths["best"].read_text())
    assert [(k.name, k.when) for k in program.dispatch()] == [("qkv_proj_m252", ("M", 252)), ("qkv_proj", None)]
    assert [k.tile for k in program.dispatch()] == [(64, 128, 64), (128, 192, 64)]
    doc = json.loads(paths["json"].read_text())
    assert doc["dispatch"]["geomean_speedup"] > doc["dispatch"]["single_best_geomean_speedup"]
    rows = {r["workload"]: r for r in doc["workloads"]}
    assert rows["batch_size=64,seq_len=1"]["kernel"] == "qkv_proj_m252"
    assert rows["batch_size=1,seq_len=1000"]["kernel"] == "qkv_proj"
    table = format_table(result)
    assert "qkv_proj_m252" in table and "single ms" in table


def test_no_dispatch_when_one_kernel_wins_everywhere_or_it_is_switched_off(tune_plan):
    assert make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=_brute()).run().dispatch is None
    result = make_tuner(tune_plan, FakeBuild(), FakeMeasure(by_m=True), config=_brute(dispatch=1)).run()
    assert result.dispatch is None


def test_a_dispatch_that_fails_its_check_leaves_the_single_best(tune_plan, tmp_path):
    measure = FakeMeasure(by_m=True, dispatch_status="INCORRECT_NUMERICAL")
    events = []
    result = make_tuner(tune_plan, FakeBuild(), measure, config=_brute(), progress=events.append).run()
    assert result.dispatch is None and result.best is not None
    assert any(e["event"] == "dispatch-failed" and "INCORRECT_NUMERICAL" in e["reason"] for e in events)
    assert parse(write_outputs(result, tmp_path)["best"].read_text()).dispatch() == ()


class _TimedBuild(FakeBuild):
    """FakeBuild that takes ``seconds`` per batch and records when each batch was built."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds, self.spans = seconds, []

    def __call__(self, candidates):
        import time

        t0 = time.monotonic()
        time.sleep(self.seconds)
        out = super().__call__(candidates)
        self.spans.append((t0, time.monotonic()))
        return out


class _TimedMeasure(FakeMeasure):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.spans = []

    def __call__(self, cand, workloads):
        import time

        t0 = time.monotonic()
        out = super().__call__(cand, workloads)
        self.spans.append((t0, time.monotonic()))
        return out


def test_the_next_batch_is_built_while_this_one_is_measured(tune_plan):
    """nvcc runs beside the grader: the GPU does not wait for the compiler between batches."""
    build, measure = _TimedBuild(0.3), _TimedMeasure(delay_s=0.1)
    result = make_tuner(tune_plan, build, measure, config=TuneConfig(batch=4, seed=1, trials=12, epsilon=0.0,
                                                                     patience=100, sampler="random")).run()
    assert len(build.spans) >= 3
    first_measure_end = measure.spans[3][1]  # the first batch: 4 candidates measured
    second_build_start = build.spans[1][0]
    assert second_build_start < first_measure_end, (build.spans, measure.spans[:4])
    assert not [t for t in result.trials if t["state"] == "RUNNING"]


def test_a_batch_built_ahead_when_the_study_stops_is_not_measured(tune_plan):
    """ε = 10: the first batch is within (1 + ε)·T_SOL, so the study stops with the next batch built."""
    build, measure = _TimedBuild(0.05), FakeMeasure()
    result = make_tuner(tune_plan, build, measure, config=TuneConfig(batch=3, seed=1, trials=12, epsilon=10.0,
                                                                     patience=100, sampler="random")).run()
    statuses = [t.get("status") for t in result.trials]
    assert "SOL" in result.stop_reason or "ε" in result.stop_reason, result.stop_reason
    assert len(build.spans) == 2  # the first batch, and the one built ahead
    assert statuses.count("UNMEASURED") >= 1
    assert len(measure.measured) == statuses.count("PASSED") + statuses.count("CRASHED") + 1  # + the verification
    assert not [t for t in result.trials if t["state"] == "RUNNING"]


def test_patience_counts_only_trials_proposed_after_the_best_was_known():
    """A batch is proposed before any of it is measured: its trials after the best say nothing about a stall
    (2026-12-01: a tune stopped after its first batch of 16, on "13 trials without a 1% gain")."""
    rule = StopRule(epsilon=0.0, patience=3, budget=100)
    assert rule.record(2.0)  # the best, first of its batch
    for v in (3.0, 3.1, 3.2, 3.3, 3.4):  # the rest of the same batch: proposed before the best was known
        assert not rule.record(v, informed=False)
    assert not rule.should_stop() and rule.since_gain == 0
    for v in (3.0, 3.1, 3.2):  # the next batch, proposed knowing the best: a stall
        rule.record(v)
    assert rule.should_stop() and "3 trials without" in rule.reason
