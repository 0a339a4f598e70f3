"""fp32-accurate GEMMs (issue 20, item 2): ``math = tf32 | 3xtf32`` on gemm kernels with f32 a and b.

``3xtf32`` builds a CUTLASS 2.x SM80 ``OpMultiplyAddFastF32`` GEMM (templates/sm80_gemm_3xtf32.cu.j2) behind the
usual C ABI; its rules (ucutlass/arch/sm90_3xtf32.py) refuse what it cannot build before nvcc; emulation rounds f32
operands to TF32 under ``tf32`` and keeps them under ``3xtf32``. The three fp32 examples pass the grader emulated
on the CPU on their smallest workload, and one of them fails it with ``math = tf32`` (the reason for the setting).
"""

from __future__ import annotations

import ctypes
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass import arch
from ucutlass.arch import sm90_3xtf32
from ucutlass.cli import main
from ucutlass.codegen import render
from ucutlass.emulate import GemmEmulator
from ucutlass.emulate.gemm import tf32_rounded
from ucutlass.errors import UcutSyntaxError
from ucutlass.grader import Grader, Status
from ucutlass.ir import Math, precision
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

EX = REPO / "examples"
#: (example, problem, const axes made small for the CPU: {} = as published). Graded emulated on the CPU on the smallest
#: workload. As published, they pass too, but L2_030's took 146 s and L1_037's (two GEMMs of K 3072 and 12288) 445 s
#: on a loaded 2-core machine, so the CPU test shrinks their hidden sizes (the same reference and program);
#: scripts/device_fp32.sh grades every workload as published on the GPU.
EXAMPLES = [
    (EX / "pipeline_fp32_qkv_norm.ucut", "L1_054_audio_attention_qkv_projection_with_normalization", {}),
    (EX / "pipeline_fp32_concat_split.ucut", "L2_030_flux_concatenated_sequence_processing_with_split",
     {"hidden_dim": 256}),
    (EX / "pipeline_fp32_flux_ffn.ucut", "L1_037_flux_feedforward_gelu_approximate",
     {"hidden_dim": 128, "mlp_hidden_dim": 512}),
    # the same with SM90 TF32 GEMMs over 3K on split operands (the split as torch steps); as published it PASSED
    # emulated on the smallest workload in 344 s on a loaded 2-core machine (2026-12-05)
    (EX / "pipeline_fp32_flux_ffn_split.ucut", "L1_037_flux_feedforward_gelu_approximate",
     {"hidden_dim": 128, "mlp_hidden_dim": 512}),
]
FAST = dict(warmup_ms=1.0, rep=3.0, timeout_s=300.0)


def gemm(settings: str = "math = 3xtf32   tile = 128x128x16", epilogue: str = "", a: str = "f32", d: str = "f32",
         extra: str = ""):
    text = (f"kernel k : gemm {{\n  a : {a}[M, K] row   b : {a}[N, K] row   d : {d}[M, N] row\n{extra}"
            f"  {settings}\n  {epilogue}\n}}\n")
    return parse(text).kernel()


def codes(kernel, extents=None) -> list[str]:
    return [d.code for d in arch.check_kernel(kernel, extents)]


# --- the setting ---------------------------------------------------------------------------------------------


def test_math_setting_lowers_and_names_the_kernel():
    k = gemm()
    assert k.math is Math.x3tf32
    assert k.config_name().endswith("_3xtf32")
    assert precision(k) == "f32 via 3xtf32"
    plain, written = gemm("tile = 128x128x16"), gemm("math = tf32   tile = 128x128x16")
    assert plain.math is Math.tf32 and precision(plain) == "f32 via tf32"
    # tf32 is the default and is left out of digests: every kernel written before the setting keeps its build
    assert plain.digest() == written.digest() and plain.config_name() == written.config_name()
    assert '"math"' not in json.dumps(json.loads(__import__("ucutlass").ir.canonical_json(plain)))
    assert plain.digest() != k.digest()
    assert precision(gemm("tile = 128x128x64", a="bf16", d="bf16")) == "bf16"


def test_a_bad_math_value_lists_the_valid_ones():
    with pytest.raises(UcutSyntaxError) as e:
        gemm("math = 2xtf32")
    (diag,) = e.value.diagnostics
    assert diag.code == "bad-value" and set(diag.valid) == {"tf32", "3xtf32"}


def test_math_as_a_choice_keeps_what_each_option_can_build():
    k = gemm("math = {tf32, 3xtf32}   tile = {128x128x16, 128x128x32}")
    legal = [c["math"] for c in arch.legal_combinations(k)[0]]
    # tf32 (sm90 wgmma) needs tile K x 4 bytes in 64, 128, 256: K 16, 32 both; 3xtf32 takes K 16 and 32 too
    assert sorted(legal, key=lambda m: m.value) == [Math.x3tf32, Math.x3tf32, Math.tf32, Math.tf32]
    k = gemm("math = {tf32, 3xtf32}   tile = 128x128x16   cluster = 2x1x1")
    assert [c["math"] for c in arch.legal_combinations(k)[0]] == [Math.tf32]


def test_resolving_a_math_choice_writes_text_that_parses_to_the_same_kernel():
    program = parse("kernel k : gemm {\n  a : f32[M, K] row   b : f32[N, K] row   d : f32[M, N] row\n"
                    "  math = {tf32, 3xtf32}   tile = 128x128x16\n}\n")
    resolved = program.resolve({"k.math": Math.x3tf32})
    assert "math = 3xtf32" in resolved.source
    assert parse(resolved.source).kernels == resolved.kernels


# --- rules ---------------------------------------------------------------------------------------------------


def test_a_valid_3xtf32_kernel_breaks_no_rule():
    k = gemm(epilogue="epilogue { bias : f32[N]   d = gelu_tanh(acc + bias) }")
    assert codes(k, {"M": 131, "N": 12288, "K": 3072}) == []
    assert arch.rules_for(k) is sm90_3xtf32
    assert arch.resolve_swap_ab(k, m_max=16) is False  # the SM80 kernel has no swapped form


@pytest.mark.parametrize("settings, a, code", [
    ("math = 3xtf32   tile = 128x128x16", "bf16", "sm90.3xtf32-dtype"),
    ("math = 3xtf32   tile = 128x128x64", "f32", "sm90.3xtf32-tile"),
    ("math = 3xtf32   tile = 256x256x16", "f32", "sm90.3xtf32-tile"),
    ("math = 3xtf32   tile = 128x128x16   stages = 2", "f32", "sm90.3xtf32-stages"),
    ("math = 3xtf32   tile = 256x128x32   stages = 6", "f32", "sm90.3xtf32-stages"),
    ("math = 3xtf32   tile = 128x128x16   cluster = 2x1x1", "f32", "sm90.3xtf32-settings"),
    ("math = 3xtf32   tile = 128x128x16   schedule = pingpong", "f32", "sm90.3xtf32-settings"),
    ("math = 3xtf32   tile = 128x128x16   scheduler = stream_k", "f32", "sm90.3xtf32-settings"),
    ("math = 3xtf32   tile = 128x128x16   swap_ab = true", "f32", "sm90.3xtf32-settings"),
    ("math = 3xtf32   tile = 128x128x16   target = sm100", "f32", "sm90.3xtf32-settings"),
])
def test_what_the_3xtf32_kernel_cannot_build_is_refused_before_nvcc(settings, a, code):
    found = codes(gemm(settings, a=a, d="f32"))
    assert code in found, found


@pytest.mark.parametrize("epilogue, why", [
    ("epilogue { s : f32[M]   d = acc * s }", "[M] vector"),
    ("epilogue { bias : bf16[N]   d = acc + bias }", "is bf16 but d is f32"),
    ("epilogue { beta : f32 <- beta   d = acc * beta }", "read from the problem"),
    ("epilogue { bias : f32[N]   d = gelu(acc) + bias }", "act(alpha*acc + beta*x)"),
    ("epilogue { bias : f32[N]   pre : f32[M, N] row -> p   pre = acc + bias   d = relu(pre) }", "extra epilogue"),
    ("epilogue { bias : f32[N]   d = acc * acc + bias }", "not alpha*acc"),
])
def test_epilogues_beyond_a_linear_combination_and_one_activation_are_refused(epilogue, why):
    diags = arch.check_kernel(gemm(epilogue=epilogue))
    assert [d.code for d in diags] == ["sm90.3xtf32-epilogue"]
    assert why in diags[0].message


def test_the_epilogue_forms_the_2x_epilogue_computes():
    form = sm90_3xtf32.lincomb(gemm(epilogue="epilogue { bias : f32[N]   d = gelu_tanh(acc + bias) }"))
    assert form == sm90_3xtf32.LinComb("gelu_tanh", 1.0, 1.0, "bias", True)
    form = sm90_3xtf32.lincomb(gemm(extra="  c : f32[M, N] row\n", epilogue="epilogue { d = silu(0.5 * acc + 2 * c) }"))
    assert form == sm90_3xtf32.LinComb("silu", 0.5, 2.0, "c", False)
    assert sm90_3xtf32.lincomb(gemm()) == sm90_3xtf32.LinComb(None, 1.0, 0.0, None, False)


def test_3xtf32_on_a_grouped_gemm_is_refused():
    k = parse("kernel g : grouped_gemm {\n  a : f32[M, K] row   b : f32[G, N, K] row   d : f32[M, N] row   "
              "m_sizes : i32[G]\n  math = 3xtf32   tile = 128x128x16\n}\n").kernel()
    assert "sm90.3xtf32-family" in codes(k)


# --- rendering -----------------------------------------------------------------------------------------------


def test_render_is_the_sm80_3xtf32_gemm_behind_the_usual_abi():
    k = parse_file(EX / "pipeline_fp32_flux_ffn.ucut").kernel("fc1")
    cu = render(k)
    assert "thread::GELU_taylor" not in cu and "tanh.approx" in cu  # named only in the comment: not used
    for line in ("cutlass::arch::OpMultiplyAddFastF32", "cutlass::arch::Sm80",
                 "cutlass::gemm::GemmShape<128, 128, 16>;", "cutlass::gemm::GemmShape<64, 64, 16>;",
                 "::tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))",  # f32, not tanh.approx
                 "constexpr int Stages = 4;",
                 "ptrs[0], ptrs[1], ptrs[3], ptrs[2],",  # A, B, C = the bias, D
                 "int64_t(K), int64_t(K), int64_t(0), int64_t(N));",  # lda, ldb, ldc = 0: the bias broadcast
                 "int ucut_run(", "int ucut_can_implement(", "size_t ucut_workspace_size("):
        assert line in cu, line
    info = json.loads(cu.split('R"UCUTINFO(')[1].split(')UCUTINFO"')[0])
    assert info["math"] == "3xtf32" and info["ptrs"] == ["a", "b", "d", "bias"]
    assert info["digest"] == arch.canonical(k).build_digest()
    plain = render(parse_file(EX / "pipeline_fp32_qkv_norm.ucut").kernel())
    assert "LinearCombination<ElementD, AlignC" in plain and "nullptr, ptrs[2]," in plain


# --- emulation -----------------------------------------------------------------------------------------------


def test_tf32_rounding_keeps_ten_mantissa_bits_to_nearest_even():
    x = torch.tensor([1.0, 1 + 2 ** -11, 1 + 3 * 2 ** -11, -1 - 2 ** -11 - 2 ** -20, float("inf"), float("nan")])
    got = tf32_rounded(x)
    assert got[:4].tolist() == [1.0, 1.0, 1 + 2 ** -9, -1 - 2 ** -10]
    assert math.isinf(got[4]) and math.isnan(got[5])


def test_emulation_rounds_operands_under_tf32_and_not_under_3xtf32():
    torch.manual_seed(0)
    a, b = torch.randn(64, 256), torch.randn(32, 256)
    exact = (a.double() @ b.double().T)
    errors = {}
    for setting in ("math = tf32   tile = 128x128x16", "math = 3xtf32   tile = 128x128x16"):
        d = torch.empty(64, 32)
        GemmEmulator(gemm(setting)).call([a, b, d])
        errors[setting.split()[2]] = (d.double() - exact).abs().max().item()
    assert errors["3xtf32"] < 1e-4 < errors["tf32"]  # f32 accumulation of 256 products vs. 10-bit operands


# --- the examples, graded ------------------------------------------------------------------------------------


def _smallest(problem):
    def size(w):
        axes = problem.resolve_axes(w)
        return sum(math.prod(problem.shape(s, axes) or ()) for s in (*problem.inputs.values(),
                                                                     *problem.outputs.values()))
    return min(problem.workloads, key=size)


def _problem(pid: str, consts: dict, tmp_path: Path):
    """The problem ``pid`` with only its smallest workload, its const axes ``consts`` made small (a copy)."""
    try:
        problem = find_problem(pid, [SHARED_SOL_EXECBENCH])
    except Exception as e:  # noqa: BLE001  (a shared problem missing beside this clone)
        pytest.skip(f"problem {pid} not found: {e}")
    folder = tmp_path / pid
    folder.mkdir()
    definition = json.loads((problem.path / "definition.json").read_text())
    for axis, value in consts.items():
        assert definition["axes"][axis]["type"] == "const"
        definition["axes"][axis]["value"] = value
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = (problem.path / "workload.jsonl").read_text().splitlines()
    (folder / "workload.jsonl").write_text(lines[_smallest(problem).index] + "\n")
    return find_problem(str(folder))


def _grade(source: str, file: Path, problem):
    sol = emulated_solution(source, str(file), None, file.stem, pipeline=None)
    with Grader(problem, device="cpu", **FAST) as g:
        (r,) = g.grade(sol, list(problem.workloads))
    return r


@pytest.mark.parametrize("path, pid, consts", EXAMPLES, ids=[p.stem for p, _, _ in EXAMPLES])
def test_fp32_examples_pass_emulated_on_their_smallest_workload(path, pid, consts, tmp_path):
    r = _grade(path.read_text(), path, _problem(pid, consts, tmp_path))
    assert r.status is Status.PASSED, r.log


def test_the_same_pipeline_with_tf32_fails_the_tolerance(tmp_path):
    """Why the setting exists: L1_054 with TF32-rounded operands (K = 1024) misses its 2e-3 tolerance."""
    path, pid, consts = EXAMPLES[0]
    r = _grade(path.read_text().replace("math = 3xtf32", "math = tf32"), path, _problem(pid, consts, tmp_path))
    assert r.status in (Status.INCORRECT_NUMERICAL, Status.INCORRECT_ACCURACY), r.log


def test_grade_names_the_precision(capsys, tmp_path):
    path, pid, consts = EXAMPLES[1]
    rc = main(["grade", str(path), str(_problem(pid, consts, tmp_path).path), "--emulate"])
    out = capsys.readouterr().out
    assert "precision: proj f32 via 3xtf32" in out and rc == 0


# --- one nvcc compile ----------------------------------------------------------------------------------------


@pytest.mark.nvcc
def test_the_3xtf32_template_compiles_with_nvcc(tmp_path):
    from ucutlass.build import build_kernels
    from ucutlass.runtime import CompiledKernel

    k = parse_file(EX / "pipeline_fp32_flux_ffn.ucut").kernel("fc1")
    (result,) = build_kernels([k], root=tmp_path, timeout_s=900)
    assert result.ok, result.log[-3000:]
    lib = ctypes.CDLL(str(result.so_path))
    for symbol in ("ucut_run", "ucut_workspace_size", "ucut_can_implement", "ucut_info", "ucut_last_error"):
        assert hasattr(lib, symbol)
    loaded = CompiledKernel(result.so_path, k)  # checks the ABI version, family, pointers and digest
    assert loaded.info["math"] == "3xtf32"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_the_default_tile_is_refused_at_the_math_line_with_a_tile_to_write():
    """`math = 3xtf32` alone: the default tile (K 64) cannot build; the error is at `math`, names the default and
    a tile to write (a new user met it pointing at the kernel's name)."""
    text = ("kernel proj : gemm {\n  a : f32[M, K] row   b : f32[N, K] row   d : f32[M, N] row\n"
            "  math = 3xtf32\n}\n")
    (d,) = [d for d in arch.check(parse(text, "m.ucut").kernel()) if d.code == "sm90.3xtf32-tile"]
    assert (d.pos.line, d.pos.column) == (3, 10) and "the default tile 128x128x64" in d.message
    assert "add tile = 128x128x32" in d.message and "128x128x32" in d.valid
