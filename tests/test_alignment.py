"""The `alignment` setting: fallback below 16 bytes (cp.async mainloop, no-smem epilogue), its rules, its
rendering, `auto` lowered by the extents, and a real nvcc compile of a batched and a fallback kernel.

What CUTLASS 4.2 allows (headers of the nvidia-cutlass wheel): TMA needs 16-byte aligned strides
(``sm90_common.inl`` ``tma_alignment_bytes = 16``); the SM90 cp.async mainloops (``KernelCpAsyncWarpSpecialized*``)
take 4 bytes and more (``sm90_gmma_builder.inl`` "Minimum alignment required for cp.async is 4B"); C and D
below 16 bytes need the no-smem epilogue, which runs ``fusion::LinearCombination`` only (``sm90_builder.inl``).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from ucutlass import arch, lang
from ucutlass.arch._common import largest_alignment
from ucutlass.bind import resolve_alignment
from ucutlass.codegen import render, template_values
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.ir import linear_combination

KERNELS = Path(__file__).parent / "kernels"


def kernel_of(text: str):
    return lang.parse(text, "t.ucut").kernel()


def gemm(settings: str = "", epilogue: str = "", d: str = "bf16", ab: str = "bf16", c: str = "") -> str:
    return (f"kernel k : gemm {{\n  a : {ab}[M, K] row  b : {ab}[N, K] row  {c}  d : {d}[M, N] row\n"
            f"  {settings}\n  {epilogue}\n}}\n")


def codes(text: str, extents=None) -> list[str]:
    return [d.code for d in arch.check(kernel_of(text), extents)]


@pytest.mark.parametrize("value", ["3", "16", "0", "fast"])
def test_alignment_values(value):
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(gemm(f"alignment = {value}"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.code == "bad-value" and d.valid == ("auto", "8", "4", "2", "1") and (d.pos.line, d.pos.column) == (3, 15)


def test_alignment_is_elements_capped_at_16_bytes_per_operand():
    k = kernel_of(gemm("alignment = 8", d="f32"))
    assert (k.alignment_of(k.a.dtype), k.alignment_of(k.d.dtype)) == (8, 4)
    auto = kernel_of(gemm(d="f32"))
    assert auto.alignment is None and (auto.alignment_of(auto.a.dtype), auto.alignment_of(auto.d.dtype)) == (8, 4)
    values = template_values(kernel_of(gemm("alignment = 2", d="f32")))
    assert (values["align_a"], values["align_b"], values["align_c"], values["align_d"]) == (2, 2, 2, 2)
    assert "align2" in kernel_of(gemm("alignment = 2")).config_name()


def test_alignment_is_a_choice_the_tuner_can_search():
    k = kernel_of(gemm("alignment = {auto, 2}"))
    legal, rejected = arch.legal_combinations(k, {"M": 1000, "N": 1002, "K": 4096})
    assert legal == [{"alignment": 2}]  # N = 1002 bf16 elements is 2004 bytes: only 2 elements serve it
    assert [e.code for _, errs in rejected for e in errs] == ["sm90.align"]


def test_sixteen_bytes_renders_tma_as_before():
    values = template_values(kernel_of(gemm("schedule = pingpong tile = 64x128x64")))
    assert values["kernel_schedule"] == "cutlass::gemm::KernelTmaWarpSpecializedPingpong"
    assert values["epilogue_schedule"] == "cutlass::epilogue::TmaWarpSpecialized"
    assert not values["no_smem_epilogue"]


@pytest.mark.parametrize("schedule, tile, cpp", [
    ("cooperative", "128x128x64", "KernelCpAsyncWarpSpecializedCooperative"),
    ("pingpong", "64x128x64", "KernelCpAsyncWarpSpecializedPingpong"),
    ("warpspecialized", "128x128x64", "KernelCpAsyncWarpSpecialized"),
])
def test_below_16_bytes_a_and_b_load_with_cp_async(schedule, tile, cpp):
    # d is f32: 4 f32 elements are 16 bytes, so only the mainloop falls back and the EVT epilogue stays
    text = gemm(f"alignment = 4 schedule = {schedule} tile = {tile}", "epilogue { bias : f32[N]  d = acc + bias }",
                d="f32")
    assert codes(text) == []
    values = template_values(kernel_of(text))
    assert values["kernel_schedule"] == f"cutlass::gemm::{cpp}"
    assert not values["no_smem_epilogue"] and "Sm90RowBroadcast" in render(kernel_of(text))


def test_below_16_bytes_d_uses_the_no_smem_linear_combination():
    text = gemm("alignment = 2", "epilogue { alpha : f32 = 0.5  d = alpha * (3 * acc - c) }",
                c="c : bf16[M, N] row")
    src = render(kernel_of(text))
    assert "using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;" in src
    assert "using FusionCallbacks = fusion::LinearCombination<ElementD, ElementCompute, ElementC, ElementCompute, " \
           "RoundStyle>;" in src
    assert "args.epilogue.thread = {1.5f, -0.5f};" in src
    assert "EvtNode" not in src


@pytest.mark.parametrize("expr, expected", [
    ("acc", (1.0, 0.0)), ("acc * 0.125", (0.125, 0.0)), ("2 * acc + c", (2.0, 1.0)), ("acc - 0.5 * c", (1.0, -0.5)),
    ("(acc + c) * 2", (2.0, 2.0)), ("relu(acc)", None), ("acc * acc", None), ("acc + 1", None),
])
def test_linear_combination(expr, expected):
    k = kernel_of(gemm("", f"epilogue {{ d = {expr} }}", c="c : bf16[M, N] row" if "c" in expr.replace("acc", "")
                        else ""))
    assert linear_combination(k.epilogue) == expected


@pytest.mark.parametrize("settings, epilogue, d, ab, code", [
    ("alignment = 1", "", "f32", "bf16", "sm90.align-cp-async"),  # bf16 a, b: 2 bytes < 4
    ("alignment = 4 cluster = 2x1x1", "", "f32", "bf16", "sm90.align-cp-async"),  # no multicast with cp.async
    ("alignment = 4", "epilogue { d = relu(acc) }", "bf16", "bf16", "sm90.align-epilogue"),
    ("alignment = 2", "epilogue { s : f32[M]  d = acc * s }", "f32", "bf16", "sm90.align-epilogue"),
    ("alignment = 2 target = sm100", "", "bf16", "bf16", "sm100.align-tma"),
])
def test_fallback_rules(settings, epilogue, d, ab, code):
    diags = arch.check(kernel_of(gemm(settings, epilogue, d, ab)))
    assert [x.code for x in diags] == [code], [x.format() for x in diags]
    assert diags[0].pos.line == 3 and diags[0].valid
    assert code in arch.RULES


def test_alignment_one_serves_any_extent_of_f32():
    text = gemm("alignment = 1 tile = 64x128x32", d="f32", ab="f32")
    assert codes(text, {"M": 1, "N": 1001, "K": 333}) == []


@pytest.mark.parametrize("extents, fit", [
    ({"M": 1000, "N": 4096, "K": 4096}, None),  # everything 16-byte aligned: auto stays TMA
    ({"M": 1000, "N": 1004, "K": 4096}, 4),
    ({"M": 1000, "N": 4096, "K": 1002}, 2),
    ({"M": 1000, "N": 1001, "K": 4096}, 1),
])
def test_largest_alignment(extents, fit):
    k = kernel_of(gemm())
    assert largest_alignment(k, [extents]) == fit
    assert largest_alignment(k, [{"M": 1, "N": 4096, "K": 4096}, extents]) == fit
    resolved = resolve_alignment(k, [extents])
    assert resolved.alignment == fit
    assert resolve_alignment(kernel_of(gemm("alignment = 8")), [extents]).alignment == 8  # given: kept


def test_align_rule_says_which_alignment_serves_the_extents():
    diags = arch.check(kernel_of(gemm()), {"M": 1000, "N": 1002, "K": 4096})
    assert [d.code for d in diags] == ["sm90.align"]
    assert "build with alignment = 2" in diags[0].message and diags[0].valid == ("1000", "1008")
    diags = arch.check(kernel_of(gemm("alignment = 4")), {"M": 1000, "N": 1002, "K": 4096})
    assert [d.code for d in diags] == ["sm90.align"]
    assert "not a multiple of 4 (the kernel is built with alignment = 4)" in diags[0].message
    odd = arch.check(kernel_of(gemm()), {"M": 1000, "N": 1001, "K": 4096})
    assert "a and b cannot be read less than 4 bytes at a time (cp.async): pad N" in odd[0].message


def test_render_refuses_a_fallback_it_cannot_build():
    with pytest.raises(CheckError) as info:
        render(kernel_of(gemm("alignment = 2", "epilogue { bias : bf16[N]  d = gelu(acc + bias) }")))
    assert [d.code for d in info.value.diagnostics] == ["sm90.align-epilogue"]


def test_shipped_alignment_kernels_use_the_fallbacks():
    for name, cpp in (("align_bf16", "KernelCpAsyncWarpSpecializedCooperative"),
                      ("align_f32", "KernelCpAsyncWarpSpecializedPingpong")):
        k = lang.parse_file(KERNELS / f"{name}.ucut").kernel()
        values = template_values(k)
        assert arch.check(k) == [] and values["no_smem_epilogue"] and values["kernel_schedule"].endswith(cpp)


# --- nvcc ----------------------------------------------------------------------------------------------------

NVCC_KERNELS = ["batched_bias.ucut", "align_bf16.ucut"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from ucutlass.build import build_kernels

    cache = tmp_path_factory.mktemp("kernel-cache")
    kernels = [lang.parse_file(KERNELS / name).kernel() for name in NVCC_KERNELS]
    return dict(zip(NVCC_KERNELS, zip(kernels, build_kernels(kernels, jobs=2, root=cache, timeout_s=900))))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", NVCC_KERNELS)
def test_batched_and_fallback_kernels_compile_with_nvcc(compiled, name):
    """batched_bias: batch mode L, MN-major a and b, a per-batch bias and a shared residual; align_bf16: the
    cp.async mainloop and the no-smem epilogue."""
    from ucutlass.runtime import CompiledKernel

    kernel, result = compiled[name]
    assert result.ok, f"nvcc failed for {name}:\n{result.log[-3000:]}"
    assert not result.cached
    loaded = CompiledKernel(result.so_path, kernel)  # loads and checks the digest; no CUDA call
    batch_strides = [f"batch_stride_{op.name}" for op in kernel.operands] if kernel.batch else []
    assert loaded.info["extents"] == (["M", "N", "K", "L"] + batch_strides if kernel.batch else ["M", "N", "K"])
    assert loaded.info["extents"] == list(loaded.abi.extents)
    assert json.loads((result.entry / "meta.json").read_text())["config"] == kernel.build_config().config_name()  # ir.BUILD_NAME
    assert hasattr(ctypes.CDLL(str(result.so_path)), "ucut_run")
