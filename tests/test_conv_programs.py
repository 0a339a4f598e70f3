"""Convolution programs (issue 21, item 4): examples/pipeline_conv_*.ucut for the SOL-ExecBench problems L2_055
(two conv1d + GELU, then an encoder layer), L2_015 (three strided conv2d + GELU, then a linear) and L2_078 (GroupNorm,
SiLU and three conv2d of a ResBlock, then a final conv).

Each binds to its problem on every workload (shapes flow through the conv kernels, whose output spatial extents come
from stride, padding and dilation; every bound kernel passes its target's rules on every workload's extents) and
passes the real grader emulated on the CPU on its smallest workload with its sizes made small: the problem copied to
a temporary folder, its const axes changed and, where the reference writes a size as a constant (``d_model = 5120``
in ``run``, ``hidden_size = 4096`` in ``get_inputs``), that one line changed to match; the reference is otherwise the
problem's own. At full size the references alone take minutes on a CI CPU (bf16 conv on the CPU: L2_078's smallest
workload 50 s a call). On the GPU the programs are compiled and graded at full size.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_data import SHARED_SOL_EXECBENCH
from test_pipeline_programs import EX, FAST, _problem, _smallest

from ucutlass import arch
from ucutlass.bind import bind_pipeline
from ucutlass.cli import main
from ucutlass.grader import Grader, Status
from ucutlass.ir import ConvKernel
from ucutlass.lang import parse_file
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

#: (example, problem, const axes made small, {constant line in the reference: as changed}).
PROGRAMS = [
    (EX / "pipeline_conv_audio_encoder.ucut", "L2_055_audio_encoder_conv_positional_layer_stack",
     {"input_seq_len": 24, "output_seq_len": 12, "num_mel_bins": 16, "d_model": 256, "num_heads": 1,
      "encoder_ffn_dim": 512},  # head_dim stays 256: the program scales q by 256 ** -0.5
     {"d_model = 5120": "d_model = 256", "num_heads = 20": "num_heads = 1"}),
    (EX / "pipeline_conv_audio_downsample.ucut", "L2_015_audio_sinusoidal_position_embedding_with_conv_projection",
     {"d_model": 64, "downsample_hidden_size": 32, "conv_out_dim": 320},
     {"d_model = 1024": "d_model = 64", "downsample_hidden_size = 384": "downsample_hidden_size = 32",
      "conv_out_dim = 3840": "conv_out_dim = 320"}),
    (EX / "pipeline_conv_resblock_final.ucut", "L2_078_fused_final_layer_upsample_with_adaptive_norm",
     {"hidden_size": 128, "emb_channels": 128, "hidden_channels": 96},
     {"hidden_size = 4096": "hidden_size = 128", "emb_channels = 4096": "emb_channels = 128",
      "hidden_channels = 3072": "hidden_channels = 96"}),
]


def _shrunk(problem, consts: dict, constants: dict, folder: Path):
    """A copy of ``problem`` in ``folder`` with ``consts`` given to its const axes, each ``constants`` line of its
    reference replaced (each must occur exactly once) and only its smallest workload."""
    definition = json.loads((problem.path / "definition.json").read_text())
    for axis, value in consts.items():
        assert definition["axes"][axis]["type"] == "const", axis
        definition["axes"][axis]["value"] = value
    for old, new in constants.items():
        assert definition["reference"].count(old) == 1, old
        definition["reference"] = definition["reference"].replace(old, new)
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = (problem.path / "workload.jsonl").read_text().splitlines()
    (folder / "workload.jsonl").write_text(lines[_smallest(problem).index] + "\n")
    return find_problem(str(folder))


def test_every_conv_example_is_tested():
    assert sorted(EX.glob("pipeline_conv_*.ucut")) == sorted(p for p, *_ in PROGRAMS)


@pytest.mark.parametrize("path, pid", [p[:2] for p in PROGRAMS], ids=[p[0].stem for p in PROGRAMS])
def test_conv_programs_bind_on_every_workload(path, pid):
    problem = _problem(pid)
    program = parse_file(path)
    binding = bind_pipeline(program, problem)
    calls = binding.kernel_calls()
    assert any(isinstance(kc.kernel, ConvKernel) for kc in calls)
    assert calls and all(kc.bound_kernel is not None and len(kc.shapes) == len(problem.workloads) for kc in calls)
    for kc in calls:  # each bound kernel passes its target's rules on the extents of every workload (as check does)
        for w in kc.binding.problem.workloads:
            errors = [d.format() for d in arch.check(kc.bound_kernel, kc.binding.extents(w)) if d.severity == "error"]
            assert not errors, (kc.call.target, w.label(), errors)
    lines = binding.describe(width=10_000)  # one line per step
    assert len(lines) == len(program.pipeline().steps) + 1 and any("(conv: " in line for line in lines)


@pytest.mark.parametrize("path, pid, consts, constants", PROGRAMS, ids=[p[0].stem for p in PROGRAMS])
def test_conv_programs_pass_emulated_on_the_cpu_with_small_extents(path, pid, consts, constants, tmp_path):
    small = _shrunk(_problem(pid), consts, constants, tmp_path / pid)
    sol = emulated_solution(path.read_text(), str(path), None, path.stem, pipeline=None)
    with Grader(small, device="cpu", **FAST) as g:
        (r,) = g.grade(sol, list(small.workloads))
    assert r.status is Status.PASSED, r.log


def test_a_wrong_conv_program_fails_the_grader(tmp_path):
    """L2_015 with the conv output flattened as [time, freq, channels] (the reference's is [time, channels, freq]):
    the shape is right, the values are not."""
    path, pid, consts, constants = PROGRAMS[1]
    wrong = path.read_text().replace("x.permute(0, 2, 3, 1).reshape(", "x.permute(0, 2, 1, 3).reshape(")
    assert wrong != path.read_text()
    small = _shrunk(_problem(pid), consts, constants, tmp_path / pid)
    with Grader(small, device="cpu", **FAST) as g:
        (r,) = g.grade(emulated_solution(wrong, str(path), None, path.stem, pipeline=None), list(small.workloads))
    assert r.status is Status.INCORRECT_NUMERICAL, r.log


@pytest.mark.gpu
@pytest.mark.parametrize("path, pid", [p[:2] for p in PROGRAMS], ids=[p[0].stem for p in PROGRAMS])
def test_conv_programs_pass_emulated_on_the_gpu(path, pid):
    """At full size, emulated (the kernels as torch ops) on the GPU: the program's meaning, without nvcc."""
    problem = _problem(pid)
    sol = emulated_solution(path.read_text(), str(path), None, path.stem, pipeline=None)
    with Grader(problem, device="cuda", **FAST) as g:
        (r,) = g.grade(sol, [_smallest(problem)])
    assert r.status is Status.PASSED, r.log


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.parametrize("path, pid", [p[:2] for p in PROGRAMS], ids=[p[0].stem for p in PROGRAMS])
def test_compiled_conv_programs_pass_the_grader(path, pid, capsys):
    """`ucutlass grade FILE PROBLEM --workloads 3` on the GPU: conv and GEMM kernels compiled, graded as one
    solution at full size."""
    _problem(pid)
    code = main(["grade", str(path), pid, "--problems", str(SHARED_SOL_EXECBENCH), "--workloads", "3",
                 "--timeout", "600"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err


def test_a_conv_call_gives_its_output_spatial_extents():
    """In a pipeline a conv kernel's d takes Q from W, S, stride, padding and dilation (bind.kernel_output_shapes)."""
    from ucutlass.bind import kernel_output_shapes, kernel_ports
    from ucutlass.lang import parse

    k = parse("kernel c : conv { a : bf16[N, H, W, C]  b : bf16[K, R, S, C]  d : bf16[N, P, Q, K]\n"
              "  stride = 2x1  padding = 1x0  dilation = 1x2 }").kernel()
    ins, outs = kernel_ports(k)
    shapes = {"a": (2, 80, 37, 16), "b": (24, 3, 3, 16)}
    assert kernel_output_shapes(ins, outs, shapes, k) == {"d": (2, 40, 33, 24)}  # (80+2-3)//2+1, (37-4-1)//1+1
    with pytest.raises(ValueError, match="no argument gives P"):
        kernel_output_shapes(ins, outs, shapes)  # without the kernel: a gemm's rule, nothing gives P


def test_the_reference_may_return_a_strided_output():
    """The grader copies a permuted tensor returned by the problem's reference (L2_055 returns one); a candidate's
    must be contiguous."""
    import torch

    from grader.worker import _Failure, write_returned

    result = torch.arange(6.0).view(2, 3).t()
    buf = torch.empty(3, 2)
    with pytest.raises(_Failure, match="not contiguous"):
        write_returned(result, [buf], ["out"])
    write_returned(result, [buf], ["out"], strided=True)
    assert torch.equal(buf, result)


def test_check_reports_a_conv_pipeline_that_does_not_flow(capsys, tmp_path):
    """`check --problem` prints the step's positioned error and exits 1 (it crashed before: alignment decided for
    kernels whose pipeline had no extents)."""
    path, pid = PROGRAMS[1][:2]
    bad = tmp_path / path.name
    bad.write_text(path.read_text().replace("time_after_conv, conv_out_dim)", "time_after_conv, d_model)"))
    assert main(["check", str(bad), "--problem", pid, "--problems", str(SHARED_SOL_EXECBENCH)]) == 1
    out = capsys.readouterr()
    assert ".reshape() refuses its arguments" in out.out + out.err and f"{bad}:22:10: error" in out.out + out.err
