"""``ucutlass init`` on MoE references (issue 17): a per-expert Python loop written as grouped GEMMs over all pairs.

The references loop over experts with ``torch.where`` on a one-hot routing mask, so their rows depend on the
routing's values; :mod:`ucutlass.init.experts` proves the loop is a one-hot dispatch and writes it once for all
(token, slot) pairs, sorted by expert. Each program is checked as ``init`` checks it: the grader's emulated grade
against the reference on the problem's data. Small problems written for these tests (tests/data/init/tiny_moe*),
and SOL-ExecBench's MoE problems with their const axes made small (the same reference and inputs; the real ones hold
gigabytes of expert weights).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from shared_data import shrunk_problem

from ucutlass.init import InitError, check_program, init_program
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"

#: SOL-ExecBench MoE problems: (id, small const axes, the var axis and its small values).
SHRUNK = [
    ("L1_044_moe_expert_computation",
     {"num_experts": 16, "hidden_size": 128, "intermediate_size": 64, "num_experts_per_tok": 4}, "num_tokens", (5, 40)),
    ("L2_013_expert_weighted_aggregation_with_shared_expert",
     {"hidden_size": 128, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "num_experts": 16,
      "num_experts_per_tok": 4}, "batch_seq_len", (6, 40)),
    ("L2_024_moe_expert_parallel_execution",
     {"hidden_size": 128, "moe_intermediate_size": 64, "n_routed_experts": 16, "num_experts_per_tok": 4},
     "num_tokens", (6, 40)),
    # its router is in the reference (64 experts, top 8, written as numbers): only the sizes shrink
    ("L2_016_moe_expert_mlp_with_load_balancing", {"hidden_size": 128, "moe_intermediate_size": 64}, None, ()),
    # `if (ids == e).any():`, `x[ids == e]`, `y[ids == e] = …`: rows of a boolean mask, an index_put accumulator
    ("L2_047_moe_training_token_repeat_and_expert_computation",
     {"hidden_size": 128, "moe_intermediate_size": 64, "num_experts": 16, "num_experts_per_tok": 4}, "batch_seq_len",
     (6, 40)),
    # DeepSeek's group-limited routing in the reference (an f32 router, a scatter group mask), a shared expert
    ("L2_081_moe_sparse_expert_dispatch", {"hidden_size": 128, "moe_intermediate_size": 64, "shared_intermediate": 64},
     "num_tokens", (6, 40)),
]


def test_a_one_hot_expert_loop_is_grouped_gemms_that_pass_emulated():
    problem = find_problem(str(DATA / "tiny_moe"))
    result = init_program(problem)
    text = result.text
    assert "kernel grouped0 : grouped_gemm {" in text and "m_sizes : i32[G]" in text
    assert len(re.findall(r"= grouped\d\(", text)) == 3  # gate, up, down: one call each for all experts
    # silu runs in the gate's epilogue; the routing weight stays a torch step: 3, 16 and 10 tokens make 6, 32 and 20
    # pairs, and a per-row epilogue vector w : bf16[M] needs M 16-byte aligned on every workload
    assert "epilogue { d = cast(silu(cast(acc, bf16)), bf16) }" in text and "w : bf16[M]" not in text
    assert "torch.argsort(pairs, stable=True)" in text and "torch.index_add(" in text
    assert "for e in" not in text and "one_hot" not in text  # the loop and its mask are gone
    assert "token = order // top_k" in text and text.rstrip().endswith("return out\n}")  # axis and output names
    assert result.flop_share == 1.0
    assert check_program(text, problem) == (True, "PASSED")


def test_the_routing_weight_joins_the_epilogue_where_the_pairs_are_aligned(tmp_path):
    """The same MoE with 4, 16 and 12 tokens (8, 32 and 24 pairs): the routing weight is the down projection's
    epilogue vector (``d = cast(acc, bf16) * w``) and the program passes the emulated grade."""
    import json
    import shutil

    folder = tmp_path / "tiny_moe"
    shutil.copytree(DATA / "tiny_moe", folder)
    lines = [json.loads(x) for x in (folder / "workload.jsonl").read_text().splitlines() if x.strip()]
    for line, tokens in zip(lines, (4, 16, 12)):
        line["axes"]["tokens"] = tokens
    (folder / "workload.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    problem = find_problem(str(folder))
    text = init_program(problem).text
    assert "epilogue { w : bf16[M]   d = cast(acc, bf16) * w }" in text
    assert check_program(text, problem) == (True, "PASSED")


def test_a_wrong_pairing_fails_the_check():
    """The check has teeth: the same program with each pair's token and slot swapped in the routing weight's gather
    fails the emulated grade."""
    problem = find_problem(str(DATA / "tiny_moe"))
    text = init_program(problem).text
    assert "w[token, slot]" in text
    passed, why = check_program(text.replace("w[token, slot]", "w[token, 1 - slot]"), problem)
    assert not passed and "INCORRECT" in why, why


def test_a_loop_whose_rows_are_no_one_hot_is_refused():
    with pytest.raises(InitError, match="data-dependent shapes.*one-hot routing mask.*this is not one: its rows are not"):
        init_program(find_problem(str(DATA / "tiny_moe_threshold")))


def test_a_true_any_outside_an_expert_loop_is_refused(tmp_path):
    """The loop capture reads ``(ids == e).any()`` as True only where it guards an expert's rows: the same read on a
    branch of its own (``if (ids == 0).any(): x = x * 2``) would bake one branch in for all data, so the capture
    fails as before."""
    definition = json.loads((DATA / "tiny_moe" / "definition.json").read_text())
    definition["reference"] = definition["reference"].replace(
        "    out = torch.zeros_like(x)\n", "    out = torch.zeros_like(x)\n    if (ids == 0).any():\n        x = x * 2\n", 1)
    assert "if (ids == 0).any()" in definition["reference"]
    folder = tmp_path / "tiny_moe_branch"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text((DATA / "tiny_moe" / "workload.jsonl").read_text())
    with pytest.raises(InitError, match="data-dependent control flow"):
        init_program(find_problem(str(folder)))


def test_a_body_that_is_not_row_wise_is_refused_by_name():
    with pytest.raises(InitError, match=r"its body has aten\.sort"):
        init_program(find_problem(str(DATA / "tiny_moe_sorted_rows")))


@pytest.mark.parametrize("pid, consts, axis, values", SHRUNK, ids=[s[0].split("_")[0] + "_" + s[0].split("_")[1]
                                                                   for s in SHRUNK])
def test_sol_execbench_moe_references_pass_emulated(pid, consts, axis, values, tmp_path):
    problem = shrunk_problem(pid, consts, axis, values, tmp_path / pid)
    result = init_program(problem)
    assert "grouped_gemm" in result.text and result.flop_share == 1.0
    assert check_program(result.text, problem) == (True, "PASSED")
