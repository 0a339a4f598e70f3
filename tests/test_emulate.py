"""Emulation (issue 16): a program's kernels run as torch ops from their IR, graded with no nvcc and no GPU.

Two kinds of test: every shipped program and every example that binds to a problem passes the real grader on
the CPU with ``--emulate``'s solution (its smallest workload), and a wrong epilogue fails it; and each family's
emulator against torch written independently here (layouts, epilogue inputs and outputs, reductions, batches,
FP8 scales, groups, attention with GQA, causal mask and LSE, a dispatch)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass.emulate import EMULATORS, emulate_kernel, load_solution
from ucutlass.grader import Grader, Status
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

FAST = dict(warmup_ms=1.0, rep=3.0, timeout_s=300.0)

#: (program, problem id): every shipped program, and the examples whose header names the problem they bind to.
PROGRAMS = [(p / "kernel.ucut", p.name) for p in sorted((REPO / "problems").iterdir()) if (p / "kernel.ucut").is_file()]
PROGRAMS += [(REPO / "examples/gemm_bias_gelu.ucut", "ffn_up_gelu_tanh_gpt2_xl"),
             (REPO / "examples/gemm_residual.ucut", "o_proj_residual_llama3_1_8b"),
             (REPO / "examples/flashinfer_gemm_f16.ucut", "FlashInfer-Bench_007_gemm_n4096_k4096")]
#: Programs whose smallest workload is too big to grade on a CI machine's CPU (L1_003: a 152k-row vocabulary,
#: 2.5 minutes on 2 cores with the float64 ground truth): emulated on the GPU instead.
GPU_PROGRAMS = [(REPO / "examples/lm_head_logit_slicing.ucut", "L1_003_lm_head_projection_with_logit_slicing")]


def _problem(pid: str):
    try:
        return find_problem(pid, [SHARED_SOL_EXECBENCH])
    except Exception as e:  # noqa: BLE001  (a shared problem missing beside this clone)
        pytest.skip(f"problem {pid} not found: {e}")


def _smallest(problem):
    """The workload with the fewest input and output elements."""
    def size(w):
        axes = problem.resolve_axes(w)
        return sum(math.prod(problem.shape(s, axes) or ()) for s in (*problem.inputs.values(),
                                                                     *problem.outputs.values()))
    return min(problem.workloads, key=size)


def _concrete(program):
    """The program with each open choice at its first option (how a kernel computes, not what)."""
    return program.resolve({k: c.options[0] for k, c in program.choices().items()}) if program.choices() else program


def _grade_emulated(source: str, file: str, pid: str, device: str = "cpu"):
    problem = _problem(pid)
    program = _concrete(parse(source, file))
    sol = emulated_solution(program.source, file, None, Path(file).stem, dispatch=bool(program.dispatch()))
    with Grader(problem, device=device, **FAST) as g:
        (r,) = g.grade(sol, [_smallest(problem)])
    return r


@pytest.mark.parametrize("path, pid", PROGRAMS, ids=[f"{p.parent.name}/{p.name}" for p, _ in PROGRAMS])
def test_shipped_programs_pass_emulated(path, pid):
    r = _grade_emulated(path.read_text(), str(path), pid)
    assert r.status is Status.PASSED, r.log


@pytest.mark.gpu
@pytest.mark.parametrize("path, pid", GPU_PROGRAMS, ids=[f"{p.parent.name}/{p.name}" for p, _ in GPU_PROGRAMS])
def test_large_programs_pass_emulated_on_the_gpu(path, pid):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    r = _grade_emulated(path.read_text(), str(path), pid, device="cuda")
    assert r.status is Status.PASSED, r.log


def test_a_wrong_epilogue_fails_emulated():
    """The bias subtracted instead of added: the emulated program computes something else, and the grader says so."""
    path = REPO / "problems/qkv_proj_bias_qwen2_5_7b/kernel.ucut"
    source = path.read_text()
    assert "d = acc + bias" in source
    r = _grade_emulated(source.replace("d = acc + bias", "d = acc - bias"), "wrong.ucut", "qkv_proj_bias_qwen2_5_7b")
    assert r.status is Status.INCORRECT_NUMERICAL, r.log


def test_every_family_has_an_emulator():
    from ucutlass.lang import FAMILIES

    assert set(EMULATORS) == set(FAMILIES)


# --- each family against torch ----------------------------------------------------------------------------

def _kernel(text: str):
    return parse(text, "test.ucut").kernels[0]


def _run(kernel, **tensors):
    emu = emulate_kernel(kernel)
    emu.call([tensors[n] for n in emu.abi.ptr_names + emu.abi.scalar_names])
    return emu


def _close(got, want, tol=2e-2):
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_gemm_col_major_weight_bias_gelu_tanh_and_an_extra_output():
    k = _kernel("""kernel f : gemm {
      a : bf16[M, K] row
      b : bf16[K, N] row
      d : bf16[M, N] row
      epilogue {
        bias : bf16[N]
        pre : bf16[M, N] row -> pre_act
        rowmax : f32[M] -> row_max
        colsum : f32[N] -> col_sum
        pre = acc + bias
        rowmax = max_n(acc)
        colsum = sum_m(pre)
        d = gelu_tanh(pre)
      }
    }""")
    torch.manual_seed(0)
    a, b, bias = (torch.randn(s).bfloat16() for s in ((2, 3, 32), (32, 24), (24,)))
    d, pre = torch.empty(2, 3, 24, dtype=torch.bfloat16), torch.empty(6, 24, dtype=torch.bfloat16)
    rowmax, colsum = torch.empty(6), torch.empty(24)
    _run(k, a=a, b=b, d=d, bias=bias, pre=pre, rowmax=rowmax, colsum=colsum)
    acc = a.float().reshape(6, 32) @ b.float()
    stored = (acc + bias.float()).bfloat16().float()  # pre is read back as stored
    assert torch.equal(pre, (acc + bias.float()).bfloat16())
    _close(d.reshape(6, 24), F.gelu(stored, approximate="tanh"))
    _close(rowmax, acc.amax(1), 1e-5)
    _close(colsum, stored.sum(0), 1e-4)


def test_batched_gemm_column_major_operands_a_batch_bias_and_a_shared_residual():
    k = parse_file(REPO / "tests/kernels/batched_bias.ucut").kernel()
    torch.manual_seed(1)
    L, M, N, K = 3, 8, 16, 24
    a = torch.randn(L, K, M).bfloat16().transpose(1, 2)  # [L, M, K] column-major
    b = torch.randn(L, K, N).bfloat16().transpose(1, 2)  # [L, N, K] column-major
    bias, residual = torch.randn(L, N).bfloat16(), torch.randn(M, N).bfloat16()
    d = torch.empty(L, M, N, dtype=torch.bfloat16)
    _run(k, a=a, b=b, d=d, bias=bias, residual=residual)
    want = a.float() @ b.float().transpose(1, 2) + bias.float()[:, None, :] + residual.float()
    _close(d, want)


def test_fp8_blockwise_scales_dequantise_each_block():
    k = parse_file(REPO / "tests/kernels/fp8_blockwise.ucut").kernel()
    torch.manual_seed(2)
    M, N, K = 16, 256, 256
    x, w = torch.randn(M, K).to(torch.float8_e4m3fn), torch.randn(N, K).to(torch.float8_e4m3fn)
    sx, sw = torch.rand(M, K // 128) + 0.5, torch.rand(N // 128, K // 128) + 0.5
    bias, d = torch.randn(N).bfloat16(), torch.empty(M, N, dtype=torch.bfloat16)
    _run(k, a=x, b=w, d=d, bias=bias, scale_a=sx, scale_b=sw)
    xd = x.float() * sx.repeat_interleave(128, 1)
    wd = w.float() * sw.repeat_interleave(128, 0).repeat_interleave(128, 1)
    _close(d, xd @ wd.T + bias.float(), 5e-2)


def test_fp8_per_tensor_scales_multiply_the_accumulator():
    k = parse_file(REPO / "tests/kernels/fp8_tensor.ucut").kernel()
    emu = emulate_kernel(k)
    torch.manual_seed(3)
    tensors = {}
    for name in emu.abi.ptr_names:
        if name in ("scale_a", "scale_b"):
            tensors[name] = torch.tensor([0.5 if name == "scale_a" else 4.0])
    assert set(tensors) == {"scale_a", "scale_b"}, emu.abi.ptr_names
    M, N, K = 8, 32, 64
    tensors.update(a=torch.randn(M, K).to(torch.float8_e4m3fn), b=torch.randn(N, K).to(torch.float8_e4m3fn),
                   d=torch.empty(M, N, dtype=getattr(torch, k.d.dtype.torch_name)))
    extra = [n for n in emu.abi.ptr_names + emu.abi.scalar_names if n not in tensors]
    assert not extra, f"fp8_tensor.ucut has inputs this test does not make: {extra}"
    emu.call([tensors[n] for n in emu.abi.ptr_names])
    _close(tensors["d"], F.silu((tensors["a"].float() @ tensors["b"].float().T) * 2.0), 5e-2)


def test_grouped_gemm_per_group_weights_empty_groups_and_a_per_row_scale():
    k = parse_file(REPO / "examples/moe_experts_grouped.ucut")
    k = _concrete(k).kernels[0]
    torch.manual_seed(4)
    sizes = torch.tensor([3, 0, 5, 2], dtype=torch.int32)
    M, N, K, G = int(sizes.sum()), 16, 32, 4
    a, b = torch.randn(M, K).bfloat16(), torch.randn(G, N, K).bfloat16()
    w, d = torch.rand(M).bfloat16(), torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    _run(k, a=a, b=b, d=d, m_sizes=sizes, w=w)
    rows = torch.repeat_interleave(torch.arange(G), sizes.long())
    want = torch.einsum("mk,mnk->mn", a.float(), b.float()[rows]) * w.float()[:, None]
    _close(d, want)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_attention_gqa_causal_with_lse_matches_sdpa(layout):
    text = (REPO / "examples/attention_gqa_causal.ucut").read_text()
    if layout == "bhsd":
        text = (text.replace("[B, Sq, Hq, 128]", "[B, Hq, Sq, 128]").replace("[B, Sk, Hkv, 128]", "[B, Hkv, Sk, 128]"))
    k = _concrete(parse(text, "attn.ucut")).kernels[0]
    assert k.layout == layout
    torch.manual_seed(5)
    B, Hq, Hkv, Sq, D = 2, 4, 2, 16, 128
    shape = (lambda h: (B, Sq, h, D)) if layout == "bshd" else (lambda h: (B, h, Sq, D))
    q, kk, v = torch.randn(shape(Hq)).bfloat16(), torch.randn(shape(Hkv)).bfloat16(), torch.randn(shape(Hkv)).bfloat16()
    o, lse = torch.empty(shape(Hq), dtype=torch.bfloat16), torch.empty(B, Hq, Sq)
    _run(k, q=q, k=kk, v=v, o=o, lse=lse)
    heads = (lambda x: x.transpose(1, 2)) if layout == "bshd" else (lambda x: x)
    qh, kh, vh = (heads(x).float() for x in (q, kk, v))
    kh, vh = kh.repeat_interleave(2, 1), vh.repeat_interleave(2, 1)
    want = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    _close(heads(o), want)
    scores = (qh @ kh.transpose(-1, -2)) / math.sqrt(D)
    scores = scores.masked_fill(~torch.ones(Sq, Sq, dtype=torch.bool).tril(), float("-inf"))
    _close(lse, torch.logsumexp(scores, -1), 1e-4)


def test_an_emulated_dispatch_runs_the_kernel_whose_when_the_call_meets():
    """Two kernels behind one dispatch (one epilogue: the language requires it): each call picks by its M."""
    problem = _problem("o_proj_residual_llama3_1_8b")
    text = (REPO / "problems/o_proj_residual_llama3_1_8b/kernel.ucut").read_text()
    program = _concrete(parse(text, "k.ucut"))
    body = program.source
    assert "kernel o_proj : gemm {" in body
    small = body.replace("kernel o_proj : gemm {", "kernel small : gemm when M <= 4 {")
    fn = load_solution({"source": small + "\n" + body, "file": "d.ucut", "dispatch": True}, problem)
    assert fn.whens == (("M", 4), None)
    assert list(problem.inputs) == ["attn_output", "o_proj_weight", "residual"], problem.inputs
    torch.manual_seed(6)
    w = torch.randn(32, 64).bfloat16()
    for m, index in ((2, 0), (8, 1)):  # M = 2 meets `when M <= 4`; M = 8 falls back
        x, res = torch.randn(1, m, 64).bfloat16(), torch.randn(1, m, 32).bfloat16()
        out = torch.empty(1, m, 32, dtype=torch.bfloat16)
        assert fn.choose(x, w, res, out) == index
        fn(x, w, res, out)
        _close(out, x.float() @ w.float().T + res.float())


def test_what_emulation_cannot_read_yet_is_refused_by_name():
    from ucutlass.errors import KernelRuntimeError

    with pytest.raises(KernelRuntimeError, match="block-scaled"):
        emulate_kernel(parse_file(REPO / "tests/kernels/sm100_blockscaled_mxfp8.ucut").kernel())
    with pytest.raises(KernelRuntimeError, match="concrete"):
        emulate_kernel(parse_file(REPO / "examples/gemm.ucut").kernel())


def test_emulate_picks_a_combination_that_is_legal_and_binds(tmp_path, capsys):
    """The first options may break a rule (tile M 64 with cooperative) or not bind (an f16 choice for a bf16
    tensor): --emulate takes the first combination that passes the rules and binds, and says which; `check`
    accepts an open dtype whose options include the tensor's."""
    from ucutlass.cli import main

    text = (REPO / "problems/o_proj_residual_llama3_1_8b/kernel.ucut").read_text()
    assert "a : bf16[M, K] row <- attn_output" in text
    f = tmp_path / "choice.ucut"
    f.write_text(text.replace("a : bf16[M, K] row <- attn_output", "a : {f16, bf16}[M, K] row <- attn_output"))
    assert main(["check", str(f), "--problem", "o_proj_residual_llama3_1_8b"]) == 0
    rc = main(["grade", str(f), "o_proj_residual_llama3_1_8b", "--emulate", "--workloads", "1"])
    cap = capsys.readouterr()
    err, out = cap.err, cap.out
    assert rc == 0, err
    assert "o_proj.a.dtype = bf16" in err and "o_proj.schedule = pingpong" in err, err
    # An emulation's times are torch ops on this machine: no speedup is shown for them, in the table or the summary.
    row = next(line for line in out.splitlines() if "PASSED" in line)
    assert "latency ms (emulated)" in out and "x " not in row + " " and '"geomean_speedup": null' in out, out
    # Instead of SOL columns, the table says how close the emulation came to the workload's tolerance.
    header = next(line for line in out.splitlines() if line.startswith("workload"))
    assert "max err abs / rel" in header and "tolerance atol / rtol" in header and "matched / required" in header
    assert " 0.01 / 0.02 " in row and " / 0.99" in row, row  # every workload of this problem: atol, rtol, matched


def test_the_library_s_emulated_solution_takes_open_choices_as_check_does(tmp_path):
    """What `check` accepts, the emulated loader runs: a library caller's ``emulated_solution`` of a program with
    open choices (one of them a dtype whose first option does not bind) grades as ``grade --emulate`` would,
    and a program with no legal binding combination fails with the reason, not a traceback."""
    text = (REPO / "problems/o_proj_residual_llama3_1_8b/kernel.ucut").read_text()
    text = text.replace("a : bf16[M, K] row <- attn_output", "a : {f16, bf16}[M, K] row <- attn_output")
    problem = find_problem("o_proj_residual_llama3_1_8b")
    assert parse(text, "open.ucut").choices()
    with Grader(problem, device="cpu", **FAST) as g:
        (r,) = g.grade(emulated_solution(text, "open.ucut", None, "open"), [_smallest(problem)])
        assert r.status is Status.PASSED, r.log
        bad = text.replace("a : {f16, bf16}[M, K] row <- attn_output", "a : {f16, f32}[M, K] row <- attn_output")
        (r,) = g.grade(emulated_solution(bad, "bad.ucut", None, "bad"), [_smallest(problem)])
    assert r.status is not Status.PASSED
    assert "no combination of kernel o_proj's choices passes the rules and binds" in r.log + (r.reason or ""), r.log


def test_emulated_table_shows_a_failure_s_errors_and_its_reason():
    """A wrong program's row in an emulated grade says by how much it missed, and why (the reason line)."""
    from ucutlass.grader import Correctness, WorkloadResult, format_table

    r = WorkloadResult("p", "u", {"a": 1}, "a=1", "s", Status.INCORRECT_NUMERICAL, reason="max error 3 over tolerance",
                       correctness=Correctness(3.0, 0.5, 0.9, {"max_atol": 0.01, "max_rtol": 0.02,
                                                              "required_matched_ratio": 0.99}))
    lines = format_table([r], emulated=True).splitlines()
    assert "3 / 0.5" in lines[2] and "0.01 / 0.02" in lines[2] and "0.9 / 0.99" in lines[2], lines
    assert lines[3].strip() == "a=1: max error 3 over tolerance", lines


def test_emulated_table_explains_a_passed_row_whose_max_error_is_above_the_tolerance():
    """A new user saw "0.125 / 6.59e+05" beside PASSED: the table says why (per-element match, matched share)."""
    from ucutlass.grader import Correctness, WorkloadResult, format_table

    tol = {"max_atol": 0.01, "max_rtol": 0.02, "required_matched_ratio": 0.99}
    r = WorkloadResult("p", "u", {"a": 1}, "a=1", "s", Status.PASSED, correctness=Correctness(0.125, 6.6e5, 1.0, tol))
    ok = WorkloadResult("p", "u", {"a": 1}, "a=1", "s", Status.PASSED, correctness=Correctness(0.005, 0.01, 1.0, tol))
    assert "matched share" in format_table(iter([r]), emulated=True)
    assert "matched share" not in format_table([ok], emulated=True)
