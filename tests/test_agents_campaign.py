"""Campaigns (issue 18, items 4 and 5): a budget spread over problems by SOL headroom with the ε and w stop rules,
re-measuring results below T_SOL, resuming from its folder, one table; replayed on recorded tunes; the scripted
agent as a campaign's policy (real ``prompt`` and ``check`` on the command line, a fake grade). CPU only."""

from __future__ import annotations

import json
import re

import pytest

from ucutlass.agents.campaign import (Attempt, Campaign, CampaignConfig, ProblemState, ReplayRunner, format_table,
                                      load_records, replay_campaigns, shares)
from ucutlass.agents.replay import RecordedTune
from ucutlass.cli import main
from ucutlass.problem import find_problem

PROBLEM = "qkv_proj_bias_qwen2_5_7b"


class FakeRunner:
    """Attempts from a list of speedups per problem (None: failed); ``headroom`` known after the first attempt;
    ``below``: speedups timed below T_SOL, ``remeasured``: what a re-measure of each gives."""

    def __init__(self, seqs, headroom, below=(), remeasured=None):
        self.seqs, self.h, self.below, self.again = seqs, headroom, set(below), remeasured or {}
        self.calls = []

    def advance(self, state, n, judge):
        self.calls.append((state.problem, n))
        state.headroom = self.h[state.problem]
        seq, out = self.seqs[state.problem], []
        for s in seq[state.spent:state.spent + n]:
            a = Attempt(s, near_sol=s is not None and s >= 0.95 * self.h[state.problem], below_sol=s in self.below)
            out.append(a)
            if judge(a):
                break
        return out, "nothing more" if state.spent + len(out) >= len(seq) else None

    def remeasure(self, state, attempt):
        s = self.again.get(attempt.speedup)
        return None if s is None else Attempt(s, below_sol=s in self.below, note="again")


def test_shares_follow_headroom():
    states = [ProblemState("far", headroom=16.0), ProblemState("near", headroom=1.1), ProblemState("unknown")]
    got = shares(states, 40, "headroom")
    assert sum(got.values()) == 40 and got["far"] > got["near"] >= got["unknown"] >= 1
    assert sorted(shares(states, 40, "even").values()) == [13, 13, 14]
    assert sum(shares(states, 2, "headroom").values()) == 2  # fewer attempts than problems: the heaviest first
    states[0].stop_reason = "done"
    assert set(shares(states, 5, "headroom")) == {"near", "unknown"} and shares(states, 0, "headroom") == {}
    with pytest.raises(ValueError, match="budget"):
        CampaignConfig(0)
    with pytest.raises(ValueError, match="window"):
        CampaignConfig(4, window=0)
    with pytest.raises(ValueError, match="probe"):
        CampaignConfig(4, probe=0)
    assert (CampaignConfig(4, spread="even").epsilon, CampaignConfig(4, spread="even").window) == (None, None)


def test_budget_goes_where_the_headroom_is_and_stopped_problems_give_theirs_back(tmp_path):
    seqs = {"far": [1.0, 2.0, 4.0, 6.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 15.5, 15.8, 15.9, 15.95],
            "near": [1.05, 1.06, 1.06, 1.06, 1.06, 1.06, 1.06, 1.06, 1.06, 1.06],
            "done": [None, 2.9]}  # reaches 0.95 of its headroom on its second attempt: the ε rule
    runner = FakeRunner(seqs, {"far": 20.0, "near": 2.0, "done": 3.0})
    res = Campaign(list(seqs), runner, CampaignConfig(20, epsilon=0.25, window=3), tmp_path).run()
    rows = {r["problem"]: r for r in res["problems"]}
    assert res["trials"] == 20 == sum(r["trials"] for r in rows.values())
    assert rows["done"]["trials"] == 2 and "within 0.25 of T_SOL" in rows["done"]["stop_reason"]
    assert rows["near"]["stop_reason"] == "3 attempts without gain" and rows["near"]["trials"] == 4
    assert rows["far"]["trials"] == 14 and rows["far"]["stop_reason"] == "campaign budget spent"
    assert rows["far"]["speedup"] == 15.8 and rows["far"]["headroom"] == 20.0
    assert res["geomean_speedup"] == pytest.approx((15.8 * 1.06 * 2.9) ** (1 / 3))
    assert runner.calls == [("far", 2), ("near", 2), ("done", 2), ("far", 11), ("near", 3), ("far", 1)]
    table = (tmp_path / "table.txt").read_text()
    assert table.splitlines()[0].split()[:6] == ["problem", "headroom", "trials", "speedup", "SOL", "score"]
    assert json.loads((tmp_path / "results.json").read_text()) == res
    even = Campaign(list(seqs), FakeRunner(seqs, {"far": 20.0, "near": 2.0, "done": 3.0}),
                    CampaignConfig(20, spread="even")).run()
    assert {r["problem"]: r["trials"] for r in even["problems"]} == {"far": 9, "near": 9, "done": 2}


def test_below_sol_is_re_measured_then_suspect():
    seqs = {"p": [1.5, 9.0, 8.5, 2.0]}
    # 9.0 is below T_SOL and stays there when measured again: SUSPECT, never the best; 8.5 re-measures to 2.5
    runner = FakeRunner(seqs, {"p": 4.0}, below={9.0, 8.5}, remeasured={9.0: 9.0, 8.5: 2.5})
    c = Campaign(["p"], runner, CampaignConfig(4, epsilon=None, window=None))
    res = c.run()
    attempts = c.states["p"].attempts
    assert [a.suspect for a in attempts] == [False, True, False, False]
    assert attempts[2].speedup == 2.5 and not attempts[2].below_sol and "re-measured" in attempts[2].note
    row = res["problems"][0]
    assert row["speedup"] == 2.5 and row["suspect"] == 1 and row["flagged"] == 2


def test_rerunning_resumes_and_a_larger_budget_spends_more(tmp_path):
    seqs = {"a": [1.0 + i for i in range(20)], "b": [2.0 + i for i in range(20)]}
    heads = {"a": 30.0, "b": 30.0}
    first = FakeRunner(seqs, heads)
    Campaign(["a", "b"], first, CampaignConfig(6), tmp_path).run()
    again = FakeRunner(seqs, heads)
    res = Campaign(["a", "b"], again, CampaignConfig(6), tmp_path).run()
    assert again.calls == [] and res["trials"] == 6  # nothing to do: the budget was spent
    more = FakeRunner(seqs, heads)
    res = Campaign(["a", "b"], more, CampaignConfig(10), tmp_path).run()
    assert res["trials"] == 10 and sum(n for _, n in more.calls) == 4
    state = json.loads((tmp_path / "state.json").read_text())
    assert [a["speedup"] for a in state["problems"][0]["attempts"]] == seqs["a"][:5]
    with pytest.raises(ValueError, match="epsilon"):
        Campaign(["a", "b"], more, CampaignConfig(10, epsilon=1.0), tmp_path)


def _fake_tune(calls):
    """A tune function on the real Tuner with fake builds and measurements (tests/search_fakes.py), its study in
    the folder's SQLite file: resumed by each call."""
    from search_fakes import FakeBuild, FakeMeasure, make_plan, make_tuner
    from ucutlass.search import TuneConfig
    from ucutlass.search.report import write_outputs

    def tune(problem, trials, out, epsilon, window):
        calls.append(trials)
        out.mkdir(parents=True, exist_ok=True)
        result = make_tuner(make_plan(), FakeBuild(), FakeMeasure(), storage=f"sqlite:///{out}/study.db",
                            study_name=problem,
                            config=TuneConfig(batch=2, seed=1, trials=trials, sampler="brute",
                                              epsilon=-1.0 if epsilon is None else epsilon,
                                              patience=window or 1 << 30)).run()
        write_outputs(result, out)
        return json.loads((out / "results.json").read_text())

    return tune


def test_tuner_runner_resumes_its_study_and_its_trials_replay(tmp_path):
    from ucutlass.agents.campaign_runners import TunerRunner

    calls = []
    tune = _fake_tune(calls)
    tune(PROBLEM, 3, tmp_path / PROBLEM, None, None)  # a campaign killed after its tune measured 3 trials
    runner = TunerRunner(tmp_path, tune, None, None)
    res = Campaign([PROBLEM], runner, CampaignConfig(6, spread="even"), tmp_path).run()
    row = res["problems"][0]
    assert calls[1] == 2  # the probe: 2 trials granted; the study already held 3, which come back
    assert row["trials"] >= 6 and row["headroom"] == pytest.approx(3.0)  # FakeMeasure: reference = 3 T_SOL
    keys = [a["key"] for a in json.loads((tmp_path / "state.json").read_text())["problems"][0]["attempts"]]
    assert keys == sorted(set(keys))  # each trial once, in order
    assert row["speedup"] and row["sol_score"] is not None
    tunes = load_records([tmp_path])  # the campaign's folder: one tune per problem
    assert [t.problem for t in tunes] == [PROBLEM] and len(tunes[0].values) == len(keys)
    rows = replay_campaigns(tunes, [(0.25, 12), (2.5, 2)])
    assert [r["policy"] for r in rows] == ["even", "ε 0.25, w 12", "ε 2.5, w 2"]
    assert rows[0]["ratio"] == 1.0 and rows[2]["trials"] <= rows[0]["trials"]


def test_replay_campaign_against_the_even_spread(tmp_path, capsys):
    tunes = [RecordedTune("far", 8.0, (6.0, 4.0, 3.0, 2.0, 1.5, 1.2, 1.1, 1.1, 1.1, 1.1)),
             RecordedTune("near", 1.5, (1.4, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3)),
             RecordedTune("odd", 3.0, (None, 2.0, 0.8, 1.9, 1.9, 1.9, 1.9, 1.9, 1.9, 1.9))]
    rows = replay_campaigns(tunes, [(1.0, 3)], budget=24)
    even, rule = rows
    assert even["trials"] == 24 and rule["trials"] < even["trials"] and 0 < rule["ratio"] <= 1
    odd = next(r for r in even["results"]["problems"] if r["problem"] == "odd")
    assert odd["suspect"] == 1 and odd["speedup"] == pytest.approx(3.0 / 1.9)  # 0.8 T_SOL: never the best
    # the command line, on tunes' folders
    for t in tunes:
        (tmp_path / t.problem).mkdir()
        (tmp_path / t.problem / "results.json").write_text(json.dumps({
            "headroom_reference_over_sol": t.headroom,
            "trials": [{"number": i, "state": "COMPLETE" if v else "FAIL", "value": v} for i, v in enumerate(t.values)]}))
    assert main(["campaign", "--replay", str(tmp_path), "--budget", "24", "--rule", "1:3", "--rule", "0.25:12",
                 "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^even\s+24\s+100\.0%", out, re.M) and re.search(r"^ε 1, w 3\s+\d+", out, re.M)
    assert len(json.loads((tmp_path / "r" / "replay.json").read_text())) == 3


def test_cli_campaign_bad_input(capsys, tmp_path):
    assert main(["campaign", "--budget", "4"]) == 1
    assert "name the problems" in capsys.readouterr().err
    assert main(["campaign", PROBLEM]) == 1
    assert "--budget N is required" in capsys.readouterr().err
    assert main(["campaign", "no_such_problem", "--budget", "4"]) == 1
    assert "no_such_problem" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:  # a usage error (exit 2): nothing is started
        main(["campaign", PROBLEM, "--budget", "0", "--out", str(tmp_path)])
    assert usage.value.code == 2
    assert "--budget: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert main(["campaign", "--replay", str(tmp_path / "none")]) == 1
    assert main(["campaign", "--replay", str(tmp_path), "--rule", "x"]) == 1
    assert "EPS:W" in capsys.readouterr().err


def _grade_doc(speedup):
    perf = {"latency_ms": 1.0, "reference_latency_ms": speedup, "t_sol_ms": None, "sol_score": None}
    return {"command": "grade", "ok": True, "diagnostics": [], "summary": {"geomean_speedup": speedup,
            "mean_sol_score": None}, "records": [{"evaluation": {"status": "PASSED", "performance": perf}}]}


def test_scripted_agent_campaign_repairs_a_draft_from_the_feedback(tmp_path):
    """Item 5: the scripted agent reads ``ucutlass prompt``, sends a draft with mistakes to ``ucutlass check
    --json`` (real, a child process), takes each fix from the diagnostics' valid choices and reaches a grade (a
    fake one here; the emulated grade: test_scripted_campaign_on_the_command_line); it stops by the campaign."""
    from ucutlass.agents.campaign_runners import AgentRunner, cli_tools
    from ucutlass.agents.policy import DiagnosticFixer, starting_program

    real = cli_tools(sol=False)
    seen, prompts = [], []

    def tools(name, args):
        seen.append(name)
        answer = _grade_doc(1.25) if name == "grade" else real(name, args)
        if name == "prompt":
            prompts.append(answer["text"])
        return answer

    start = find_problem(PROBLEM).spec_path.read_text()  # the prompt's starting program (asserted below)
    draft = start.replace("a : bf16", "a : bf61", 1).replace("schedule  =", "schedul  =", 1)
    assert draft != start
    fixers = []

    def policy():
        fixers.append(DiagnosticFixer(first=draft))
        return fixers[-1]

    res = Campaign([PROBLEM], AgentRunner(policy, tools, 0.25), CampaignConfig(5), tmp_path).run()
    row = res["problems"][0]
    assert row["speedup"] == 1.25 and row["stop_reason"] == "passed; the policy has nothing more to try"
    assert starting_program(prompts[0]) == start
    assert seen[:3] == ["prompt", "check", "check"] and seen[-1] == "grade" and row["trials"] == len(seen) - 2
    assert {f["code"] for f in fixers[0].fixes} >= {"unknown-dtype", "unknown-setting"}
    state = json.loads((tmp_path / "state.json").read_text())["problems"][0]
    assert "a : bf16" in state["extra"]["program"] and "schedule  =" in state["extra"]["program"]
    assert "unknown-dtype" in state["attempts"][0]["note"]


@pytest.mark.slow
def test_scripted_campaign_on_the_command_line(tmp_path, capsys):
    """`ucutlass campaign PROBLEM --policy scripted --emulate`: the real emulated grade (about 20-30 s on CPU)."""
    out = tmp_path / "c"
    assert main(["campaign", PROBLEM, "--policy", "scripted", "--emulate", "--workloads", "1", "--budget", "3",
                 "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    row = res["problems"][0]
    assert row["trials"] == 1 and row["speedup"] > 0 and row["stop_reason"].startswith("passed")
    assert PROBLEM in capsys.readouterr().out and (out / "table.txt").is_file()


def test_a_failing_runner_stops_its_problem_only_and_is_retried_on_resume(tmp_path):
    class Flaky(FakeRunner):
        broken = True

        def advance(self, state, n, judge):
            if state.problem == "bad" and self.broken:
                raise RuntimeError("nvcc crashed")
            return super().advance(state, n, judge)

    seqs = {"good": [1.0, 2.0, 3.0, 4.0], "bad": [1.0, 1.5, 2.0]}
    runner = Flaky(seqs, {"good": 10.0, "bad": 10.0})
    res = Campaign(["good", "bad"], runner, CampaignConfig(7), tmp_path).run()
    rows = {r["problem"]: r for r in res["problems"]}
    assert rows["bad"]["stop_reason"] == "failed: nvcc crashed" and rows["good"]["trials"] == 4
    runner.broken = False
    res = Campaign(["good", "bad"], runner, CampaignConfig(7), tmp_path).run()
    assert {r["problem"]: r["trials"] for r in res["problems"]} == {"good": 4, "bad": 3}


def test_tune_arguments_parse_as_the_tune_command(tmp_path):
    from ucutlass.agents.campaign_runners import tune_argv
    from ucutlass.cli import build_parser

    args = build_parser().parse_args(tune_argv(PROBLEM, 7, tmp_path / "t", None, None, problems=["/x"],
                                               extra=["--dispatch=1", "--batch=4"]))
    assert (args.command, args.problem, args.trials, args.out) == ("tune", PROBLEM, 7, str(tmp_path / "t"))
    assert args.epsilon == -1.0 and args.patience == 1 << 30 and args.dispatch == 1 and args.batch == 4
    assert args.problems == ["/x"]
    args = build_parser().parse_args(tune_argv(PROBLEM, 3, tmp_path, 0.5, 12))
    assert (args.epsilon, args.patience) == (0.5, 12)


@pytest.mark.parametrize("again_ms, suspect", [(1.2, False), (0.7, True)])
def test_tuner_best_below_sol_is_graded_again(tmp_path, again_ms, suspect):
    """A tune whose best is timed at 0.8 T_SOL: best.ucut is graded again; at 1.2 T_SOL the re-measure is believed,
    at 0.7 T_SOL it is SUSPECT and never the problem's speedup."""
    from ucutlass.agents.campaign_runners import TunerRunner

    def tune(problem, trials, out, epsilon, window):
        out.mkdir(parents=True, exist_ok=True)
        (out / "best.ucut").write_text("kernel k : gemm { }\n")
        return {"headroom_reference_over_sol": 3.0, "stop_reason": f"trial budget of {trials} spent",
                "best": {"trial": 1}, "trials": [{"number": 0, "state": "COMPLETE", "value": 2.0},
                                                 {"number": 1, "state": "COMPLETE", "value": 0.8}],
                "workloads": [{"speedup": 3.0 / 0.8, "sol_score": None, "time_ms": 0.8, "t_sol_ms": 1.0}]}

    graded = []

    def grade(path, problem):
        graded.append(path.name)
        perf = {"latency_ms": again_ms, "reference_latency_ms": 3.0, "t_sol_ms": 1.0, "sol_score": 0.9}
        return {"ok": True, "summary": {"geomean_speedup": 3.0 / again_ms, "mean_sol_score": 0.9},
                "records": [{"evaluation": {"status": "PASSED", "performance": perf}}]}

    c = Campaign([PROBLEM], TunerRunner(tmp_path, tune, None, None, grade=grade),
                 CampaignConfig(2, epsilon=None, window=None), tmp_path)
    row = c.run()["problems"][0]
    assert graded == ["best.ucut"] and row["flagged"] == 1 and row["suspect"] == int(suspect)
    if suspect:
        assert row["speedup"] == pytest.approx(1.5)  # the other trial: 3 / 2.0
    else:
        assert row["speedup"] == pytest.approx(3.0 / 1.2) and row["sol_score"] == 0.9


def test_a_tool_past_its_timeout_is_stopped_and_headroom_comes_from_a_grade():
    from ucutlass.agents.campaign_runners import cli_tools, grade_headroom

    with pytest.raises(RuntimeError, match="no answer within 0.3 s"):
        cli_tools(timeout_s=0.3)("prompt", {"problem": PROBLEM})
    doc = _grade_doc(2.0)
    assert grade_headroom(doc) is None  # no T_SOL (an emulated grade)
    doc["records"][0]["evaluation"]["performance"].update(t_sol_ms=0.5, reference_latency_ms=2.0)
    doc["records"].append({"evaluation": {"performance": {"t_sol_ms": 1.0, "reference_latency_ms": 8.0}}})
    assert grade_headroom(doc) == pytest.approx(4.0 * 2 ** 0.5)  # geomean of 4 and 8


@pytest.mark.slow
def test_a_tuner_campaign_without_a_gpu_says_why_each_problem_stopped(tmp_path, capsys):
    """The real command line up to the GPU: each problem's `ucutlass tune` (a child process) finds none; the
    campaign records why, writes its table and exits 1 (every problem failed)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the tune would run")
    out = tmp_path / "c"
    assert main(["campaign", PROBLEM, "--budget", "2", "--out", str(out)]) == 1
    row = json.loads((out / "results.json").read_text())["problems"][0]
    assert row["stop_reason"].startswith("failed: ucutlass tune") and "CUDA GPU" in row["stop_reason"]
    assert row["trials"] == 0 and "CUDA GPU" in capsys.readouterr().err


def test_replay_of_a_file_that_is_no_tune_says_which_and_why(tmp_path):
    """Grade records (a JSON list, as `grade -o` writes) or broken JSON: a ValueError naming the file, no traceback
    (a new user pointed --replay at a benchmarks folder)."""
    from ucutlass.agents.campaign import load_records

    (tmp_path / "grades").mkdir()
    (tmp_path / "grades" / "results.json").write_text("[]")
    with pytest.raises(ValueError, match=r"grades/results.json: not a tune's results.json"):
        load_records([tmp_path / "grades"])
    (tmp_path / "broken.json").write_text("{\n")
    with pytest.raises(ValueError, match=r"broken.json: not a readable JSON file"):
        load_records([tmp_path / "broken.json"])
