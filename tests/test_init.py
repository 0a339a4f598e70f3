"""``ucutlass init`` (issue 17, items 1-4): a program written from a problem's reference, checked by the emulated
grade; bad references end in one clear message. Tiny problems under tests/data/init/ (CPU, a few seconds)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ucutlass.cli import main
from ucutlass.init import InitError, capture, check_program, init_program
from ucutlass.init.partition import symbolize
from ucutlass.lang import parse
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"


def problem(name: str):
    return find_problem(str(DATA / name))


def test_capture_is_an_aten_graph_on_fake_tensors():
    cap = capture(problem("tiny_linear_residual"))
    ops = [str(n.target) for n in cap.graph.graph.nodes if n.op == "call_function"]
    assert "aten.addmm.default" in ops and "aten.silu.default" in ops
    assert cap.inputs == ("x", "residual", "w", "bias")
    assert cap.axes["batch"] == 1 and cap.axes["seq"] == 8  # the smallest workload


def test_one_matmul_on_the_problem_tensors_is_one_bound_kernel():
    p = problem("tiny_gemm")
    result = init_program(p)
    program = parse(result.text, "init.ucut")
    assert not program.pipelines and [k.name for k in program.kernels] == ["gemm0"]
    assert "<- A" in result.text and "<- B" in result.text and "-> C" in result.text
    assert "b : f16[N, K] row" in result.text  # B.T read as the [N, K] tensor, no copy
    assert result.flop_share == 1.0  # graded (emulated) by test_cli_init_writes_and_checks


def test_linear_silu_residual_is_a_pipeline_that_passes_emulated():
    p = problem("tiny_linear_residual")
    result = init_program(p)
    text = result.text
    assert "pipeline tiny_linear_residual {" in text
    assert "gemm0(view, w, bias=bias)" in text  # addmm: bias and silu in the epilogue, rounded as the reference
    assert "d = cast(silu(cast(acc + bias, bf16)), bf16)" in text and "F.silu(" not in text
    assert "x.reshape([batch * seq, hidden])" in text  # integers become axis expressions
    assert "# line 7: h = F.linear(x, w, bias)" in text  # comments name the reference's lines
    assert "+ residual" in text
    assert result.partition.kernel_flops == result.partition.total_flops == 2 * 48 * 64 * 64  # at batch 2, seq 24
    parse(text, "init.ucut")
    assert check_program(text, p) == (True, "PASSED")


def test_data_dependent_control_flow_is_one_message():
    with pytest.raises(InitError, match="data-dependent control flow"):
        init_program(problem("tiny_data_dependent"))


def test_an_op_with_no_lowering_is_named():
    with pytest.raises(InitError, match=r"aten\.argmax \(reference line 4\)"):
        init_program(problem("tiny_no_lowering"))


def test_a_flag_the_entry_point_makes_is_captured_at_its_value():
    """A bool scalar input made by the custom entry point (L1_075's ``is_causal = False``) is captured at the value
    the problem's inputs have, not as a traced 1 (which took the other branch); tanh-GELU (no strings in a pipeline:
    torch's formula) and ``torch.ones`` translate. (The GELU reads ``h * 0.5``: no epilogue activation computes
    that, so it stays a torch step.)"""
    p = problem("tiny_flag_gelu")
    text = init_program(p).text
    assert "zeros_like" not in text and "torch.tanh(0.7978845608028654" in text and "torch.full([K], 1" in text
    assert check_program(text, p) == (True, "PASSED")


def test_a_residual_add_after_the_gemm_runs_in_its_epilogue():
    """L1_030's ``matmul(x, W.t()) + residual`` (through the reshape back to [B, S, N]): the add is the epilogue's
    ``d = cast(acc, bf16) + c`` (rounded as the reference: the product first), no torch step is left, and the
    program passes the emulated grade."""
    from shared_data import SHARED_SOL_EXECBENCH

    folder = SHARED_SOL_EXECBENCH / "L1_030_attention_output_projection_with_residual"
    if not folder.is_dir():
        pytest.skip("L1_030 not found beside this clone")
    p = find_problem(str(folder))
    result = init_program(p)
    text = result.text
    assert "c : bf16[M, N] row" in text and "epilogue { d = cast(acc, bf16) + c }" in text
    assert "residual.reshape([-1, hidden_size])" in text and result.summary().startswith("1 kernel(s) (1 call(s)), 0 torch")
    assert check_program(text, p) == (True, "PASSED")


def test_a_k_not_16_byte_aligned_is_padded_so_the_tuner_can_plan_it():
    """L1_083's P·V has K = seq_len_kv, 77 on some workloads: no kernel reads rows of 154 bytes (TMA needs 16-byte
    aligned rows), so `ucutlass tune L1_083` with no spec had no legal configuration. Init pads K with zeros (the
    sum is unchanged) by an axis expression; the program passes the emulated grade and the tuner plans it."""
    from shared_data import SHARED_SOL_EXECBENCH
    from ucutlass.search.pipeline_plan import plan_pipeline

    folder = SHARED_SOL_EXECBENCH / "L1_083_attention_score_value_matmul"
    if not folder.is_dir():
        pytest.skip("L1_083 not found beside this clone")
    p = find_problem(str(folder))
    text = init_program(p).text
    assert "bmm_kpad = (8 - seq_len_kv % 8) % 8" in text
    assert "bmm0(F.pad(view, [0, bmm_kpad]), F.pad(view_1, [0, 0, 0, bmm_kpad]))" in text
    plan = plan_pipeline(p, parse(text, "init.ucut"))
    assert len(plan.kernels[0].legal) > 1
    assert check_program(text, p) == (True, "PASSED")


def test_an_n_that_varies_and_is_odd_is_padded_and_sliced_back():
    """L1_047's scores Q·Kᵀ are [S, S] with S = seq_len odd on some workloads: d's rows would not be 16-byte
    aligned. Init pads b's N by an axis expression and slices d back; the tuner plans the program (it had no legal
    configuration) and it passes the emulated grade."""
    from shared_data import SHARED_SOL_EXECBENCH
    from ucutlass.search.pipeline_plan import plan_pipeline

    folder = SHARED_SOL_EXECBENCH / "L1_047_attention_with_qk_norm_and_rope"
    if not folder.is_dir():
        pytest.skip("L1_047 not found beside this clone")
    p = find_problem(str(folder))
    text = init_program(p).text
    assert "bmm_npad = (8 - seq_len % 8) % 8" in text and "bmm = bmm_full[:, :, :seq_len]" in text
    plan_pipeline(p, parse(text, "init.ucut"))
    assert check_program(text, p) == (True, "PASSED")


def test_axis_expressions_are_read_without_eval():
    from ucutlass.init.symbols import evaluate_axes

    assert evaluate_axes("20 * batch_size", {"batch_size": 3}) == 60
    assert evaluate_axes("(8 - seq % 8) % 8", {"seq": 77}) == 3
    assert evaluate_axes("(a - b)", {"a": 5, "b": 2}) == 3
    assert evaluate_axes("missing", {}) is None
    assert evaluate_axes("__import__('os').getcwd()", {}) is None and evaluate_axes("2 ** 64", {}) is None


def test_symbolize_tells_axes_from_constants():
    sym = symbolize({"batch": (1, 2, 3), "seq": (8, 24, 16)}, {"hidden": 64})
    assert sym((8, 48, 48)) == "batch * seq"
    assert sym((64, 64, 64)) == "hidden"
    assert sym((3, 3, 3)) == "3"
    assert sym((16, 48, 32)) == "2 * seq"
    # a concatenation's length, and its rows once flattened (L2_030: torch.cat of text and image tokens, then a
    # reshape to [batch * (text + image), hidden] was written as the captured 768 and failed at other workloads)
    cat = symbolize({"batch": (2, 1, 2), "text": (128, 256, 131), "img": (256, 512, 293)}, {"hidden": 3072})
    assert cat((384, 768, 424)) == "(text + img)"
    assert cat((768, 768, 848)) == "batch * (text + img)"
    assert cat((256, 512, 262)) == "2 * text" and cat((256, 256, 262)) == "batch * text"  # products still win


def test_cli_init_writes_and_checks(tmp_path, capsys):
    out = tmp_path / "init.ucut"
    assert main(["init", str(DATA / "tiny_gemm"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert out.is_file() and "kernel gemm0 : gemm" in out.read_text()
    assert "# Captured at the workload M=" in out.read_text()  # which workload the comments' shapes are from
    assert "PASSED" in err and "100% of matmul FLOPs in kernels" in err
    assert main(["init", str(DATA / "tiny_no_lowering"), "--no-check"]) == 1
    assert "aten.argmax" in capsys.readouterr().err


def test_tune_dry_run_with_no_spec_plans_init_program_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """A dry run plans init's program from a temporary copy: nothing appears in the working folder (a new user
    found ucutlass-tune/PROBLEM/init.ucut left behind by a dry run)."""
    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(DATA / "tiny_gemm"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "tuning the program `ucutlass init` wrote" in err and "ucutlass-init-" in err
    assert "gemm0" in out and list(tmp_path.iterdir()) == []


def test_a_scalar_the_entry_point_makes_is_written_by_name():
    text = init_program(problem("tiny_scaled")).text
    assert "mm * scaling" in text  # not the value it traced with


def test_an_fp32_gemm_is_written_with_3xtf32_and_passes_emulated(tmp_path):
    """An fp32 reference: TF32 would fail the grader's accuracy check (a new user met it with an imported KernelBench
    Linear), so init writes math = 3xtf32 with its own tiles; the program checks and passes emulated."""
    import json
    import shutil

    from ucutlass.arch import check
    from ucutlass.init.program import check_program

    folder = tmp_path / "tiny_gemm_f32"
    shutil.copytree(DATA / "tiny_gemm", folder)
    d = json.loads((folder / "definition.json").read_text())
    for spec in (*d["inputs"].values(), *d["outputs"].values()):
        spec["dtype"] = "float32"
    d["name"] = "tiny_gemm_f32"
    (folder / "definition.json").write_text(json.dumps(d))
    p = find_problem(str(folder))
    text = init_program(p).text
    assert "math = 3xtf32" in text and "schedule" not in text
    program = parse(text, "init.ucut")
    assert not [d for d in check(program.kernel()) if d.severity == "error"]  # every open tile legal for 3xTF32
    ok, why = check_program(text, p)
    assert ok, why


def test_rope_positions_from_arange_are_written_and_pass_emulated():
    """aten.arange (a factory: its device= dropped, made on the inputs' device) and aten.reciprocal have torch steps
    (L2_062's RoPE stopped init at aten.arange); the program passes the emulated grade."""
    p = problem("tiny_rope_positions")
    text = init_program(p).text
    assert "torch.arange(0, 16, 2, dtype=torch.float32)" in text and "torch.arange(seq)" in text
    assert "1.0 / pow_1" in text
    assert not [line for line in text.splitlines() if "device" in line.split("#")[0]]  # code, not the comments
    assert check_program(text, p) == (True, "PASSED")


def test_fp8_quantisation_steps_and_unbind_are_written_and_pass_emulated():
    """`.to(torch.float8_e4m3fn)` has a pipeline spelling (Quant_001/007/016/017 stopped at it), aten.unbind is a
    view with several results; the dequantised f32 matmul runs in a kernel (3xTF32) and the program passes."""
    p = problem("tiny_fp8_quant")
    result = init_program(p)
    text = result.text
    assert ".to(torch.float8_e4m3fn)" in text and ".unbind(" in text
    assert result.flop_share == 1.0
    assert check_program(text, p) == (True, "PASSED")


def test_a_causal_mask_of_minus_inf_is_written_and_passes_emulated():
    """L2_062's causal mask: torch.full(…, -inf) (a factory) and torch.triu; -inf is spelled -torch.inf."""
    p = problem("tiny_causal_mask")
    text = init_program(p).text
    assert "torch.full([seq, seq], -torch.inf)" in text and "torch.triu(full, 1)" in text
    parse("kernel k : gemm { a : bf16[M, K] row  b : bf16[K, N] row  d : bf16[M, N] row }\n"
          "pipeline p { m = x.masked_fill(mask, -torch.inf)  n = m + torch.nan  return n }", "x.ucut")
    assert check_program(text, p) == (True, "PASSED")


def test_a_reference_that_writes_in_place_is_captured_functionalized_and_passes_emulated():
    """`ids[:, -1] = 0` after torch.roll (L1_057): captured out of place (select_scatter), the 0 constant as a number,
    the embedding lookup `table[ids]` as an index step; no in-place op in the program."""
    p = problem("tiny_in_place")
    cap = capture(p)
    assert not any(str(n.target).split(".")[1].endswith("_") for n in cap.graph.graph.nodes
                   if n.op == "call_function")
    text = init_program(p).text
    assert "torch.roll(ids, [-1], [-1])" in text and "torch.select_scatter(roll, fill, 1, -1)" in text
    assert "table[select_scatter]" in text
    assert check_program(text, p) == (True, "PASSED")


def test_a_blockwise_dequantised_fp8_matmul_is_a_blockwise_fp8_kernel_and_passes_emulated():
    """SOL-ExecBench's FP8 references multiply the dequantised f32 tensors (1x128 activation blocks, 128x128 weight
    blocks): init calls a blockwise-scaled FP8 gemm on the e4m3 tensors and their scales instead of 3xTF32 on the f32
    copies (the dequantisation steps and the cast drop out); the program passes the emulated grade."""
    p = problem("tiny_fp8_blockwise")
    result = init_program(p)
    text = result.text
    assert "a : f8e4m3[M, K] row   b : f8e4m3[N, K] row   d : bf16[M, N] row" in text  # .to(bf16): the epilogue's
    assert "scale_a : f32[M, K/128] row   scale_b : f32[N/128, K/128] row" in text
    assert "3xtf32" not in text and "mul" not in text.split("pipeline")[1]  # no dequantising step left
    assert result.flop_share == 1.0
    assert check_program(text, p) == (True, "PASSED")


@pytest.mark.gpu
@pytest.mark.nvcc
def test_the_blockwise_fp8_program_init_writes_compiles_and_passes_the_grader(tmp_path, capsys):
    """On the GPU: the blockwise-scaled FP8 gemm init declares for tiny_fp8_blockwise builds with nvcc and the
    pipeline passes `ucutlass grade` against the reference (one compile)."""
    out = tmp_path / "init.ucut"
    assert main(["init", str(DATA / "tiny_fp8_blockwise"), "-o", str(out), "--no-check"]) == 0
    code = main(["grade", str(out), str(DATA / "tiny_fp8_blockwise"), "--pick", "gemm0.tile=128x128x128",
                 "--pick", "gemm0.schedule=cooperative", "--timeout", "600"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err


def test_the_fp8_gemms_bias_and_cast_go_to_its_epilogue(tmp_path):
    """`(y + bias).to(torch.bfloat16)` after the dequantised matmul (CuBLASRefBlockwiseGemm, Quant_001): d is bf16
    with the bias in the epilogue (acc + bias in f32, rounded once, as the reference); the program passes."""
    import json
    import shutil

    folder = tmp_path / "tiny_fp8_blockwise_bias"
    shutil.copytree(DATA / "tiny_fp8_blockwise", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["name"] = folder.name
    d["inputs"]["bias"] = {"shape": [128], "dtype": "bfloat16"}
    d["reference"] = d["reference"].replace("def run(x, w):", "def run(x, w, bias):").replace(
        "return (a @ b.T).to(torch.bfloat16)", "return ((a @ b.T) + bias).to(torch.bfloat16)")
    (folder / "definition.json").write_text(json.dumps(d))
    lines = [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines()]
    for w in lines:
        w["inputs"]["bias"] = {"type": "random"}
    (folder / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in lines))
    p = find_problem(str(folder))
    text = init_program(p).text
    assert "d : bf16[M, N] row" in text and "epilogue { bias : bf16[N]   d = acc + bias }" in text
    # no torch step after the gemm; its result takes the output's name
    assert "  y = gemm0(" in text and "bias=bias)" in text and text.rstrip().endswith("return y\n}")
    assert check_program(text, p) == (True, "PASSED")


def test_a_depthwise_conv_is_a_torch_step_and_a_pad_keeps_its_value():
    """L1_029's Mamba conv1d (groups = channels; the conv family builds groups = 1 only) becomes F.conv1d, a torch
    step, after the projection's gemm; aten's constant_pad_nd(x, pad, value) is F.pad(x, pad, value=…) (its third
    positional argument is the mode: writing the value there failed to bind)."""
    p = problem("tiny_depthwise_conv")
    text = init_program(p).text
    assert "F.conv1d(" in text and ", C)" in text and "value=0.5" in text, text
    assert check_program(text, p) == (True, "PASSED")


def test_a_dense_conv_is_a_conv_kernel_channels_last_that_passes_emulated():
    """tiny_dense_conv: ``F.conv1d(x.transpose(1, 2), w)`` (64 channels in, 32 out, window 3) is a ``conv`` kernel
    on channels-last copies ([N, W, C], [K, S, C]), its [N, Q, K] output viewed back as [N, K, Q]."""
    p = problem("tiny_dense_conv")
    result = init_program(p)
    text = result.text
    assert result.flop_share == 1.0 and "kernel conv0 : conv {" in text
    assert "a : bf16[N, W, C]   b : bf16[K, S, C]   d : bf16[N, Q, K]" in text and "stride = 1   padding = 0" in text
    assert "= conv_w.permute(0, 2, 1).contiguous()" in text and "_channels_last.permute(0, 2, 1)" in text
    assert check_program(text, p) == (True, "PASSED")


def test_a_transposed_conv_is_refused_by_name(tmp_path):
    import json
    import shutil

    folder = tmp_path / "tiny_conv_transposed"
    shutil.copytree(DATA / "tiny_dense_conv", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["name"] = "tiny_conv_transposed"
    d["reference"] = d["reference"].replace("F.conv1d(x.transpose(1, 2), conv_w)",
                                            "F.conv_transpose1d(x.transpose(1, 2), conv_w.transpose(0, 1))")
    (folder / "definition.json").write_text(json.dumps(d))
    with pytest.raises(InitError, match=r"aten\.convolution \(reference line 5\): a transposed convolution"):
        init_program(find_problem(str(folder)))


def test_a_conv_whose_channels_are_not_16_bytes_is_the_reference_s_torch_step(tmp_path):
    """One input channel (L2_015's mel spectrogram): 2 bytes a row, which TMA im2col cannot load (sm90.conv-align);
    the conv stays ``F.conv1d`` as the reference calls it, and the program still passes."""
    import json
    import shutil

    folder = tmp_path / "tiny_conv_one_channel"
    shutil.copytree(DATA / "tiny_dense_conv", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["name"], d["axes"]["H"]["value"] = "tiny_conv_one_channel", 1
    (folder / "definition.json").write_text(json.dumps(d))
    p = find_problem(str(folder))
    text = init_program(p).text
    assert "kernel conv" not in text and "F.conv1d(" in text
    assert check_program(text, p) == (True, "PASSED")


def test_init_says_where_the_check_cannot_run_here(tmp_path, capsys, monkeypatch):
    """A problem whose smallest workload's inputs exceed a quarter of this machine's memory (L2_012's: 14 GB) is
    written and not graded on a CPU: init says so and how to grade it on a GPU (it had failed making the inputs)."""
    import os
    import sys

    from ucutlass.init import run_init

    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda k: 1 if k == "SC_PHYS_PAGES" else real(k))  # one page of memory
    out = tmp_path / "p.ucut"
    assert run_init(problem("tiny_gemm"), str(out), out=sys.stderr) == 0 and out.exists()
    assert f"not run here: its inputs are 0 MiB, more than a quarter of this machine's 0 GiB; grade it on a GPU: " \
           f"ucutlass grade {out} tiny_gemm --emulate" in capsys.readouterr().err


def test_a_grader_that_fails_is_the_check_s_message_not_a_traceback(monkeypatch):
    """On an H100, the emulated grade of L2_012 ran the GPU out of memory making its ground truth: the grader's
    error is init's check result (scripts/init_table.py had ended in a traceback)."""
    from ucutlass.grader import supervised
    from ucutlass.grader.errors import GraderError

    def fail(*args, **kwargs):
        raise GraderError("the grader failed: OutOfMemoryError: CUDA out of memory.\nmore")

    monkeypatch.setattr(supervised, "grade_in_child", fail)
    p = problem("tiny_gemm")
    assert check_program(init_program(p).text, p) == (False, "the grader failed: OutOfMemoryError: CUDA out of memory.")


def test_a_bound_gemm_whose_m_can_be_decode_sized_gets_swap_ab_and_narrow_tiles():
    """FlashInfer-Bench_006 is captured at M = 2 but its workloads run M from 1 to 16294: the one kernel's space
    spans both (swap AB with 16/32-wide tiles and split-K for decode, clusters for the large M), and `tune` serves
    ranges of M with a dispatch. A kernel inside a pipeline (one configuration for every M) gets no decode tiles."""
    from shared_data import SHARED_SOL_EXECBENCH

    from ucutlass.arch.legality import legal_combinations
    from ucutlass.init.emit import m_span

    folder = SHARED_SOL_EXECBENCH / "FlashInfer-Bench_006_gemm_n2048_k4096"
    if not folder.is_dir():
        pytest.skip("FlashInfer-Bench_006 not found beside this clone")
    p = find_problem(str(folder))
    result = init_program(p)
    (kernel,) = parse(result.text, "init.ucut").kernels
    assert "128x16x128" in result.text and "swap_ab = {false, true}" in result.text, result.text
    assert "split_k = {1, 2, 4, 8}" in result.text and "cluster = {1x1x1, 2x1x1}" in result.text
    assert m_span(result.partition.kernels[0], p, {"M": 2}) == (1, 16294)
    legal, _ = legal_combinations(kernel)
    assert any(pick["swap_ab"] is True and pick["tile"][1] == 16 for pick in legal), "no legal swapped decode kernel"
    # a pipeline's kernel (tiny_linear_residual: M = batch x seq from 8): no decode tiles
    assert "swap_ab" not in init_program(problem("tiny_linear_residual")).text


def test_one_input_reshaped_alike_for_three_projections_is_one_view():
    """L1_050 reshapes hidden_states the same way before each of its q/k/v projections: init writes that view once
    and the three kernel calls read it (it wrote view, view_1 and view_2); the reference line comments move to the
    calls, and the program still passes the emulated grade."""
    from shared_data import SHARED_SOL_EXECBENCH

    folder = SHARED_SOL_EXECBENCH / "L1_050_attention_qkv_projection_with_bias_and_reshape"
    if not folder.is_dir():
        pytest.skip("L1_050 not found beside this clone")
    p = find_problem(str(folder))
    text = init_program(p).text
    assert text.count("hidden_states.reshape(") == 1 and not re.search(r"\bview_[12]\b", text)
    assert "mm_1 = gemm0(view, k_weight, bias=k_bias)   # line 42:" in text
    assert "mm_2 = gemm0(view, v_weight, bias=v_bias)   # line 45:" in text
    assert check_program(text, p) == (True, "PASSED")
