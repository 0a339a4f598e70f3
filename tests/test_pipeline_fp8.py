"""FP8 pipelines (issue 16, item 6): SOL-ExecBench's Quant_001 (FP8 attention output projection) and Quant_017 (FP8
DeepSeek-V3 shared-expert MLP) as `.ucut` pipelines: quantisation to e4m3 with 1x128 / 128x128 block scales as
torch steps (``.to(torch.float8_e4m3fn)`` is spellable), the GEMMs as sm90 blockwise-scaled FP8 kernels (bias and
SwiGLU in their epilogues).

On the CPU: the programs bind on every workload; run emulated on the problems with their const axes made small
(the same reference, the same program), they give the reference's output bit for bit (the quantisation steps are the
reference's own ops, and the emulated blockwise GEMM dequantises per block and multiplies in f32, as the reference's
CuBLASRefBlockwiseGemm does); the grader passes them and fails a program that drops the bias. The full-size emulated
grades (``ucutlass grade FILE PROBLEM --emulate --workloads 1``) are marked slow. On the GPU (compiled) they are in
tests/test_pipeline_programs.py's GPU_PIPELINES.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass import arch
from ucutlass.bind import bind_pipeline
from ucutlass.cli import main
from ucutlass.emulate import emulate_pipeline
from ucutlass.errors import UcutSyntaxError
from ucutlass.grader import Grader, Status
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

FAST = dict(warmup_ms=1.0, rep=3.0, timeout_s=300.0)
EX = REPO / "examples"
O_PROJ = (EX / "pipeline_fp8_o_proj.ucut", "Quant_001_fp8_attention_output_projection")
SHARED_EXPERT = (EX / "pipeline_fp8_shared_expert.ucut", "Quant_017_fp8_shared_expert_mlp")
#: The const axes made small for the CPU (multiples of the 128-wide scale blocks; two blocks each way).
SMALL = {O_PROJ[1]: {"hidden_size": 256, "num_attention_heads": 2},
         SHARED_EXPERT[1]: {"hidden_size": 256, "intermediate_size": 256}}


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


def _shrunk(pid: str, folder: Path):
    """A copy of problem ``pid`` with its const axes made small (:data:`SMALL`), on its smallest workload."""
    problem = _problem(pid)
    folder = folder / pid
    folder.mkdir()
    definition = json.loads((problem.path / "definition.json").read_text())
    for axis, value in SMALL[pid].items():
        assert definition["axes"][axis]["type"] == "const"
        definition["axes"][axis]["value"] = value
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = (problem.path / "workload.jsonl").read_text().splitlines()
    (folder / "workload.jsonl").write_text(lines[_smallest(problem).index] + "\n")
    return find_problem(str(folder))


def _grade(source: str, path: Path, problem):
    sol = emulated_solution(source, str(path), None, path.stem, pipeline=None)
    with Grader(problem, device="cpu", **FAST) as g:
        (r,) = g.grade(sol, list(problem.workloads))
    return r


def test_fp8_dtypes_are_spellable_in_a_pipeline():
    program = parse("kernel k : gemm { a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row }\n"
                    "pipeline p {\n  q = x.to(torch.float8_e4m3fn)\n  r = q.to(torch.float8_e5m2)\n  return r\n}\n")
    steps = program.pipeline().steps
    assert [s.value.args[1].name for s in steps] == ["torch.float8_e4m3fn", "torch.float8_e5m2"]
    with pytest.raises(UcutSyntaxError) as e:
        parse("kernel k : gemm { a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row }\n"
              "pipeline p {\n  q = x.to(torch.float8_e4m3)\n  return q\n}\n")
    assert "not-allowed" in str(e.value) or any(d.code == "not-allowed" for d in e.value.diagnostics)


@pytest.mark.parametrize("path, pid", [O_PROJ, SHARED_EXPERT], ids=["Quant_001", "Quant_017"])
def test_fp8_pipelines_bind_on_every_workload(path, pid):
    problem = _problem(pid)
    binding = bind_pipeline(parse_file(path), problem)
    calls = binding.kernel_calls()
    assert calls and all(kc.bound_kernel.blockwise for kc in calls)
    for kc in calls:
        assert [p.name for p in kc.inputs][:4] == ["a", "b", "scale_a", "scale_b"]
        for w in kc.binding.problem.workloads:
            errors = [d.format() for d in arch.check(kc.bound_kernel, kc.binding.extents(w)) if d.severity == "error"]
            assert not errors, (kc.call.target, w.label(), errors)
        first = kc.shapes[0]
        assert first["a"][1] == first["b"][1] == "float8_e4m3fn" and first["scale_a"][1] == "float32"
    text = "\n".join(binding.describe())
    assert "torch step .to()" in text and "kernel " in text


@pytest.mark.parametrize("path, pid", [O_PROJ, SHARED_EXPERT], ids=["Quant_001", "Quant_017"])
def test_fp8_pipelines_give_the_reference_bit_for_bit(path, pid, tmp_path):
    """Small const axes: the emulated pipeline's output equals the reference's exactly (same scale formula, same
    clamp and e4m3 rounding, the GEMM dequantised per block and multiplied in f32)."""
    problem = _shrunk(pid, tmp_path)
    (w,) = problem.workloads
    inputs = problem.make_inputs(w, device="cpu", seed=0)
    want = problem.run_reference(inputs)["output"]
    fn = emulate_pipeline(parse_file(path), problem)
    out = torch.empty_like(want)
    fn(*inputs.values(), out)
    assert out.abs().max() > 0.1  # not a degenerate all-zero case
    assert torch.equal(out, want), (out - want).abs().max()


@pytest.mark.parametrize("path, pid", [O_PROJ, SHARED_EXPERT], ids=["Quant_001", "Quant_017"])
def test_fp8_pipelines_pass_the_grader_emulated_with_small_extents(path, pid, tmp_path):
    r = _grade(path.read_text(), path, _shrunk(pid, tmp_path))
    assert r.status is Status.PASSED, r.log


def test_a_wrong_fp8_pipeline_fails_the_grader(tmp_path):
    """Quant_001 without the bias in the epilogue is graded wrong."""
    path, pid = O_PROJ
    source = path.read_text().replace("d = acc + bias", "d = acc")
    assert source != path.read_text()
    r = _grade(source, path, _shrunk(pid, tmp_path))
    assert r.status is not Status.PASSED


def test_check_shows_the_quantisation_steps(capsys):
    path, pid = SHARED_EXPERT
    if not (SHARED_SOL_EXECBENCH / pid).is_dir():
        pytest.skip(f"problem {pid} not found")
    assert main(["check", str(path), "--problem", pid, "--problems", str(SHARED_SOL_EXECBENCH)]) == 0
    out = capsys.readouterr().out
    assert ".to(torch.float8_e4m3fn)" in out and "kernel down (gemm:" in out


@pytest.mark.slow
@pytest.mark.full_size
@pytest.mark.parametrize("path, pid", [O_PROJ, SHARED_EXPERT], ids=["Quant_001", "Quant_017"])
def test_full_size_fp8_pipelines_pass_emulated_on_the_cpu(path, pid, capsys):
    """`ucutlass grade FILE PROBLEM --emulate --workloads 1` (the first workload at full size: minutes on 2 cores)."""
    _problem(pid)
    code = main(["grade", str(path), pid, "--problems", str(SHARED_SOL_EXECBENCH), "--emulate", "--workloads", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "PASSED" in out, out
