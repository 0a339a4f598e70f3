"""``ucutlass init`` on rows a boolean mask keeps (issue 17: L2_012's capacity-limited MoE).

``x[valid]`` has as many rows as the mask has True values, so a capture on fake tensors fails; :mod:`ucutlass.init.masked`
traces it with every row kept and the mask carried along (gathers at index 0, accumulating writes of 0, adds of 0
for a dropped row), and refuses by name any other use of such rows. The programs are checked as ``init`` checks
them: the grader's emulated grade against the reference on the problem's data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import shrunk_problem

from ucutlass.init import InitError, check_program, init_program
from ucutlass.init.symbols import symbolize
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"
L2_012 = "L2_012_moe_expert_batched_execution_with_capacity_factor"


def test_a_capacity_limited_moe_is_bmm_kernels_on_padded_expert_batches_that_pass_emulated(tmp_path):
    """SOL-ExecBench's L2_012 made small (16 experts of 128 x 64, top 4; 6, 40 and 101 tokens): bincount is a
    scatter_add, the kept pairs an accumulating index_put into the zeros of each expert's padded batch, the three
    bmms kernels (SiLU in the gate's epilogue); the capacity int(tokens * 4 / 16 * 1.25) is (5 * num_tokens) // 16."""
    problem = shrunk_problem(L2_012, {"hidden_size": 128, "moe_intermediate_size": 64, "num_experts": 16,
                                      "num_experts_per_tok": 4}, "num_tokens", (6, 40, 101), tmp_path / "p")
    result = init_program(problem)
    text = result.text
    assert result.flop_share == 1.0 and len(result.partition.kernels) == 2  # gate (+ SiLU) and up/down bmms
    assert "torch.scatter_add(zeros, 0, sort_values, ones_like)" in text  # the bincount
    assert "torch.lt(sub, (5 * num_tokens) // 16)" in text
    assert "index_put = torch.index_put(zeros_2, [mul_1, mul_2], where, True)" in text
    assert "torch.index_add(zeros_3, 0, mul_7, where_1)" in text
    assert check_program(text, problem) == (True, "PASSED")


def test_l2_012_at_its_real_sizes_gets_a_program_with_its_capacity_from_the_axis():
    """The real problem (160 experts, 6144 x 2560): capacity = num_tokens // 16 on every workload (3089 and 1571
    tokens included); its inputs (15 GB of expert weights) are graded on the GPU, not here."""
    from shared_data import SHARED_SOL_EXECBENCH

    if not (SHARED_SOL_EXECBENCH / L2_012).is_dir():
        pytest.skip(f"{L2_012} not found beside this clone")
    text = init_program(find_problem(str(SHARED_SOL_EXECBENCH / L2_012))).text
    assert "torch.full([num_experts, num_tokens // 16, hidden_size], 0, dtype=torch.bfloat16)" in text


def test_rows_a_mask_kept_and_then_sorted_are_refused_by_name():
    with pytest.raises(InitError, match=r"line 7: data-dependent shapes \(rows of a boolean mask\).*sort reads rows"):
        init_program(find_problem(str(DATA / "tiny_masked_sort")))


def test_a_rounded_down_fraction_of_an_axis_is_written_from_it():
    """int(tokens * top_k / experts * 1.25) at 6, 40, 101 tokens (4 of 16 experts): 1, 12, 31."""
    sym = symbolize({"num_tokens": (6, 40, 101)}, {"num_experts": 16, "top_k": 4})
    assert sym((1, 12, 31)) == "(5 * num_tokens) // 16"




def test_the_mode_computes_what_the_reference_computes_on_real_tensors():
    """The rewrites on real tensors (the mode runs on any tensors): a boolean-mask index, a gather by kept rows, an
    index_put of one value (a dropped row writes 0 at row 0, accumulated), an index_add of kept rows, a bincount;
    a sum over kept rows is refused by name."""
    import torch

    from ucutlass.init.masked import MaskRefused, masked_mode

    def ref(x, keep, idx):
        y = torch.zeros(8, 4)
        y[idx[keep]] = 1.0
        out = torch.zeros(8, 4).index_add_(0, idx[keep], x[keep] * 2 + x[idx[keep] % 6])
        return y + out + torch.bincount(idx, minlength=8).float()[:, None]

    def summed(x, keep, idx):
        return x[keep].sum(0)

    x, idx = torch.randn(6, 4), torch.tensor([3, 0, 5, 7, 2, 1])
    for keep in ([1, 0, 1, 1, 0, 1], [0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]):
        keep = torch.tensor(keep, dtype=torch.bool)
        with masked_mode():
            got = ref(x, keep, idx)
            assert x[keep].shape == (6, 4)  # every row kept (the mask carried along), whatever the mask says
        assert torch.equal(got, ref(x, keep, idx)), keep
        with pytest.raises(MaskRefused, match="sum reads rows a boolean mask kept"), masked_mode():
            summed(x, keep, idx)
