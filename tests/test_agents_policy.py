"""The scripted agent (issue 18): a DiagnosticFixer reads the prompt, sends a program with mistakes, takes each fix
from the JSON diagnostics' valid choices (nothing about the language is in it), grades with emulation through the
MCP server and stops by the stop rule: the loop an LLM runs."""

from __future__ import annotations

import re

import anyio
import pytest

from ucutlass.agents.policy import DiagnosticFixer, StopRule, closest_choice, run_episode, starting_program

PROBLEM = "qkv_proj_bias_qwen2_5_7b"


@pytest.mark.parametrize("word, valid, expected", [
    ("bf61", ["bf16", "f16", "f32", "f8e4m3"], "bf16"),
    ("schedul", ["target", "tile", "schedule", "scheduler"], "schedule"),
    ("gelux", ["relu", "gelu", "gelu_tanh", "silu"], "gelu"),
    ("128x128x48", ["32", "64", "128"], "128x128x64"),  # the component that is not valid, by value
    ("3x1x1", ["1x1x1", "2x1x1", "4x1x1", "1x2x1"], "4x1x1"),
    ("5", ["2", "4", "8"], "4"),
])
def test_closest_choice(word, valid, expected):
    assert closest_choice(word, valid) == expected


def _grade(ok=True, latency=2.0, reference=3.0, t_sol=1.0, speedup=1.5):
    perf = {"latency_ms": latency, "reference_latency_ms": reference, "t_sol_ms": t_sol}
    return {"ok": ok, "summary": {"geomean_speedup": speedup},
            "records": [{"evaluation": {"performance": perf}}]}


def test_stop_rule():
    rule = StopRule(budget=10, epsilon=0.25, patience=3)
    assert not rule.record(None) and not rule.record(_grade(latency=2.0))
    assert rule.record(_grade(latency=1.2, speedup=2.5)) and "within 0.25 of T_SOL" in rule.reason
    rule = StopRule(budget=10, epsilon=0.25, patience=3)
    assert not rule.record(_grade(speedup=1.5))
    assert not rule.record(_grade(speedup=1.505)) and not rule.record(_grade(speedup=1.4))  # < 1% is no gain
    assert rule.record(_grade(speedup=1.5)) and rule.reason == "3 attempts without gain"
    rule = StopRule(budget=2, patience=5)
    assert not rule.record(None) and rule.record(None) and "budget" in rule.reason
    slow_baseline = StopRule(epsilon=0.25)  # near T_SOL but not faster than the baseline: go on
    assert not slow_baseline.record(_grade(latency=1.1, reference=1.0))


def test_starting_program_from_a_prompt():
    prompt = "# Task\n\n## Starting program (the problem's kernel.ucut)\n```ucut\nkernel k : gemm { }\n```\n"
    assert starting_program(prompt) == "kernel k : gemm { }\n"
    with pytest.raises(ValueError):
        starting_program("# Task\nno program")


def test_episode_fixes_a_draft_from_diagnostics_alone(tmp_path):
    from mcp import Client

    from ucutlass.agents import validate
    from ucutlass.agents.server import create_server

    async def main():
        async with Client(create_server(root=str(tmp_path))) as client:
            async def call(name, args):
                r = await client.call_tool(name, args)
                assert not r.is_error, r.content
                doc = r.structured_content
                return validate(doc) if name in ("check", "grade") else doc

            prompt = (await call("prompt", {"problem": PROBLEM}))["text"]
            start = starting_program(prompt)
            # an LLM's draft: a misspelt dtype and setting, a tile the rules reject (bf16 tile K 48)
            draft = start.replace("a : bf16", "a : bf61", 1).replace("schedule  =", "schedul  =", 1)
            draft = re.sub(r"(?m)^(\s*)tile\s*=.*$", r"\1tile = 128x128x48", draft, count=1)
            assert draft != start
            fixer = DiagnosticFixer(first=draft)
            episode = await run_episode(fixer, call, PROBLEM, rule=StopRule(budget=6))
            return fixer, episode, start

    fixer, episode, start = anyio.run(main)
    assert episode.passed, episode.steps
    assert episode.grade["records"][0]["evaluation"]["status"] == "PASSED"
    codes = {f["code"] for f in fixer.fixes}
    assert {"unknown-dtype", "unknown-setting", "sm90.tile-k"} <= codes, fixer.fixes
    final = episode.steps[-1]["program"]
    assert "a : bf16" in final and "schedule  =" in final and "tile = 128x128x64" in final
    assert [s["command"] for s in episode.steps][-1] == "grade" and len(episode.steps) <= 4
    assert episode.stop_reason == "passed; the policy has nothing more to try"


# --- replay: stop rules on recorded trials ------------------------------------------------------------------

def test_replay_stops_by_each_rule():
    from ucutlass.agents.replay import RecordedTune, replay

    tune = RecordedTune("p", 3.0, (2.0, None, 1.5, 1.49, 1.2, 1.1))
    near = replay(tune, epsilon=0.25, patience=12)
    assert (near.trials, near.speedup, near.reason) == (5, 2.5, "within 0.25 of T_SOL and faster than the baseline")
    assert near.full_speedup == pytest.approx(3.0 / 1.1) and near.recorded == 6
    impatient = replay(tune, epsilon=0.0, patience=1)  # the failed second trial is one without gain
    assert (impatient.trials, impatient.speedup) == (2, 1.5) and "without gain" in impatient.reason
    everything = replay(tune, epsilon=0.0, patience=12)
    assert everything.trials == 6 and everything.speedup == everything.full_speedup and "budget" in everything.reason
    slow = RecordedTune("q", 0.9, (0.95, 0.95))  # within ε of T_SOL but slower than the baseline: not a stop
    assert replay(slow, epsilon=0.25, patience=12).trials == 2


def test_compare_policies_on_recorded_tunes(tmp_path):
    from search_fakes import FakeBuild, FakeMeasure, make_plan, make_tuner
    from ucutlass.agents.replay import RecordedTune, compare, format_comparison
    from ucutlass.search import TuneConfig
    from ucutlass.search.report import write_outputs

    result = make_tuner(make_plan(), FakeBuild(), FakeMeasure(),
                        config=TuneConfig(batch=4, seed=1, trials=12, sampler="brute")).run()
    folder = tmp_path / "qkv_proj_bias_qwen2_5_7b"
    write_outputs(result, folder)
    recorded = RecordedTune.from_results(folder)
    measured = [t for t in result.trials if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")]
    assert recorded.problem == folder.name and len(recorded.values) == len(measured)
    assert recorded.headroom == pytest.approx(3.0)  # FakeMeasure: the reference takes 3 T_SOL
    assert None in recorded.values  # tile M 256 "fails to compile"
    other = RecordedTune("other", 4.0, (3.0, 2.0, 1.9, 1.9, 1.9, 1.1))
    rows = compare([recorded, other], [(0.25, 12), (1.0, 2), (2.5, 16)])
    assert [r["recorded"] for r in rows] == [len(recorded.values) + 6] * 3
    for r in rows:
        assert r["trials"] == sum(x.trials for x in r["replays"]) and 0 <= r["saved"] < 1
        assert 0 < r["ratio"] <= 1
    assert rows[1]["trials"] < rows[0]["trials"]  # w = 2 stops sooner than w = 12
    table = format_comparison(rows)
    assert table.splitlines()[0].split() == ["eps", "w", "trials", "saved", "geomean", "of", "all"]
    assert len(table.splitlines()) == 2 + len(rows)
    with pytest.raises(ValueError, match="headroom"):
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "results.json").write_text('{"trials": []}')
        RecordedTune.from_results(tmp_path / "bad")
