"""``ucutlass init`` on a Python loop over a tensor's leading axis (issue 17: L2_045's per-batch ``index_copy_``).

A capture unrolls such a loop into one copy of its body per batch element, so the graph changed with the workload
and init refused the problem. :mod:`ucutlass.init.batch_loops` writes the loop as ``torch.func.vmap`` of its body
(the batched ops torch's batching rules give) when every iteration is the same ops on row ``b``; the program is then
the same at every workload and is checked as ``init`` checks it: the grader's emulated grade against the reference.
Small problems written for these tests (tests/data/init/tiny_*), and SOL-ExecBench's L2_045.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from shared_data import SHARED_SOL_EXECBENCH

from ucutlass.init import InitError, capture, check_program, init_program
from ucutlass.init.batch_loops import find_batch_loops
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"


def _targets(cap) -> list[str]:
    return [str(n.target) for n in cap.graph.graph.nodes if n.op == "call_function"]


def test_a_stacked_loop_over_the_batch_is_one_gemm_that_passes_emulated():
    """``torch.stack([x[b] @ w.t() for b in range(x.shape[0])])``: one gemm over all rows, at every workload."""
    problem = find_problem(str(DATA / "tiny_loop"))
    caps = [capture(problem, w) for w in problem.workloads]
    assert all(_targets(c) == _targets(caps[0]) for c in caps)  # batch 1, 2, 3: the same ops
    assert not any("stack" in t or "select" in t for t in _targets(caps[1]))
    result = init_program(problem)
    assert "mm = gemm0(view, w)" in result.text and "view = x.reshape([8 * batch, 64])" in result.text
    assert check_program(result.text, problem) == (True, "PASSED")


def test_a_per_batch_index_copy_is_one_scatter_that_passes_emulated():
    """L2_045's loop: ``out[b].index_copy_(0, positions[b], proj[b, :n])`` for each b is one ``torch.scatter`` on
    dim 1 of the whole batch (the line it came from in the comment); the emulated grade passes on every workload."""
    problem = find_problem(str(DATA / "tiny_batch_scatter"))
    result = init_program(problem)
    text = result.text
    assert "torch.scatter(clone, 1, expand, slice_1)" in text and "torch.index_copy" not in text
    assert "slice_1 = unsafe_view[:, :tokens]   # line 19:" in text
    assert "expand = view_2.expand([batch, tokens, 64])" in text
    for w in problem.workloads:  # batch 1, 3, 2 (init's check grades the smallest: each in turn)
        assert check_program(text, dataclasses.replace(problem, workloads=(w,))) == (True, "PASSED"), w.axes


def test_a_loop_over_some_rows_or_with_different_iterations_is_not_folded():
    """Only a loop over every row, each iteration the same ops, is batched: ``stack([x[0] @ w, x[1] @ w2])`` of a
    two-row x and a loop over the first rows of a longer tensor stay as they were."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    def different(x, w, w2):
        return torch.stack([x[0] @ w, x[1] @ w2])

    def some_rows(x, w, w2):
        return torch.stack([x[b] @ w for b in range(2)])

    args = (torch.zeros(2, 4, 8), torch.zeros(8, 8), torch.zeros(8, 8))
    assert find_batch_loops(make_fx(different, tracing_mode="fake")(*args).graph) == []
    assert find_batch_loops(make_fx(some_rows, tracing_mode="fake")(torch.zeros(3, 4, 8), *args[1:]).graph) == []
    assert len(find_batch_loops(make_fx(some_rows, tracing_mode="fake")(*args).graph)) == 1


def test_a_branch_on_a_shape_is_still_one_message():
    """``y * 2 if x.shape[0] < 3 else y + 1``: the captures at batch 2 and 3 differ (the one at batch 1, the
    smallest, has the same ops as batch 2, which once hid the difference); init names the line, writes nothing."""
    with pytest.raises(InitError, match=r"ops change with the workload from reference line 6 .*batch=3.*branch"):
        init_program(find_problem(str(DATA / "tiny_shape_branch")))


def test_l2_045_gets_a_program_its_loop_batched_and_its_windows_written_from_the_axes():
    """SOL-ExecBench's L2_045 (audio encoder to LM fusion): its per-batch ``index_copy_`` loop is one scatter, and
    the window count ceil(audio_seq_len / 15) is written from the axis (the captures at three workloads agree)."""
    pid = "L2_045_audio_encoder_to_language_model_multimodal_fusion"
    if not (SHARED_SOL_EXECBENCH / pid).is_dir():
        pytest.skip(f"{pid} not found beside this clone")
    result = init_program(find_problem(str(SHARED_SOL_EXECBENCH / pid)))
    text = result.text
    assert "torch.scatter(clone_4, 1, expand_5, slice_1)" in text and "torch.index_copy" not in text
    assert "F.pad(add, [0, 0, 0, (((audio_seq_len + 14) // 15) * 15 - audio_seq_len)])" in text
    assert "reshape([batch_size * ((audio_seq_len + 14) // 15), 15, encoder_hidden_dim])" in text
    assert result.flop_share == 1.0


def test_windows_of_a_constant_size_are_written_from_the_axis():
    """A sequence cut into windows of a const axis's size (L2_045: 15): the window count is the ceiling division,
    the padding the windows' rows less the sequence; a product of axes still wins where it fits."""
    from ucutlass.init.symbols import evaluate_axes, symbolize

    sym = symbolize({"batch": (2, 1, 16), "seq": (320, 640, 960)}, {"window": 15, "hidden": 512})
    assert sym((22, 43, 64)) == "((seq + 14) // 15)"
    assert sym((44, 43, 1024)) == "batch * ((seq + 14) // 15)"
    assert sym((10, 5, 0)) == "(((seq + 14) // 15) * 15 - seq)"
    assert sym((1760, 1720, 40960)) == "40 * batch * ((seq + 14) // 15)"
    assert sym((640, 640, 15360)) == "batch * seq"
    assert evaluate_axes("(((seq + 14) // 15) * 15 - seq)", {"seq": 961}) == 14
