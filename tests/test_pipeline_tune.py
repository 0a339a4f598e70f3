"""Tuning a pipeline per kernel (issue 16 item 4): the plan, one study per kernel in one storage, round-robin with the
other kernels at their best, resume, best.ucut, the step report; on the CPU with a fake measurer (no nvcc, no GPU)
and the emulated pipeline; one `gpu` test tunes a tiny pipeline for real."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass.bind import bind_pipeline
from ucutlass.cli import main
from ucutlass.emulate import emulate_pipeline
from ucutlass.errors import UcutError
from ucutlass.lang import parse
from ucutlass.problem import find_problem
from ucutlass.search.pipeline_plan import plan_pipeline
from ucutlass.search.pipeline_report import format_steps, step_report, write_pipeline_outputs
from ucutlass.search.pipeline_tune import PipelineTuner
from ucutlass.search.study import Outcome, TuneConfig

EX = REPO / "examples"
GATE_UP = (EX / "pipeline_gate_up_gelu.ucut", "L1_048_fused_gate_up_projection_with_swiglu")
QKV = (EX / "pipeline_qkv_heads.ucut", "L1_050_attention_qkv_projection_with_bias_and_reshape")
CONCRETE = "tile = 128x128x64   schedule = cooperative"
OPEN = "tile = {128x128x64, 128x256x64, 64x128x64}   schedule = {cooperative, pingpong}"


def _problem(pid: str):
    try:
        return find_problem(pid, [SHARED_SOL_EXECBENCH])
    except Exception as e:  # noqa: BLE001  (a shared problem missing beside this clone)
        pytest.skip(f"problem {pid} not found: {e}")


def opened(path: Path) -> str:
    """A shipped example with its kernels' tile and schedule left open (the examples are concrete)."""
    text = path.read_text()
    assert CONCRETE in text, path
    return text.replace(CONCRETE, OPEN)


@pytest.fixture(scope="module")
def gate_up_plan():
    path, pid = GATE_UP
    return plan_pipeline(_problem(pid), parse(opened(path), "gate_up.ucut"), source_file="gate_up.ucut",
                         max_workloads=3)


class FakePipelineMeasure:
    """Deterministic times: per kernel a time by tile (and 10% more for pingpong), summed; T_SOL 0.1 ms."""

    TILE_MS = {"128x128x64": 1.0, "128x256x64": 0.7, "64x128x64": 1.5}

    def __init__(self, fail_tile: str | None = None):
        self.fail_tile = fail_tile
        self.measured: list[dict] = []  # per call: {kernel: (tile, schedule)}, workloads

    def reference_ms(self, workload):
        return 5.0

    def picks(self, program) -> dict:
        out = {}
        for k in program.kernels:
            m = re.search(r"_(\d+x\d+x\d+)_\d+x\d+x\d+_(cooperative|pingpong)_", k.config_name())
            out[k.name] = (m.group(1), m.group(2))
        return out

    def __call__(self, program, workloads):
        picks = self.picks(program)
        self.measured.append({"picks": picks, "workloads": len(workloads)})
        if any(t == self.fail_tile for t, _ in picks.values()):
            return [Outcome(w, "INCORRECT_NUMERICAL", message="fake mismatch") for w in workloads]
        ms = sum(self.TILE_MS[t] * (1.1 if s == "pingpong" else 1.0) for t, s in picks.values())
        return [Outcome(w, "PASSED", latency_ms=ms, reference_ms=5.0, t_sol_ms=0.1) for w in workloads]


# --- the plan ------------------------------------------------------------------------------------------------

def test_the_plan_gives_each_kernel_the_shapes_of_its_calls(gate_up_plan):
    p = gate_up_plan
    problem = p.problem
    assert [k.name for k in p.kernels] == ["up", "gate"] and p.pipeline == "swiglu"
    up, gate = p.kernels
    assert up.steps == [0] and gate.steps == [1]
    w = problem.workloads[0]
    axes = problem.resolve_axes(w)
    (call,) = up.shapes[w.uuid]
    assert call["b"][0] == (axes["intermediate_size"], axes["hidden_size"])
    m = axes["batch_size"] * axes["seq_len"]
    assert {"M": m, "N": axes["intermediate_size"], "K": axes["hidden_size"]} in up.extents
    assert gate.shapes[w.uuid][0]["u"][0][-1] == axes["intermediate_size"]  # the up GEMM's output, in the epilogue
    # 6 combinations; 128x256x64 + pingpong spills, 64x128x64 + cooperative breaks the cooperative rule
    assert up.space.size == 6 and len(up.legal) == 4 and up.is_open and sum(up.rejected.values()) == 2
    assert len(p.tuned) == 3 and len({t.uuid for t in p.tuned}) == 3
    text = p.describe()
    assert "kernel up (steps 1)" in text and "kernel gate (steps 2)" in text and "4 legal" in text


def test_a_kernel_called_three_times_serves_every_call():
    path, pid = QKV
    p = plan_pipeline(_problem(pid), parse(path.read_text().replace(
        "tile = 128x128x64   schedule = cooperative", "tile = {128x128x64, 128x256x64}   schedule = cooperative"),
        "qkv.ucut"), max_workloads=2)
    (proj,) = p.kernels
    assert proj.steps == [0, 1, 2] and len(proj.legal) == 2
    w = p.problem.workloads[0]
    assert len(proj.shapes[w.uuid]) == 3
    assert {e["N"] for e in proj.extents} >= {proj.shapes[w.uuid][i]["b"][0][0] for i in range(3)}


# --- the search ----------------------------------------------------------------------------------------------

def test_one_study_per_kernel_in_one_storage_round_robin(gate_up_plan, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    measure = FakePipelineMeasure()
    result = PipelineTuner(gate_up_plan, measure, lambda w: 0.1, config=TuneConfig(max_workloads=3),
                           storage=storage).run()
    pid = gate_up_plan.problem.id
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    assert names == {f"{pid}/up", f"{pid}/gate"} and result.studies == {"up": f"{pid}/up", "gate": f"{pid}/gate"}
    searched = [m for m in measure.measured if m["workloads"] == 3]
    assert len(searched) == 8  # 4 legal each, exhaustive (budget >= legal)
    # round-robin: up, gate, up, gate, …; a trial of one kernel holds the other at its best so far
    complete = sorted((t for t in result.trials if t["state"] == "COMPLETE" and not t.get("duplicate")),
                      key=lambda t: t["number"])
    assert {t["kernel"] for t in complete} == {"up", "gate"}
    for t in complete:
        assert set(t["context"]) == {"up", "gate"} - {t["kernel"]}
        assert t["status"] == "PASSED" and t["config"] and set(t["latency_ms"]) == {w.uuid for w in gate_up_plan.tuned}
    assert all(set(m["picks"]) == {"up", "gate"} for m in measure.measured)
    # the fastest tile of each kernel, combined, is graded on every workload and written out
    assert result.picks == {"up": {"tile": "128x256x64", "schedule": "cooperative"},
                            "gate": {"tile": "128x256x64", "schedule": "cooperative"}}
    assert result.how == "best" and len(result.outcomes) == len(gate_up_plan.problem.workloads)
    assert measure.measured[-1]["workloads"] == len(gate_up_plan.problem.workloads)
    assert result.best_value == pytest.approx(1.4 / 0.1)
    best = parse(result.source, "best.ucut")
    assert best.is_concrete() and "tile = 128x256x64   schedule = cooperative" in result.source
    assert result.source.startswith("# A pipeline for")  # comments kept
    assert len(bind_pipeline(best, gate_up_plan.problem).kernel_calls()) == 2


def test_the_other_kernel_is_held_at_its_best(gate_up_plan):
    measure = FakePipelineMeasure()
    tuner = PipelineTuner(gate_up_plan, measure, lambda w: 0.1, config=TuneConfig(max_workloads=3, sampler="brute"))
    tuner.run()
    trials = {k: sorted((t for t in tuner.studies[k].get_trials() if t.state.name == "COMPLETE"
                         and not t.user_attrs.get("duplicate")), key=lambda t: t.datetime_complete)
              for k in ("up", "gate")}
    everything = sorted([t for ts in trials.values() for t in ts], key=lambda t: t.datetime_complete)
    assert [t.user_attrs["kernel"] for t in everything[:6]] == ["up", "gate"] * 3  # round-robin

    def picks(t):
        return {**t.user_attrs["context"], t.user_attrs["kernel"]: t.params}

    for i, t in enumerate(everything):  # the others as in the best combination measured before it
        other = "gate" if t.user_attrs["kernel"] == "up" else "up"
        want = picks(min(everything[:i], key=lambda u: u.value))[other] if i else gate_up_plan.first_picks()[other]
        assert t.user_attrs["context"][other] == want


def test_a_resumed_run_measures_only_what_is_left(gate_up_plan, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = FakePipelineMeasure()
    PipelineTuner(gate_up_plan, first, lambda w: 0.1, config=TuneConfig(trials=2, max_workloads=3),
                  storage=storage).run()
    assert sum(1 for m in first.measured if m["workloads"] == 3) == 4
    second = FakePipelineMeasure()
    result = PipelineTuner(gate_up_plan, second, lambda w: 0.1, config=TuneConfig(trials=4, max_workloads=3),
                           storage=storage).run()
    assert sum(1 for m in second.measured if m["workloads"] == 3) == 4  # 2 more per kernel, not 4
    assert result.budgets == {"up": 4, "gate": 4}
    assert result.picks["up"]["tile"] == result.picks["gate"]["tile"] == "128x256x64"


def test_a_resumed_study_with_other_choices_is_refused(gate_up_plan, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    PipelineTuner(gate_up_plan, FakePipelineMeasure(), lambda w: 0.1, config=TuneConfig(trials=1, max_workloads=3),
                  storage=storage).run()
    path, pid = GATE_UP
    other = plan_pipeline(gate_up_plan.problem, parse(path.read_text().replace(
        CONCRETE, "tile = {128x128x64, 128x256x64}   schedule = cooperative"), "g.ucut"), max_workloads=3)
    with pytest.raises(UcutError, match="other choices of kernel up"):
        PipelineTuner(other, FakePipelineMeasure(), lambda w: 0.1, storage=storage).prepare()


def test_failing_trials_are_recorded_and_the_best_passes(gate_up_plan, tmp_path):
    measure = FakePipelineMeasure(fail_tile="64x128x64")
    result = PipelineTuner(gate_up_plan, measure, lambda w: 0.1, config=TuneConfig(max_workloads=3)).run()
    failed = [t for t in result.trials if t["state"] == "FAIL"]
    assert failed and all(t["status"] == "INCORRECT_NUMERICAL" and "fake mismatch" in t["reason"] for t in failed)
    assert result.source is not None and "64x128x64" not in result.source.split("pipeline")[0].split("#")[-1]
    paths = write_pipeline_outputs(result, tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["studies"] == result.studies and len(doc["workloads"]) == len(gate_up_plan.problem.workloads)
    assert paths["best"].read_text() == result.source and "geomean speedup" in paths["table"].read_text()


# --- the step report -----------------------------------------------------------------------------------------

def test_step_report_shares_sum_to_one_on_the_emulated_pipeline(tmp_path):
    path, pid = QKV
    problem = _problem(pid)
    fn = emulate_pipeline(parse(path.read_text(), str(path)), problem)
    seen = []
    fn.on_step = lambda i, phase: seen.append((i, phase))
    w = min(problem.workloads, key=lambda w: w.axes.get("batch_size", 1) * w.axes.get("seq_len", 1))
    from ucutlass.search.pipeline_report import empty_outputs

    fn(*problem.make_inputs(w).values(), *empty_outputs(problem, w, "cpu"))
    assert seen == [(i, p) for i in range(3) for p in ("start", "end")]
    fn.on_step = None
    (report,) = step_report(fn, problem, [w], lambda w: 2.0, reps=1, warmup=0)
    assert fn.on_step is None
    assert [s["step"] for s in report["steps"]] == [1, 2, 3]
    assert sum(s["share"] for s in report["steps"]) == pytest.approx(1.0)
    assert all(s["ms"] > 0 and s["of_t_sol"] == pytest.approx(s["ms"] / 2.0) for s in report["steps"])
    assert report["steps"][0]["kinds"] == ["kernel proj"]
    table = format_steps([report])
    assert "1. q = proj(hidden_states, q_weight, q_bias)" in table and "%" in table


# --- the command ---------------------------------------------------------------------------------------------

def test_cli_tune_on_a_pipeline_plans_and_needs_a_gpu(tmp_path, capsys):
    import torch

    path, pid = GATE_UP
    _problem(pid)
    spec = tmp_path / "gate_up.ucut"
    spec.write_text(opened(path))
    common = ["tune", pid, "--spec", str(spec), "--problems", str(SHARED_SOL_EXECBENCH), "--out", str(tmp_path / "o")]
    assert main([*common, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "pipeline swiglu" in out and "kernel up (steps 1)" in out and "kernel gate (steps 2)" in out
    assert main([*common, "--workers", "2"]) == 1
    assert "one worker" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(common) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_tune_a_tiny_pipeline_on_the_gpu(tmp_path, capsys):
    """L1_050's three projections by one kernel, two tiles, two trials; graded on every workload, steps timed."""
    path, pid = QKV
    spec = tmp_path / "qkv.ucut"
    spec.write_text(path.read_text().replace(CONCRETE, "tile = {128x128x64, 128x256x64}   schedule = cooperative"))
    out = tmp_path / "out"
    rc = main(["tune", pid, "--spec", str(spec), "--problems", str(SHARED_SOL_EXECBENCH), "--out", str(out),
               "--trials", "2", "--max-workloads", "2"])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads((out / "results.json").read_text())
    assert doc["studies"] == {"proj": f"{pid}/proj"} and all(w["status"] == "PASSED" for w in doc["workloads"])
    assert doc["steps"] and all(abs(sum(s["share"] for s in w["steps"]) - 1) < 1e-6 for w in doc["steps"])
    assert parse((out / "best.ucut").read_text(), "best.ucut").is_concrete()
    assert (out / "study.db").exists()


def test_the_grader_measurer_builds_each_bound_kernel_once_and_grades_the_pipeline(gate_up_plan):
    """PipelineGraderMeasurer with an injected build and grader: one .so per bound kernel (by build digest) in
    the pipeline's recipe; a failed build is COMPILE_ERROR on every workload, with nothing graded."""
    from types import SimpleNamespace

    from ucutlass.build import BuildResult
    from ucutlass.search.pipeline_tune import PipelineGraderMeasurer

    built, graded = [], []

    def build(kernels, source_file, sources, jobs):
        built.append([k.build_digest() for k in kernels])
        return [BuildResult(key=k.build_digest(), name=k.config_name(), entry=Path("/x"),
                            so_path=None if "64x128x64" in k.config_name() else Path(f"/x/{k.name}.so"),
                            source_path=Path("/x/k.cu"), cached=True, seconds=0.0,
                            error="fake nvcc error" if "64x128x64" in k.config_name() else "") for k in kernels]

    class Grader:
        def grade(self, ref, workloads):
            graded.append(ref)
            return [SimpleNamespace(workload_uuid=w.uuid, status="PASSED", latency_ms=2.0, reference_latency_ms=4.0,
                                    t_sol_ms=1.0, reason="", to_json=lambda: {}) for w in workloads]

    p = gate_up_plan
    m = PipelineGraderMeasurer(Grader(), p.problem, "g.ucut", p.pipeline, build=build)
    program = p.concrete_program(p.first_picks())
    outcomes = m(program, p.tuned)
    assert [o.status for o in outcomes] == ["PASSED"] * len(p.tuned) and outcomes[0].latency_ms == 2.0
    (ref,) = graded
    assert ref.payload["pipeline"] == "swiglu" and set(ref.payload["so_paths"]) == set(built[0])
    assert len(built[0]) == 2 and m.so_paths[program.source] == ref.payload["so_paths"]
    bad = p.concrete_program({**p.first_picks(), "up": {"tile": "64x128x64", "schedule": "pingpong"}})
    outcomes = m(bad, p.tuned)
    assert {o.status for o in outcomes} == {"COMPILE_ERROR"} and "fake nvcc error" in outcomes[0].message
    assert len(graded) == 1
    # prebuilding: the bound kernels a trial builds, found without binding the whole pipeline per combination
    combos = {"up": p.kernel("up").legal, "gate": p.kernel("gate").legal}
    prebuilt = {k.build_digest() for k in m.prebuilt(p, combos)}
    assert len(prebuilt) == len(combos["up"]) + len(combos["gate"])
    for name, legal in combos.items():
        for params in legal:
            built.clear()
            m(p.concrete_program({**p.first_picks(), name: params}), p.tuned[:1])
            assert set(built[0]) <= prebuilt
    built.clear()
    assert m.prebuild(p, combos) == sum(1 for k in m.prebuilt(p, combos) if "64x128x64" not in k.config_name())
    assert len(built[0]) == len(prebuilt)


def test_nothing_passing_on_every_workload_writes_no_best(gate_up_plan, tmp_path):
    class FailsEverywhere(FakePipelineMeasure):
        def __call__(self, program, workloads):
            outcomes = super().__call__(program, workloads)
            if len(workloads) == len(gate_up_plan.problem.workloads):  # the final grading
                return [Outcome(w, "TIMEOUT", message="fake timeout") for w in workloads]
            return outcomes

    events = []
    result = PipelineTuner(gate_up_plan, FailsEverywhere(), lambda w: 0.1,
                           config=TuneConfig(trials=2, max_workloads=3), progress=events.append).run()
    assert result.source is None and result.picks is None and result.how == "none"
    assert "no combination passed" in result.stop_reason
    assert [e["how"] for e in events if e["event"] == "verify-failed"] == ["best", "runner-up", "runner-up"]
    paths = write_pipeline_outputs(result, tmp_path)
    assert "best" not in paths and not (tmp_path / "best.ucut").exists()
    doc = json.loads(paths["json"].read_text())
    assert doc["picks"] is None
    # the failed final gradings are recorded with every workload's status, so the run says why it has no result
    assert [f["how"] for f in doc["verify_failures"]] == ["best", "runner-up", "runner-up"]
    assert all(f["reason"].startswith("TIMEOUT on ") for f in doc["verify_failures"])
    assert {w["status"] for f in doc["verify_failures"] for w in f["workloads"]} == {"TIMEOUT"}
    assert len(doc["verify_failures"][0]["workloads"]) == len(gate_up_plan.problem.workloads)
    assert "TIMEOUT on " in result.stop_reason


def test_the_json_document_of_a_pipeline_tune_fits_the_schema(gate_up_plan, tmp_path):
    from ucutlass.agents.feedback import pipeline_tune_document, schema_errors

    result = PipelineTuner(gate_up_plan, FakePipelineMeasure(), lambda w: 0.1,
                           config=TuneConfig(trials=2, max_workloads=3)).run()
    paths = write_pipeline_outputs(result, tmp_path)
    doc = pipeline_tune_document(result, paths, problem=gate_up_plan.problem.id, spec="g.ucut")
    assert schema_errors(doc) == []
    assert doc["ok"] and doc["best"]["source"] == result.source and doc["budget"] == 4
    assert doc["best"]["params"]["up.tile"] == result.picks["up"]["tile"] and "+" in doc["best"]["config"]
    assert sum(r["tuned"] for r in doc["workloads"]) == 3


def test_the_time_limit_stops_every_kernel_and_the_best_is_still_graded(gate_up_plan):
    result = PipelineTuner(gate_up_plan, FakePipelineMeasure(), lambda w: 0.1,
                           config=TuneConfig(max_workloads=3, time_limit_s=0.0)).run()
    assert set(result.stop_reasons.values()) == {"time limit (0 s)"}
    assert result.how == "first legal" and result.source is not None and not [
        t for t in result.trials if t["state"] == "COMPLETE"]


def test_step_spin_covers_the_host_path_within_bounds():
    from ucutlass.grader.timing import SPIN_CYCLES
    from ucutlass.search.pipeline_report import step_spin_cycles

    assert step_spin_cycles(0.0) == SPIN_CYCLES  # never less than the grader's spin
    assert step_spin_cycles(0.2) == int(2 * 0.2 * SPIN_CYCLES / 0.05)  # twice a 0.2 ms host path
    assert step_spin_cycles(100.0) == 100 * SPIN_CYCLES  # a slow host path is the pipeline's cost: capped


class _SlowHostPipeline:
    """A stand-in for a pipeline callable: two steps, each a tiny GPU op after 0.5 ms of host work while a step hook
    is set (the pipeline then runs eagerly), none without one (as a CUDA graph's replay: ucutlass/runtime/graphs.py)."""

    def __init__(self):
        self.on_step = None
        self.pipeline = type("B", (), {"pipeline": type("P", (), {"steps": [0, 1]})()})()

    def __call__(self, x, out):
        import time

        for i in range(2):
            if self.on_step:
                self.on_step(i, "start")
            if self.on_step:
                time.sleep(5e-4)  # host work inside the step's marks, as a dispatch or an argument check is
            out.copy_(x + i)
            if self.on_step:
                self.on_step(i, "end")


@pytest.mark.gpu
def test_step_times_are_gpu_time_not_the_host_path_between_marks():
    """Each step's marks see its kernels, not the host's 0.5 ms before them (the spin before each call), also when
    the call without the hook is fast (a graph replay): the spin is sized by the hooked call's host path."""
    import torch

    from ucutlass.search.pipeline_report import time_steps

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.ones(1 << 16, device="cuda")
    ms = time_steps(_SlowHostPipeline(), [x, torch.empty_like(x)], reps=5)
    assert len(ms) == 2 and all(0 < t < 0.3 for t in ms), ms  # an elementwise op on 256 KiB: microseconds
