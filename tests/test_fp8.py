"""FP8 GEMMs (sm90: per-tensor and blockwise scales, fast accumulation) and sm100 block-scaled GEMMs (NVFP4,
MXFP8): the language, the arch rules, rendering, binding. Fast CPU tests; the real nvcc compiles are marked
``nvcc`` at the end, and tests/test_fp8_gpu.py runs the sm90 kernels on the H200."""

from __future__ import annotations

import ctypes
import json
import math
from pathlib import Path

import pytest

from ucutlass import arch, codegen, lang
from ucutlass.arch import sm90, sm100
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.ir import DType, Layout, Schedule

KERNELS = Path(__file__).parent / "kernels"

FP8 = "a : f8e4m3[M, K] row  b : f8e4m3[N, K] row  d : bf16[M, N] row"
BLOCKWISE = "scale_a : f32[M, K/128] row  scale_b : f32[N/128, K/128] row"
NVFP4 = ("target = sm100  a : e2m1[M, K] row  b : e2m1[N, K] row  d : bf16[M, N] row  "
         "scale_a : ue4m3[M, K/16]  scale_b : ue4m3[N, K/16]")


def kernel(body: str, name: str = "k"):
    return lang.parse(f"kernel {name} : gemm {{\n{body}\n}}", "k.ucut").kernel()


def codes(k, extents=None):
    return [d.code for d in arch.check_kernel(k, extents) if d.severity == "error"]


def parse_error(body: str):
    with pytest.raises(UcutSyntaxError) as e:
        kernel(body)
    return e.value.diagnostics


# --- the language ------------------------------------------------------------------------------------------

def test_scale_declarations_lower_to_block_sizes():
    k = kernel(f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128")
    assert k.a.dtype is DType.f8e4m3 and k.a.dtype.bits == 8 and k.a.dtype.torch_name == "float8_e4m3fn"
    assert k.scale_a.dims == ("M", "K/128") and k.scale_a.block == (1, 128) and k.scale_a.operand == "a"
    assert k.scale_b.block == (128, 128) and k.scale_b.layout is Layout.row and not k.scale_b.per_tensor
    assert k.blockwise and k.scales == (k.scale_a, k.scale_b)
    assert "scale_af321x128_scale_bf32128x128" in k.config_name()


def test_per_tensor_scales_and_bindings():
    k = kernel(f"{FP8}\nscale_a : f32 <- sa\nscale_b : f32 <- sb")
    assert k.scale_a.per_tensor and k.scale_a.block == (0, 0) and k.scale_a.binding == "sa"
    assert not k.blockwise
    assert codegen.abi_of(k).ptr_names == ("a", "b", "d", "scale_a", "scale_b")


def test_scale_layout_col_and_either_order():
    k = kernel(f"{FP8}\nscale_a : f32[K/128, M] col\nscale_b : f32[K/128, N/128] row\ntile = 128x128x128")
    assert k.scale_a.contiguous_dim == "K/128" and k.scale_b.contiguous_dim == "N/128"
    assert k.scale_a.block == (1, 128) and k.scale_b.block == (128, 128)


@pytest.mark.parametrize("decl, code, line_col", [
    ("scale_a : f32[N, K/128]", "bad-dims", (3, 14)),          # a's scale is over M, not N
    ("scale_b : f32[N/128]", "bad-dims", (3, 14)),
    ("scale_a : f32[M, K/0]", "bad-dims", (3, 14)),
    ("scale_a : f32 row", "bad-layout", (3, 15)),               # a per-tensor scale has no layout
    ("scale_a : f32 -> out2", "bad-binding", (3, 15)),
    ("scale_a : f33[M, K/128]", "unknown-dtype", (3, 11)),
    ("scale_a : {f32, bf16}[M, K/128]", "choice-not-allowed", (3, 11)),
    ("scale_c : f32", "unknown-operand", (3, 1)),
    ("scale_a : f32  scale_a : f32", "duplicate-operand", (3, 16)),
])
def test_scale_declaration_errors(decl, code, line_col):
    diags = parse_error(f"{FP8}\n{decl}")
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    assert (diags[0].pos.line, diags[0].pos.column) == line_col


def test_scale_dtype_errors_list_the_scale_dtypes():
    (d,) = parse_error(f"{FP8}\nscale_a : f33 <- sa")
    assert d.code == "unknown-dtype" and d.valid == ("f32", "ue8m0", "ue4m3") and "did you mean 'f32'" in d.message
    (d,) = parse_error("a : f8e4m4[M, K] row  b : f8e4m3[N, K] row  d : bf16[M, N] row")
    assert "did you mean 'f8e4m3'" in d.message and "ue8m0" not in d.valid and "e2m1" in d.valid


def test_scales_of_a_batched_kernel_are_refused():
    diags = parse_error("a : f8e4m3[B, M, K] row  b : f8e4m3[B, N, K] row  d : bf16[B, M, N] row  scale_a : f32")
    assert [d.code for d in diags] == ["unsupported"] and "batched" in diags[0].message


def test_divided_dims_only_on_scales():
    diags = parse_error("a : f8e4m3[M, K/128] row  b : f8e4m3[N, K] row  d : bf16[M, N] row")
    assert [d.code for d in diags] == ["bad-dims"]
    assert "[M, K]" in diags[0].valid


def test_card_example_parses_and_checks():
    text = (Path(__file__).parents[1] / "docs" / "DSL.md").read_text()
    assert "scale_a : f32[M, K/128] row" in text and "cooperative_fp8_fastaccum" in text


# --- sm90 rules --------------------------------------------------------------------------------------------

GOOD_SM90 = [
    f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128",
    f"{FP8}\n{BLOCKWISE}\ntile = 64x128x128 schedule = pingpong",
    f"{FP8}\n{BLOCKWISE}\ntile = 128x256x128 cluster = 2x1x1",
    f"{FP8}\nscale_a : f32  scale_b : f32\ntile = 128x128x128 schedule = cooperative_fp8_fastaccum",
    f"{FP8}\ntile = 64x128x256 schedule = pingpong_fp8_fastaccum",
    f"{FP8}\ntile = 128x128x128 schedule = warpspecialized_fp8_fastaccum",
    "a : f8e4m3[M, K] row  b : f8e5m2[N, K] row  d : f32[M, N] row  tile = 128x256x64",  # e4m3 x e5m2
    f"{FP8}\nscale_b : f32",  # one per-tensor scale
]


@pytest.mark.parametrize("body", GOOD_SM90)
def test_legal_fp8_kernels_pass(body):
    assert codes(kernel(body)) == []


BAD_SM90 = [
    ("a : bf16[M, K] row  b : bf16[N, K] row  d : ue4m3[M, N] row", "sm90.dtype"),
    (f"{FP8.replace('d : bf16', 'd : f8e4m3')}", "sm90.dtype"),
    ("a : f8e4m3[K, M] row  b : f8e4m3[N, K] row  d : bf16[M, N] row", "sm90.fp8-k-major"),
    ("a : f8e4m3[M, K] row  b : f8e4m3[N, K] col  d : bf16[M, N] row", "sm90.fp8-k-major"),
    (f"{FP8}\nalignment = 8", "sm90.fp8-align"),
    ("a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row\nschedule = cooperative_fp8_fastaccum",
     "sm90.fastaccum"),
    (f"{FP8}\nscale_a : bf16", "sm90.scale-dtype"),
    ("a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row\n" + BLOCKWISE + "\ntile = 128x128x128",
     "sm90.blockwise-fp8"),
    (f"{FP8}\nscale_a : f32[M, K/128] row  scale_b : f32\ntile = 128x128x128", "sm90.blockwise-pair"),
    (f"{FP8}\nscale_a : f32[M, K/128] row\ntile = 128x128x128", "sm90.blockwise-pair"),
    (f"{FP8}\nscale_a : f32[M, K/128] row  scale_b : f32[N/128, K/256] row\ntile = 128x128x128",
     "sm90.blockwise-pair"),
    (f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128 schedule = warpspecialized", "sm90.blockwise-schedule"),
    (f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128 schedule = cooperative_fp8_fastaccum", "sm90.blockwise-schedule"),
    (f"{FP8}\n{BLOCKWISE}\ntile = 128x128x64", "sm90.blockwise-tile"),     # tile K != the scale block K
    (f"{FP8}\n{BLOCKWISE}\ntile = 128x128x256", "sm90.blockwise-tile"),
    (f"{FP8}\nscale_a : f32[M, K/64] row  scale_b : f32[N/128, K/64] row\ntile = 128x128x64",
     "sm90.blockwise-tile"),                                                  # K block not a multiple of 128
    (f"{FP8}\n{BLOCKWISE}\ntile = 128x64x128", "sm90.blockwise-tile"),       # 128-row b blocks vs tile N 64
]


@pytest.mark.parametrize("body, code", BAD_SM90)
def test_each_fp8_rule_fires_alone(body, code):
    diags = [d for d in arch.check_kernel(kernel(body)) if d.severity == "error"]
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    assert code in sm90.RULES and diags[0].pos.file == "k.ucut" and diags[0].pos.line >= 2
    assert diags[0].message


def test_every_new_sm90_rule_has_a_case():
    mine = {c for c in sm90.RULES if c.split(".")[1].startswith(("dtype", "fp8", "fastaccum", "scale", "blockwise"))}
    assert mine == {code for _, code in BAD_SM90}


def test_blockwise_tile_message_names_the_fix():
    (d,) = [d for d in arch.check_kernel(kernel(f"{FP8}\n{BLOCKWISE}\ntile = 128x128x64")) if d.severity == "error"]
    assert "128x128x128" in d.valid and "tile K" in d.message


def test_fastaccum_tiles_like_its_base_schedule():
    k = kernel(f"{FP8}\ntile = 64x128x128 schedule = cooperative_fp8_fastaccum")
    assert codes(k) == ["sm90.cooperative-tile-m"]
    assert Schedule.pingpong_fp8_fastaccum.base is Schedule.pingpong and Schedule.pingpong_fp8_fastaccum.fp8_fastaccum


def test_blockwise_stages_count_the_scales():
    """CUTLASS's compute_stage_count_with_blockwise_scale adds ScaleMsPerTile + ScaleNsPerTile f32 per stage."""
    plain = kernel(f"{FP8}\ntile = 128x128x128")
    scaled = kernel(f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128")
    assert sm90.stage_bytes(scaled) == sm90.stage_bytes(plain) + 4 * (128 // 1 + 128 // 128)
    # (232448 - carveout) // (round128(32768 + 516) + 16) with the same epilogue carveout
    carveout = math.ceil(sm90.epilogue_smem_bytes(scaled) / 128) * 128
    assert sm90.auto_stages(scaled) == (232448 - carveout) // (math.ceil((32768 + 516) / 128) * 128 + 16)
    assert sm90.auto_stages(scaled) <= sm90.auto_stages(plain)


def test_alignment_of_fp8_extents():
    k = kernel(f"{FP8}\n{BLOCKWISE}\ntile = 128x128x128")
    assert codes(k, {"M": 1, "N": 7680, "K": 7680}) == []
    assert codes(k, {"M": 1000, "N": 7680, "K": 7688}) == ["sm90.align", "sm90.align"]  # a and b: K % 16


# --- sm100 rules -------------------------------------------------------------------------------------------

GOOD_SM100 = [
    f"{NVFP4}\ntile = 128x128x256",
    f"{NVFP4}\ntile = 256x256x256 cluster = 2x1x1",
    ("target = sm100  a : f8e4m3[M, K] row  b : f8e5m2[N, K] row  d : bf16[M, N] row\n"
     "scale_a : ue8m0[M, K/32]  scale_b : ue8m0[N, K/32]\ntile = 128x192x128"),
    "target = sm100 " + FP8 + " scale_a : f32  scale_b : f32  tile = 128x128x128",  # FP8 with per-tensor scales
]


@pytest.mark.parametrize("body", GOOD_SM100)
def test_legal_sm100_block_scaled_kernels_pass(body):
    assert codes(kernel(body)) == []


BAD_SM100 = [
    ("target = sm100  a : e2m1[M, K] row  b : e2m1[N, K] row  d : bf16[M, N] row  tile = 128x128x256",
     "sm100.blockscaled-format"),                                             # e2m1 needs scale factors
    (NVFP4.replace("ue4m3[N, K/16]", "ue8m0[N, K/16]") + "\ntile = 128x128x256", "sm100.blockscaled-format"),
    (NVFP4.replace("K/16", "K/32") + "\ntile = 128x128x256", "sm100.blockscaled-format"),
    ("target = sm100 " + FP8 + " " + BLOCKWISE + " tile = 128x128x128", "sm100.blockscaled-format"),
    (f"{NVFP4}\ntile = 64x128x256", "sm100.blockscaled-tile"),
    (f"{NVFP4}\ntile = 128x128x128", "sm100.blockscaled-tile"),
    (f"{NVFP4}\ntile = 128x96x256", "sm100.blockscaled-tile"),
    (NVFP4.replace("b : e2m1[N, K] row", "b : e2m1[N, K] col") + "\ntile = 128x128x256", "sm100.blockscaled-k-major"),
    ("target = sm100 " + FP8 + " scale_a : bf16  tile = 128x128x128", "sm100.scale-dtype"),
]


@pytest.mark.parametrize("body, code", BAD_SM100)
def test_each_sm100_block_scaled_rule_fires(body, code):
    diags = [d for d in arch.check_kernel(kernel(body)) if d.severity == "error"]
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    assert code in sm100.RULES


def test_block_scaled_format_and_smem():
    k = kernel(f"{NVFP4}\ntile = 128x128x256")
    assert sm100.block_scaled_format(k) == "nvfp4"
    # 128x256 e2m1 A + 128x256 B = 32 KiB, plus 128 rows x 16 scale factors for each
    assert sm100.stage_bytes(k) == 2 * 128 * 256 // 2 + 2 * 128 * (256 // 16)
    assert sm100.auto_stages(k) >= 2


# --- rendering ---------------------------------------------------------------------------------------------

def test_blockwise_renders_cutlass_blockwise_mainloop():
    k = lang.parse_file(KERNELS / "fp8_blockwise.ucut").kernel()
    v = codegen.template_values(k)
    assert v["kernel_schedule"] == "cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum"
    assert v["sf_granularity"] == [1, 128, 128] and v["sfa_major"] == "K" and v["sfb_major"] == "K"
    assert v["element_a"] == "cutlass::float_e4m3_t"
    abi = codegen.abi_of(k)
    assert abi.ptr_names == ("a", "b", "d", "bias", "scale_a", "scale_b")
    assert (v["ptr_sfa"], v["ptr_sfb"]) == (4, 5)
    src = codegen.render(k)
    assert "cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128,\n    cute::GMMA::Major::K, cute::GMMA::Major::K>" in src
    assert "ElementA, cute::tuple<LayoutA, LayoutSFA>, AlignA" in src
    assert "static_cast<ElementSF const*>(ptrs[4]), layout_sfa, static_cast<ElementSF const*>(ptrs[5]), layout_sfb" in src
    assert "Sm90ScalarBroadcast<ElementCompute, Stride<_0, _0, int64_t>" not in src  # no per-tensor scales


def test_mn_major_scale_renders_mn_major_config():
    k = kernel(f"{FP8}\nscale_a : f32[M, K/128] col  scale_b : f32[N/128, K/128] col\ntile = 128x128x128")
    v = codegen.template_values(k)
    assert (v["sfa_major"], v["sfb_major"]) == ("MN", "MN")


def test_per_tensor_scales_render_one_scalar_broadcast_of_two_pointers():
    k = lang.parse_file(KERNELS / "fp8_tensor.ucut").kernel()
    src = codegen.render(k)
    assert "fusion::Sm90ScalarBroadcast<ElementCompute, Stride<_0, _0, int64_t>, 2>" in src
    assert "{ { 1.0f, 1.0f }, { static_cast<ElementCompute const*>(ptrs[3]), static_cast<ElementCompute const*>(ptrs[4]) }, {} }" in src
    assert "KernelTmaWarpSpecializedCooperative;" in src  # FP8 with the promoting mainloop
    assert "layout_sfa" not in src


def test_fastaccum_renders_its_schedule():
    k = lang.parse_file(KERNELS / "fp8_fastaccum.ucut").kernel()
    v = codegen.template_values(k)
    assert v["kernel_schedule"] == "cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum"
    assert v["epilogue_schedule"] == "cutlass::epilogue::TmaWarpSpecialized"
    assert v["element_b"] == "cutlass::float_e5m2_t"


@pytest.mark.parametrize("file, schedule, pair, sf", [
    ("sm100_blockscaled_nvfp4.ucut", "KernelTmaWarpSpecialized1SmNvf4Sm100", "cutlass::nv_float4_t<ElementA>",
     "cutlass::float_ue4m3_t"),
    ("sm100_blockscaled_mxfp8.ucut", "KernelTmaWarpSpecialized2SmMxf8f6f4Sm100", "cutlass::mx_float8_t<ElementA>",
     "cutlass::float_ue8m0_t"),
])
def test_sm100_block_scaled_renders(file, schedule, pair, sf):
    k = lang.parse_file(KERNELS / file).kernel()
    v = codegen.template_values(k)
    assert v["kernel_schedule"] == f"cutlass::gemm::{schedule}" and v["element_pair_a"] == pair
    assert v["element_sf"] == sf and v["op_class"] == "cutlass::arch::OpClassBlockScaledTensorOp"
    src = codegen.render(k)
    assert "using ScaleConfig = typename CollectiveMainloop::Sm1xxBlkScaledConfig;" in src
    assert "ElementPairA, LayoutA, AlignA" in src


def test_plain_sm100_still_renders_tensor_op():
    k = lang.parse_file(KERNELS / "sm100_bias_gelu.ucut").kernel()
    src = codegen.render(k)
    assert src.count("cutlass::arch::Sm100, cutlass::arch::OpClassTensorOp") == 2 and "ElementPairA" not in src


# --- binding to a problem laid out like SOL-ExecBench's Quant_001 (scale_x [M, K/128], scale_w [N/128, K/128]) --

_REF = '''import torch


def run(x_fp8, w_fp8, x_scale, w_scale, bias):
    a = x_fp8.float().reshape(x_fp8.shape[0], -1, 128) * x_scale[:, :, None]
    n, k = w_fp8.shape
    b = w_fp8.float().reshape(n // 128, 128, k // 128, 128) * w_scale[:, None, :, None]
    return (a.reshape(x_fp8.shape[0], k) @ b.reshape(n, k).T + bias.float()).to(torch.bfloat16)
'''


def _fp8_problem(folder: Path) -> Path:
    folder.mkdir(parents=True)
    d = {"name": folder.name, "description": "blockwise FP8 linear",
         "axes": {"num_tokens": {"type": "var"}, "hidden": {"type": "const", "value": 7680},
                  "in_dim": {"type": "const", "value": 7680},
                  "scale_k": {"type": "expr", "expression": "in_dim // 128"},
                  "scale_n": {"type": "expr", "expression": "hidden // 128"}},
         "inputs": {"x_fp8": {"shape": ["num_tokens", "in_dim"], "dtype": "float8_e4m3fn"},
                    "w_fp8": {"shape": ["hidden", "in_dim"], "dtype": "float8_e4m3fn"},
                    "x_scale": {"shape": ["num_tokens", "scale_k"], "dtype": "float32"},
                    "w_scale": {"shape": ["scale_n", "scale_k"], "dtype": "float32"},
                    "bias": {"shape": ["hidden"], "dtype": "bfloat16"}},
         "outputs": {"out": {"shape": ["num_tokens", "hidden"], "dtype": "bfloat16"}},
         "reference": _REF}
    (folder / "definition.json").write_text(json.dumps(d))
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"w{m}", "axes": {"num_tokens": m}}) + "\n" for m in (1, 1000, 8192)))
    return folder


def test_blockwise_kernel_binds_to_a_deepseek_layout_problem(tmp_path):
    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    problem = load_problem(_fp8_problem(tmp_path / "fp8_linear"))
    k = lang.parse_file(KERNELS / "fp8_blockwise.ucut").kernel()
    b = bind(k, problem)
    ext = b.extents(problem.workloads[1])
    assert (ext["M"], ext["N"], ext["K"], ext["K/128"], ext["N/128"]) == (1000, 7680, 7680, 60, 60)
    assert [s.arg for s in b.slots][-2:] == ["scale_a", "scale_b"]


def test_binding_a_scale_of_the_wrong_block_count_is_refused(tmp_path):
    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    # weight scales per 64 rows of N: 120 blocks where [N/128, K/128] needs 60
    _fp8_problem(tmp_path / "fp8_linear")
    problem_def = json.loads((tmp_path / "fp8_linear" / "definition.json").read_text())
    problem_def["axes"]["scale_n64"] = {"type": "expr", "expression": "hidden // 64"}
    problem_def["inputs"]["w_scale"]["shape"] = ["scale_n64", "scale_k"]
    (tmp_path / "fp8_linear" / "definition.json").write_text(json.dumps(problem_def))
    problem = load_problem(tmp_path / "fp8_linear")
    k = lang.parse_file(KERNELS / "fp8_blockwise.ucut").kernel()
    with pytest.raises(CheckError) as e:
        bind(k, problem)
    assert [d.code for d in e.value.diagnostics] == ["bind-extent"] * 3  # one per workload
    assert "N/128 is 120 but N = 7680 needs ceil(7680 / 128) = 60 blocks" in e.value.diagnostics[0].message


# --- real compiles (CI) --------------------------------------------------------------------------------------

NVCC_KERNELS = ["fp8_blockwise.ucut", "fp8_fastaccum.ucut", "sm100_blockscaled_nvfp4.ucut"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from ucutlass.build import build_kernels

    cache = tmp_path_factory.mktemp("fp8-cache")
    kernels = [lang.parse_file(KERNELS / name).kernel() for name in NVCC_KERNELS]
    results = build_kernels(kernels, jobs=2, root=cache, timeout_s=900)
    return dict(zip(NVCC_KERNELS, zip(kernels, results)))


@pytest.mark.nvcc
@pytest.mark.parametrize("name", NVCC_KERNELS)
def test_fp8_and_block_scaled_kernels_compile_with_nvcc(compiled, name):
    from ucutlass.runtime import CompiledKernel

    kernel, result = compiled[name]
    assert result.ok, f"nvcc failed for {name}:\n{result.log[-3000:]}"
    assert not result.cached
    lib = ctypes.CDLL(str(result.so_path))
    assert hasattr(lib, "ucut_run")
    loaded = CompiledKernel(result.so_path, kernel)
    assert loaded.info["ptrs"] == list(codegen.abi_of(kernel).ptr_names)
    assert loaded.info["target"] == kernel.target.value


# --- the runtime's scale-tensor checks (no GPU needed: they run before any launch) ---------------------------

def _checker(file):
    from ucutlass.runtime import CompiledKernel

    ck = CompiledKernel.__new__(CompiledKernel)  # only the argument checks, no shared object
    ck.kernel = lang.parse_file(KERNELS / file).kernel()
    return ck


def test_runtime_checks_blockwise_scale_shapes_and_strides():
    torch = pytest.importorskip("torch")
    from ucutlass.errors import KernelRuntimeError

    ck = _checker("fp8_blockwise.ucut")
    ext, dev = {"M": 1000, "N": 1000, "K": 1040}, torch.device("cpu")
    ck._scale(ck.kernel.scale_a, torch.ones(1000, 9), ext, dev)          # ceil(1040 / 128) = 9 K blocks
    ck._scale(ck.kernel.scale_b, torch.ones(8, 9), ext, dev)             # ceil(1000 / 128) = 8 N blocks
    ck._scale(ck.kernel.scale_a, torch.ones(10, 100, 9), ext, dev)       # leading dims fold into M
    with pytest.raises(KernelRuntimeError, match=r"scale_b: expected shape \(8, 9\)"):
        ck._scale(ck.kernel.scale_b, torch.ones(7, 9), ext, dev)
    with pytest.raises(KernelRuntimeError, match="scale_a: strides"):
        ck._scale(ck.kernel.scale_a, torch.ones(9, 1000).t(), ext, dev)
    with pytest.raises(KernelRuntimeError, match=r"scale_a: expected f32 \(torch.float32\)"):
        ck._scale(ck.kernel.scale_a, torch.ones(1000, 9, dtype=torch.bfloat16), ext, dev)


def test_runtime_checks_per_tensor_and_block_scaled_sizes():
    torch = pytest.importorskip("torch")
    from ucutlass.errors import KernelRuntimeError

    ck = _checker("fp8_tensor.ucut")
    dev = torch.device("cpu")
    ck._scale(ck.kernel.scale_a, torch.tensor(0.5), {}, dev)
    with pytest.raises(KernelRuntimeError, match="one element"):
        ck._scale(ck.kernel.scale_a, torch.ones(2), {}, dev)
    ck = _checker("sm100_blockscaled_nvfp4.ucut")
    ext = {"M": 200, "N": 256, "K": 1024}
    # 128x4 atoms: roundup(200, 128) = 256 rows x roundup(1024 / 16, 4) = 64 columns
    ck._scale(ck.kernel.scale_a, torch.ones(256 * 64, dtype=torch.float8_e4m3fn), ext, dev)
    with pytest.raises(KernelRuntimeError, match="16384 contiguous scale factors"):
        ck._scale(ck.kernel.scale_a, torch.ones(200 * 64, dtype=torch.float8_e4m3fn), ext, dev)
