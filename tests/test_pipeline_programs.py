"""Pipelines (issue 16, step 2): ``pipeline NAME { … }`` wires a file's kernels and torch steps into one solution.

The examples/pipeline_*.ucut programs bind to their SOL-ExecBench problems (shapes and dtypes flow on every workload)
and pass the real grader emulated on the CPU on their smallest workload (the three small ones here; the large ones
on the GPU, emulated and compiled); a pipeline that computes the wrong thing fails; bad pipelines get one positioned
error each (a cycle, an unbound output, a shape that does not flow, a torch step outside the allow-list, an
intermediate used before it is made, …); intermediates are allocated once per shape.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass import arch
from ucutlass.bind import Port, bind_pipeline, kernel_output_shapes
from ucutlass.cli import main
from ucutlass.emulate import emulate_pipeline
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.grader import Grader, Status
from ucutlass.ir import Layout
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

FAST = dict(warmup_ms=1.0, rep=3.0, timeout_s=300.0)
EX = REPO / "examples"

#: (example, problem): small enough to grade emulated on a CI machine's CPU (about 15 s each on 2 cores).
CPU_PIPELINES = [
    (EX / "pipeline_qkv_heads.ucut", "L1_050_attention_qkv_projection_with_bias_and_reshape"),
    (EX / "pipeline_score_value.ucut", "L1_083_attention_score_value_matmul"),
    (EX / "pipeline_norm_kv.ucut", "L1_073_fused_encoder_final_norm_to_decoder_cross_attention_kv_projection"),
    # Issue 16 (new-user pipelines, docs/new-user-pipelines.md): about 20 s emulated on 2 busy cores.
    (EX / "pipeline_repeat_kv_scores.ucut", "L1_031_repeat_kv_attention_matmul"),
]
#: Bound on the CPU (meta tensors: no data), graded on the GPU (their smallest workloads are 1-70 GFLOP: minutes on
#: a CI machine's CPU; L1_048's took 212 s).
GPU_PIPELINES = [
    (EX / "pipeline_o_proj_residual.ucut", "L1_030_attention_output_projection_with_residual"),
    (EX / "pipeline_gate_up_gelu.ucut", "L1_048_fused_gate_up_projection_with_swiglu"),
    (EX / "pipeline_residual_rms_mlp.ucut", "L2_004_fused_residual_rms_mlp"),
    (EX / "pipeline_gqa_rope_qk_norm.ucut", "L2_027_grouped_query_attention_with_yarn_rope_and_qk_norm"),
]
#: Known differences from the reference that the grader does not accept (none now: L2_027's FMHA runs with
#: `scores = eager`, as the reference rounds Q·Kᵀ to bf16, and passes emulated on its smallest workload; with f32
#: scores its structured trial was 96.2% within tolerance, 98% required).
KNOWN_DIFFERENT: list = []
#: Too large for the CPU as they are, so also graded there with their const axes made small (a copy of the problem in
#: a temporary folder, only the extents changed): the same reference, the same program.
SHRUNK = [
    (EX / "pipeline_gate_up_gelu.ucut", "L1_048_fused_gate_up_projection_with_swiglu",
     {"hidden_size": 256, "intermediate_size": 512}),
    (EX / "pipeline_residual_rms_mlp.ucut", "L2_004_fused_residual_rms_mlp",
     {"hidden_size": 256, "intermediate_size": 512}),
    (EX / "pipeline_swiglu_backward.ucut", "L2_005_swiglu_mlp_backward", {"hidden_size": 256, "intermediate_size": 512}),
    # 256 experts [E, 2048, 7168] x3: 23 GB of weights at full size (tests/test_pipeline_moe.py: small tensors)
    (EX / "pipeline_moe_experts.ucut", "L1_044_moe_expert_computation",
     {"num_experts": 32, "hidden_size": 128, "intermediate_size": 64}),
    # The whole decoder layer; heads and head_dim stay (the reference fixes them), so do RoPE and both attentions.
    (EX / "pipeline_decoder_layer.ucut", "L2_062_decoder_complete_layer",
     {"hidden_size": 256, "intermediate_size": 512, "cross_hidden_size": 256}),
]
GPU_PIPELINES += [(path, pid) for path, pid, _ in SHRUNK[2:]]
#: FP8 (blockwise-scaled GEMMs after torch quantisation steps): emulated on the CPU with small extents, bit for bit
#: against the reference, in tests/test_pipeline_fp8.py.
GPU_PIPELINES += [(EX / "pipeline_fp8_o_proj.ucut", "Quant_001_fp8_attention_output_projection"),
                  (EX / "pipeline_fp8_shared_expert.ucut", "Quant_017_fp8_shared_expert_mlp")]
#: Issue 20: L1_047 (mask + soft-capping; emulated grade pinned in tests/test_attention_variants.py). The reference
#: rounds the normalized P to bf16, which an online softmax cannot (~97% of elements within its tolerance, 99%
#: required); judged against the ground truth it matches as well as the reference does, and passes.
GPU_PIPELINES.append((EX / "pipeline_attention_softcap_mask.ucut", "L1_047_attention_with_qk_norm_and_rope"))
#: Issue 16 (new-user pipelines): pass emulated on their smallest workloads (about 60 s and 45 s on 2 busy cores).
GPU_PIPELINES += [(EX / "pipeline_latent_kv_split.ucut", "L1_064_latent_kv_expansion_with_split"),
                  (EX / "pipeline_fp8_vision_qkv.ucut", "Quant_007_fp8_vision_attention_qkv_projection")]
ALL = CPU_PIPELINES + GPU_PIPELINES

def _problem(pid: str):
    try:
        return find_problem(pid, [SHARED_SOL_EXECBENCH])
    except Exception as e:  # noqa: BLE001  (a shared problem missing beside this clone)
        pytest.skip(f"problem {pid} not found: {e}")

def _smallest(problem):
    def size(w):
        axes = problem.resolve_axes(w)
        return sum(math.prod(problem.shape(s, axes) or ()) for s in (*problem.inputs.values(),
                                                                     *problem.outputs.values()))
    return min(problem.workloads, key=size)

def _grade(source: str, file: str, pid: str, device: str = "cpu"):
    problem = _problem(pid)
    sol = emulated_solution(source, file, None, Path(file).stem, pipeline=None)
    with Grader(problem, device=device, **FAST) as g:
        (r,) = g.grade(sol, [_smallest(problem)])
    return r

def test_every_pipeline_example_is_tested():
    shipped = sorted(p for p in EX.glob("pipeline_*.ucut") if not p.name.startswith("pipeline_conv_")  # conv:
                     and not p.name.startswith("pipeline_fp32_"))  # tests/test_conv_programs.py, test_fp32_math.py
    assert shipped and sorted(p for p, _ in ALL) == shipped

@pytest.mark.parametrize("path, pid", ALL, ids=[p.stem for p, _ in ALL])
def test_examples_bind_on_every_workload(path, pid):
    problem = _problem(pid)
    program = parse_file(path)
    binding = bind_pipeline(program, problem)
    calls = binding.kernel_calls()
    assert calls and all(kc.bound_kernel is not None for kc in calls)
    assert all(len(kc.shapes) == len(problem.workloads) for kc in calls)
    for kc in calls:  # each bound kernel passes its target's rules on the extents of every workload (as check does)
        for w in kc.binding.problem.workloads:
            errors = [d.format() for d in arch.check(kc.bound_kernel, kc.binding.extents(w)) if d.severity == "error"]
            assert not errors, (kc.call.target, w.label(), errors)
    lines = binding.describe()
    heads = [line for line in lines if re.match(r"  \d+\. ", line)]
    assert len(heads) == len(program.pipeline().steps) and any("kernel " in line for line in lines)
    assert all(len(line) <= 110 for line in heads if "    [" in line)  # a longer step puts its runs below

def test_step_listing_when_emulated_names_no_configuration():
    """``grade --emulate`` runs kernels as torch ops: the listing says so instead of naming a compiled
    configuration (``o_proj_sm90_bf16_..._cooperative``) that never runs; a step too long for one line puts what
    runs on the next."""
    binding = bind_pipeline(parse_file(EX / "pipeline_o_proj_residual.ucut"),
                            find_problem("L1_030_attention_output_projection_with_residual", [SHARED_SOL_EXECBENCH]))
    compiled, emulated = binding.describe(), binding.describe(emulated=True)
    assert compiled[0] == "  1. output = o_proj(attn_output, o_proj_weight, residual)"  # 125 characters: wrapped
    assert compiled[1].startswith("     [kernel o_proj (gemm: o_proj_sm90_")
    assert emulated == ["  1. output = o_proj(attn_output, o_proj_weight, residual)    [kernel o_proj (gemm, emulated)]",
                        "  return output"]
    assert binding.describe(width=200)[0] == compiled[0] + "    " + compiled[1].lstrip()

def test_step_listing_names_tensor_arithmetic_and_host_arithmetic():
    """Arithmetic on sizes (a pad computed from an axis) runs on the host, not as a torch step; tensor arithmetic
    inside a kernel call's arguments (SwiGLU backward's ``wgrad(g, a * u)``) is a torch step that runs first."""
    sv = bind_pipeline(parse_file(EX / "pipeline_score_value.ucut"),
                       find_problem("L1_083_attention_score_value_matmul", [SHARED_SOL_EXECBENCH]), None)
    assert sv.steps()[0]["runs"] == [{"kind": "value", "name": "scalar arithmetic"}]
    assert "[scalar arithmetic (on the host)]" in sv.describe()[0]
    bw = bind_pipeline(parse_file(EX / "pipeline_swiglu_backward.ucut"),
                       find_problem("L2_005_swiglu_mlp_backward", [SHARED_SOL_EXECBENCH]), None)
    steps = {s["targets"][0]: [(r["kind"], r["name"]) for r in s["runs"]] for s in bw.steps()}
    assert steps["grad_down_weight"] == [("torch", "arithmetic"), ("kernel", "wgrad")]
    assert steps["grad_up_output"] == [("torch", "arithmetic")]
    # innermost first, one entry per run of operators: (g * u).float() * (sig * (1 + x.float() * (1 - sig)))
    assert steps["grad_gate_output"] == [("torch", "arithmetic"), ("torch", ".float()"),
                                         ("torch", ".float()"), ("torch", "arithmetic"), ("torch", ".to()")]

@pytest.mark.parametrize("path, pid", CPU_PIPELINES, ids=[p.stem for p, _ in CPU_PIPELINES])
def test_examples_pass_emulated_on_the_cpu(path, pid):
    r = _grade(path.read_text(), str(path), pid)
    assert r.status is Status.PASSED, r.log

@pytest.mark.parametrize("path, pid, consts", SHRUNK, ids=[p.stem for p, _, _ in SHRUNK])
def test_large_examples_pass_emulated_on_the_cpu_with_small_extents(path, pid, consts, tmp_path):
    import json

    problem = _problem(pid)
    folder = tmp_path / pid
    folder.mkdir()
    definition = json.loads((problem.path / "definition.json").read_text())
    for axis, value in consts.items():
        assert definition["axes"][axis]["type"] == "const"
        definition["axes"][axis]["value"] = value
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = (problem.path / "workload.jsonl").read_text().splitlines()
    (folder / "workload.jsonl").write_text(lines[_smallest(problem).index] + "\n")
    small = find_problem(str(folder))
    sol = emulated_solution(path.read_text(), str(path), None, path.stem, pipeline=None)
    with Grader(small, device="cpu", **FAST) as g:
        (r,) = g.grade(sol, list(small.workloads))
    assert r.status is Status.PASSED, r.log

def test_a_wrong_pipeline_fails_the_grader():
    """Heads not moved next to head_dim: the shape is right, the values are not."""
    path, pid = CPU_PIPELINES[1]
    wrong = path.read_text().replace("o.transpose(1, 2).reshape(", "o.reshape(")
    assert wrong != path.read_text()
    r = _grade(wrong, str(path), pid)
    assert r.status is not Status.PASSED

def test_emulated_pipeline_matches_torch_and_reuses_intermediates():
    problem = _problem(CPU_PIPELINES[0][1])
    fn = emulate_pipeline(parse_file(CPU_PIPELINES[0][0]), problem)
    w = _smallest(problem)
    torch.manual_seed(0)
    inputs = problem.make_inputs(w)
    outs = [torch.empty(s, dtype=torch.bfloat16) for s in problem.output_shapes(w).values()]
    for _ in range(2):
        fn(*inputs.values(), *outs)
    assert len(fn.buffers) == 3  # one output buffer per kernel call, kept across calls of one shape
    held = {k: [o.data_ptr() for o in outs] for k, (_, outs) in fn.buffers.items()}
    fn(*inputs.values(), *outs)
    assert {k: [o.data_ptr() for o in outs] for k, (_, outs) in fn.buffers.items()} == held  # reused, not remade
    # Another shape (one token fewer) replaces each call's buffers instead of adding to them: a grader walking
    # every workload would otherwise hold all of them at once (L2_055 ran out of memory on the H200 that way).
    x = inputs["hidden_states"]  # [batch, seq, 640]
    assert x.shape[1] > 1
    fewer = {**inputs, "hidden_states": x[:, :-1]}
    fn(*fewer.values(), *[torch.empty((o.shape[0], o.shape[1] - 1, *o.shape[2:]), dtype=o.dtype) for o in outs])
    assert len(fn.buffers) == 3
    assert all(key[1][0][:2] == (x.shape[0], x.shape[1] - 1) for key, _ in fn.buffers.values())
    x, qw, qb = inputs["hidden_states"], inputs["q_weight"], inputs["q_bias"]
    q = (x.float() @ qw.float().t() + qb.float()).reshape(outs[0].shape)
    assert torch.allclose(outs[0].float(), q, rtol=2e-2, atol=2e-2)

def test_kernels_write_straight_into_the_problem_outputs():
    """A returned kernel output (or a view of it) is the problem's output: no copy; a transposed one is copied."""
    qkv = bind_pipeline(parse_file(CPU_PIPELINES[0][0]), _problem(CPU_PIPELINES[0][1]))
    assert sorted(qkv.destinations().values()) == [0, 1, 2]
    score = bind_pipeline(parse_file(CPU_PIPELINES[1][0]), _problem(CPU_PIPELINES[1][1]))
    assert score.destinations() == {}

def test_the_compiled_path_loads_each_bound_kernel_by_digest(monkeypatch):
    """runtime.load_solution on a pipeline payload (solution.pipeline_solution): each bound kernel's .so found by
    its build digest. The launcher is replaced by the emulator here (no GPU): the plumbing is what is tested."""
    import ucutlass.runtime as runtime
    from ucutlass.emulate import emulate_kernel
    from ucutlass.errors import KernelRuntimeError
    from ucutlass.solution import pipeline_solution

    path, pid = CPU_PIPELINES[2]
    problem = _problem(pid)
    program = parse_file(path)
    digests = {kc.bound_kernel.build_digest() for kc in bind_pipeline(program, problem).kernel_calls()}
    assert len(digests) == 1  # two calls of kv_proj, one build
    loaded = []
    monkeypatch.setattr(runtime, "load_kernel", lambda so, kernel: loaded.append(so) or emulate_kernel(kernel))
    sol = pipeline_solution({d: f"/nowhere/{d[:8]}.so" for d in digests}, program.source, str(path), "p")
    assert sol.loader == "ucutlass.runtime:load_solution" and sol.payload["pipeline"] is None
    fn = runtime.load_solution(sol.payload, problem)
    assert len(loaded) == 1
    w = _smallest(problem)
    inputs = problem.make_inputs(w, seed=1)
    got = [torch.empty(s, dtype=torch.float16) for s in problem.output_shapes(w).values()]
    fn(*inputs.values(), *got)
    want = [torch.empty_like(t) for t in got]
    emulate_pipeline(program, problem)(*inputs.values(), *want)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(KernelRuntimeError, match="no .so for kernel kv_proj"):
        runtime.load_solution({**sol.payload, "so_paths": {}}, problem)

def test_kernel_output_shapes_unfold_leading_dims():
    a = Port("a", ("M", "K"), Layout.row, None, False, None, None)
    b = Port("b", ("N", "K"), Layout.row, None, False, None, None)
    d = Port("d", ("M", "N"), Layout.row, None, True, None, None)
    assert kernel_output_shapes([a, b], [d], {"a": (2, 128, 64), "b": (32, 64)}) == {"d": (2, 128, 32)}
    with pytest.raises(ValueError, match="no argument gives N"):
        kernel_output_shapes([a], [d], {"a": (2, 64)})

# --- errors: one positioned diagnostic each -------------------------------------------------------------------

KERNEL = """kernel proj : gemm {
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
  epilogue { bias : bf16[N]   d = acc + bias }
}
"""
PID = "L1_050_attention_qkv_projection_with_bias_and_reshape"
RETURN = ("return q.view(batch_size, seq_len, num_attention_heads, head_dim), "
          "k.view(batch_size, seq_len, num_key_value_heads, head_dim), "
          "v.view(batch_size, seq_len, num_key_value_heads, head_dim)")
GOOD = ["q = proj(hidden_states, q_weight, q_bias)", "k = proj(hidden_states, k_weight, k_bias)",
        "v = proj(hidden_states, v_weight, v_bias)", RETURN]

def _pipeline(lines):
    return KERNEL + "pipeline p {\n" + "\n".join(f"  {line}" for line in lines) + "\n}\n"

def _bind_error(lines):
    text = _pipeline(lines)
    with pytest.raises(CheckError) as e:
        bind_pipeline(parse(text, "p.ucut"), _problem(PID))
    (d,) = e.value.diagnostics
    return d, text

def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)

def test_the_good_pipeline_binds():
    assert len(bind_pipeline(parse(_pipeline(GOOD), "p.ucut"), _problem(PID)).kernel_calls()) == 3

def test_a_cycle():
    d, text = _bind_error(["q = proj(hidden_states, q_weight, q_bias) + k", "k = proj(q, k_weight, k_bias)",
                           *GOOD[2:]])
    assert d.code == "use-before-made" and "a cycle" in d.message
    line = _line_of(text, "q = proj")
    assert (d.pos.line, d.pos.column) == (line, text.splitlines()[line - 1].index("+ k") + 3)

def test_a_name_used_in_its_own_step():
    d, text = _bind_error(["q = proj(q, q_weight, q_bias)", *GOOD[1:]])
    assert d.code == "use-before-made" and "cycle" in d.message and d.pos.line == _line_of(text, "q = proj")

def test_an_intermediate_used_before_it_is_made():
    d, text = _bind_error([GOOD[0], "k = proj(hidden_states, k_weight, k_bias) * v", *GOOD[2:]])
    assert d.code == "use-before-made" and f"line {_line_of(text, 'v = proj')}" in d.message
    assert "move that step up" in d.message

def test_an_unbound_output():
    d, text = _bind_error([*GOOD[:3], "return q, k"])
    assert d.code == "bad-return" and "query_states, key_states, value_states" in d.message
    assert d.pos.line == _line_of(text, "return")

def test_a_shape_that_does_not_flow():
    d, text = _bind_error([*GOOD[:3], RETURN.replace("num_attention_heads, head_dim", "num_attention_heads, 3")])
    assert d.code == "bad-step" and "view" in d.message and d.pos.line == _line_of(text, "return")

def test_a_kernel_argument_of_the_wrong_shape():
    d, text = _bind_error(["q = proj(hidden_states, q_weight, k_bias)", *GOOD[1:]])
    assert d.code.startswith("bind-") and "proj(hidden_states, q_weight, k_bias)" in d.message
    assert "bias (k_bias) has shape [256]" in d.message and "__" not in d.message
    assert (d.pos.line, d.pos.column) == (_line_of(text, "q = proj"), 7)

def test_a_return_of_the_wrong_dtype():
    d, _ = _bind_error([*GOOD[:3], RETURN.replace("q.view(", "q.float().view(")])
    assert d.code == "bad-return" and "float32" in d.message and "bfloat16" in d.message

def test_an_undefined_name():
    d, _ = _bind_error(["q = proj(hidden_state, q_weight, q_bias)", *GOOD[1:]])
    assert d.code == "undefined-name" and "did you mean 'hidden_states'" in d.message

def test_the_wrong_number_of_kernel_arguments():
    d, _ = _bind_error(["q = proj(hidden_states, q_weight)", *GOOD[1:]])
    assert d.code == "bad-call" and "needs argument bias" in d.message

@pytest.mark.parametrize("step, code, col", [
    ("x = torch.load(q_weight)", "not-allowed", 7),               # I/O
    ("x = torch.hub.load(q_weight)", "not-allowed", 7),           # code loading
    ("x = torch.nn.functional.linear(hidden_states, q_weight)", "not-allowed", 7),  # a GEMM is a kernel
    ("x = q_weight.numpy()", "not-allowed", 7),
    ("x = q_weight.add_(1)", "not-allowed", 7),                   # in place
    ("x = projj(hidden_states, q_weight, q_bias)", "unknown-kernel", 7),
])
def test_a_step_outside_the_allow_list_is_refused_when_parsed(step, code, col):
    text = _pipeline([step, *GOOD])
    with pytest.raises(UcutSyntaxError) as e:
        parse(text, "p.ucut")
    (d,) = e.value.diagnostics
    assert (d.code, d.pos.line, d.pos.column) == (code, _line_of(text, step), col)
    assert d.valid

def test_a_pipeline_without_return():
    with pytest.raises(UcutSyntaxError) as e:
        parse(_pipeline(GOOD[:3]), "p.ucut")
    assert [d.code for d in e.value.diagnostics] == ["bad-return"]

def test_cli_check_shows_steps_and_tune_plans_a_pipeline(capsys):
    path, pid = CPU_PIPELINES[2]
    assert main(["check", str(path), "--problem", pid, "--problems", str(SHARED_SOL_EXECBENCH)]) == 0
    out = capsys.readouterr().out
    assert "torch step torch.nn.functional.rms_norm" in out and "kernel kv_proj" in out and "view .transpose()" in out
    assert main(["check", str(path), "--problem", pid, "--problems", str(SHARED_SOL_EXECBENCH), "--json"]) == 0
    import json

    (report,) = json.loads(capsys.readouterr().out)["pipelines"]
    kinds = [[r["kind"] for r in step["runs"]] for step in report["steps"]]
    # step 2: rms_norm, the multiplication by norm_weight (tensor arithmetic is a torch step), .to()
    assert kinds == [["torch"], ["torch", "torch", "torch"], ["kernel"], ["kernel"], ["view", "view"], ["view", "view"]]
    assert report["steps"][2]["runs"][0]["config"].startswith("kv_proj_sm90_f16")
    tune = ["tune", pid, "--spec", str(path), "--problems", str(SHARED_SOL_EXECBENCH)]
    assert main([*tune, "--dry-run"]) == 0  # tuned per kernel (tests/test_pipeline_tune.py); this one is concrete
    assert "kernel kv_proj (steps 3, 4)" in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert main(tune) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err

def test_cli_check_reports_a_pipelines_binding_errors_without_a_traceback(tmp_path, capsys):
    """A pipeline that does not bind: `check --problem` answers its positioned errors (text and --json), exit 1
    (it crashed deciding `auto` settings for kernels that had no extents: found by a new user)."""
    import json

    path, pid = GPU_PIPELINES[0]
    bad = tmp_path / "bad.ucut"
    bad.write_text(path.read_text().replace("return output", "return outputt"))
    common = ["check", str(bad), "--problem", pid, "--problems", str(SHARED_SOL_EXECBENCH)]
    assert main(common) == 1
    out = capsys.readouterr()
    assert "did you mean 'output'" in out.out + out.err and "Traceback" not in out.out + out.err
    assert main([*common, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and [d["code"] for d in report["diagnostics"]] == ["undefined-name"]

# --- on the GPU: emulated (large workloads) and compiled ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("path, pid", GPU_PIPELINES, ids=[p.stem for p, _ in GPU_PIPELINES])
def test_large_pipelines_pass_emulated_on_the_gpu(path, pid):
    if (path, pid) in KNOWN_DIFFERENT:
        pytest.xfail("the reference rounds Q·Kᵀ to bf16 before the softmax; the FMHA does not (KNOWN_DIFFERENT)")
    r = _grade(path.read_text(), str(path), pid, device="cuda")
    assert r.status is Status.PASSED, r.log

@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("path, pid", ALL, ids=[p.stem for p, _ in ALL])
def test_compiled_pipelines_pass_the_grader(path, pid, capsys):
    """`ucutlass grade FILE PROBLEM` on the GPU: the bound kernels compiled, the pipeline graded as one solution."""
    _problem(pid)
    code = main(["grade", str(path), pid, "--problems", str(SHARED_SOL_EXECBENCH), "--workloads", "3",
                 "--timeout", "600"])
    out = capsys.readouterr()
    if code != 0 and (path, pid) in KNOWN_DIFFERENT:
        pytest.xfail(f"KNOWN_DIFFERENT (bf16 scores in the reference):\n{out.out[-2000:]}")
    assert code == 0, out.out + out.err

def test_cuda_graphs_leave_cpu_calls_eager():
    """runtime.graphs.CudaGraphed passes CPU tensors straight to the pipeline and forwards its attributes."""
    from ucutlass.runtime.graphs import CudaGraphed

    problem = _problem(CPU_PIPELINES[0][1])
    fn = CudaGraphed(emulate_pipeline(parse_file(CPU_PIPELINES[0][0]), problem))
    w = _smallest(problem)
    inputs = problem.make_inputs(w, seed=2)
    outs = [torch.empty(s, dtype=torch.bfloat16) for s in problem.output_shapes(w).values()]
    for _ in range(3):
        fn(*inputs.values(), *outs)
    assert fn.replays == 0 and not fn.graphs and len(fn.buffers) == 3 and fn.pipeline is not None
    steps = []
    fn.on_step = lambda i, phase: steps.append((i, phase))  # a step report's hook reaches the eager pipeline
    fn(*inputs.values(), *outs)
    fn.on_step = None
    assert fn.fn.on_step is None and steps[:2] == [(0, "start"), (0, "end")]

@pytest.mark.gpu
@pytest.mark.nvcc
def test_a_compiled_pipeline_replays_as_a_cuda_graph(kernel_cache, monkeypatch):
    """From its second call with the same tensors a compiled pipeline is one CUDA graph replay: the same bits as
    the eager call; other tensors are captured once more; UCUTLASS_CUDA_GRAPHS=0 keeps every call eager."""
    import ucutlass.runtime as runtime
    from ucutlass.build import build_kernels
    from ucutlass.solution import pipeline_solution

    path, pid = CPU_PIPELINES[0]
    problem, program = _problem(pid), parse_file(path)
    kernels = {kc.bound_kernel.build_digest(): kc.bound_kernel for kc in bind_pipeline(program, problem).kernel_calls()}
    built = build_kernels(list(kernels.values()), root=kernel_cache, timeout_s=900)
    assert all(r.ok for r in built), [r.error for r in built]
    sol = pipeline_solution({d: str(r.so_path) for d, r in zip(kernels, built)}, program.source, str(path), "p")
    fn = runtime.load_solution(sol.payload, problem)
    w = max(problem.workloads, key=lambda w: problem.resolve_axes(w).get("seq_len", 0))
    sets = [problem.make_inputs(w, device="cuda", seed=s) for s in (1, 2)]
    outs = [[torch.full(s, float("nan"), dtype=torch.bfloat16, device="cuda")
             for s in problem.output_shapes(w).values()] for _ in sets]
    fn.fn(*sets[0].values(), *outs[0])  # eager, straight through the pipeline
    want = [o.clone() for o in outs[0]]
    for i in range(3):
        for o in outs[0]:
            o.fill_(float("nan"))
        fn(*sets[0].values(), *outs[0])
        assert all(torch.equal(a, b) for a, b in zip(outs[0], want)), f"call {i}"
    assert fn.replays == 2 and len(fn.graphs) == 1 and not fn.eager_reason
    for _ in range(3):
        fn(*sets[1].values(), *outs[1])
    assert fn.replays == 4 and len(fn.graphs) == 2
    monkeypatch.setenv("UCUTLASS_CUDA_GRAPHS", "0")
    fn(*sets[0].values(), *outs[0])
    assert fn.replays == 4

def test_a_kernel_called_in_return_binds_and_runs():
    """`return proj(...).view(...)`: the call is bound like a step's (check accepted it; binding raised a bare
    KeyError before) and computes what the same call in a step computes."""
    from ucutlass.lang import parse

    path, pid = CPU_PIPELINES[0]
    text = path.read_text()
    inline = text.replace("  v = proj(hidden_states, v_weight, v_bias)\n", "").replace(
        "         v.view(batch_size, seq_len, num_key_value_heads, head_dim)",
        "         proj(hidden_states, v_weight, v_bias).view(batch_size, seq_len, num_key_value_heads, head_dim)")
    assert inline.count("proj(hidden_states") == 3 and "  v = proj" not in inline
    problem = _problem(pid)
    program = parse(inline, "inline.ucut")
    assert len(bind_pipeline(program, problem).kernel_calls()) == 3
    w = _smallest(problem)
    inputs = problem.make_inputs(w, seed=3)
    got, want = ([torch.empty(s, dtype=torch.bfloat16) for s in problem.output_shapes(w).values()] for _ in "ab")
    emulate_pipeline(program, problem)(*inputs.values(), *got)
    emulate_pipeline(parse_file(path), problem)(*inputs.values(), *want)
    assert all(torch.equal(a, b) for a, b in zip(got, want))

def test_check_lists_every_pipeline_example_without_a_problem(capsys):
    """`check FILE` with no --problem lists the steps unbound (a new user's trial found a traceback there)."""
    for path in sorted(EX.glob("pipeline_*.ucut")):
        assert main(["check", str(path)]) == 0, path
        assert "1. " in capsys.readouterr().out, path
