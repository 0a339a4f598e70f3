"""Grouped GEMM (``kernel NAME : grouped_gemm``) without a GPU: the language, the sm90 grouped rules, rendering,
the ABI and binding to a problem; plus one real nvcc compile (marked ``nvcc``).

tests/test_grouped_gpu.py runs the kernels of tests/kernels/grouped_*.ucut on the H200.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from ucutlass import arch, codegen, lang
from ucutlass.arch import RULES, check_kernel, sm90_grouped
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.ir import GroupedGemmKernel, IndexType, Layout, Schedule

KERNELS = Path(__file__).parent / "kernels"

PLAIN = """
kernel experts : grouped_gemm {
  a : bf16[M, K] row
  b : bf16[G, N, K] row
  d : bf16[M, N] row
  m_sizes : i32[G]
  %s
}
"""


def grouped(settings: str = "", body: str | None = None) -> GroupedGemmKernel:
    return lang.parse(PLAIN % settings if body is None else body).kernel()


def codes(text: str) -> list[str]:
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(text)
    return [d.code for d in e.value.diagnostics]


def rule_codes(kernel, extents=None) -> list[str]:
    return [d.code for d in check_kernel(kernel, extents) if d.severity == "error"]


# --- the language ------------------------------------------------------------------------------------------------


def test_grouped_kernel_lowers_with_its_group_operand():
    k = grouped()
    assert isinstance(k, GroupedGemmKernel) and k.family == "grouped_gemm"
    assert k.b.dims == ("G", "N", "K") and k.b.layout is Layout.row
    assert k.groups.name == "m_sizes" and k.groups.dtype is IndexType.i32 and k.groups.dims == ("G",)
    assert k.c is None and k.operands == (k.a, k.b, k.d)
    assert "_grouped_m_sizes_i32_" in k.config_name()
    assert arch.check(lang.parse(PLAIN % "")) == []


def test_grouped_offsets_i64_and_k_by_n_weights():
    k = lang.parse(PLAIN.replace("m_sizes : i32[G]", "m_offsets : i64[G] <- offs")
                  .replace("b : bf16[G, N, K] row", "b : bf16[G, K, N] row") % "").kernel()
    assert k.groups.name == "m_offsets" and k.groups.dtype is IndexType.i64 and k.groups.binding == "offs"
    assert k.b.dims == ("G", "K", "N")


def test_grouped_and_plain_kernels_differ_in_digest():
    plain = lang.parse("kernel experts : gemm { a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row }").kernel()
    assert grouped().digest() != plain.digest()


@pytest.mark.parametrize("text,code", [
    (PLAIN.replace("  m_sizes : i32[G]\n", "") % "", "missing-operand"),
    (PLAIN.replace("m_sizes : i32[G]", "m_sizes : i32[G]  m_offsets : i32[G]") % "", "duplicate-operand"),
    (PLAIN.replace("b : bf16[G, N, K] row", "b : bf16[N, K] row") % "", "bad-dims"),
    (PLAIN.replace("a : bf16[M, K] row", "a : bf16[M, K] col") % "", "bad-layout"),
    (PLAIN.replace("m_sizes : i32[G]", "m_sizes : bf16[G]") % "", "unknown-dtype"),
    (PLAIN.replace("m_sizes : i32[G]", "m_sizes : i32[G] row") % "", "bad-layout"),
    (PLAIN.replace("d : bf16[M, N] row", "d : bf16[M, N] row  c : bf16[M, N] row") % "", "unsupported"),
    (PLAIN.replace("d : bf16[M, N] row", "d : bf16[M, N] row  e : bf16[M, N] row") % "", "unknown-operand"),
    (PLAIN % "epilogue { r : bf16[M, N] row  d = acc + r }", "unsupported"),
    (PLAIN % "epilogue { r : bf16[G, M] d = acc + r }", "bad-dims"),
    (PLAIN % "tiles = 128x128x64", "unknown-setting"),
])
def test_grouped_language_errors(text, code):
    assert code in codes(text)


def test_grouped_group_dtype_error_lists_the_index_types():
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(PLAIN.replace("m_sizes : i32[G]", "m_sizes : i23[G]") % "")
    d = e.value.diagnostics[0]
    assert d.code == "unknown-dtype" and d.valid == ("i32", "i64") and "did you mean 'i32'" in d.message
    assert d.pos.line == 6


def test_grouped_schedule_error_lists_the_targets_grouped_schedules_first():
    with pytest.raises(UcutSyntaxError) as e:
        grouped("schedule = coop")
    (d,) = e.value.diagnostics
    assert d.valid[:3] == ("auto", "cooperative", "pingpong") and "did you mean 'cooperative'" in d.message


def test_grouped_epilogue_inputs():
    k = grouped("epilogue { bias : bf16[G, N]  shift : bf16[N]  w : f32[M]  alpha : f32 = 0.5  "
                "d = (acc + bias) * w * alpha + shift }")
    dims = {i.name: i.dims for i in k.epilogue_inputs}
    assert dims == {"bias": ("G", "N"), "shift": ("N",), "w": ("M",), "alpha": ()}


# --- rules ---------------------------------------------------------------------------------------------------------


def test_grouped_schedule_auto_resolves_like_sm90():
    from ucutlass.arch import resolve_schedule

    assert resolve_schedule(grouped("tile = 128x128x64")) is Schedule.cooperative
    assert resolve_schedule(grouped("tile = 64x128x64")) is Schedule.pingpong


@pytest.mark.parametrize("settings,code", [
    ("schedule = warpspecialized", "sm90.grouped-schedule"),
    ("target = sm100  schedule = cooperative", "sm100.grouped-schedule"),
    ("target = sm100  stages = 4", "sm100.grouped-stages"),
    ("target = sm100  tile = 256x128x64  schedule = warpspecialized_2sm", "sm100.2sm-cluster"),
    ("target = sm100  scheduler = stream_k", "sm100.grouped-scheduler"),
    ("tile = 128x128x64  scheduler = stream_k", "sm90.grouped-scheduler"),
    ("tile = 128x128x64  scheduler = stream_k  split_k = 2", "sm90.grouped-scheduler"),
    ("tile = 64x128x64  schedule = cooperative", "sm90.cooperative-tile-m"),
    ("tile = 256x128x64  schedule = pingpong", "sm90.pingpong-tile-m"),
    ("tile = 128x124x64", "sm90.tile-n"),
    ("swap_ab = true", "sm90.swap-ab"),
    ("tile = 128x128x48", "sm90.tile-k"),
    ("cluster = 4x4x1", "sm90.cluster-size"),
    ("tile = 128x256x64  stages = 7", "sm90.smem"),
])
def test_grouped_rules(settings, code):
    assert code in rule_codes(grouped(settings))
    assert code in RULES


def test_grouped_smem_counts_the_ptr_array_extras():
    """A stage count that fits the plain kernel exactly but not with the ptr-array descriptors is refused."""
    from ucutlass.arch import sm90

    for stages in range(2, 12):
        k = grouped(f"tile = 128x256x64  stages = {stages}")
        plain = sm90.smem_bytes(sm90_grouped.group_view(k), stages)
        if plain <= sm90.SMEM_CAPACITY_BYTES < plain + sm90_grouped.GROUPED_EXTRA_SMEM_BYTES:
            assert rule_codes(k) == ["sm90.grouped-smem"]
            break
        assert (rule_codes(k) == []) == (plain + sm90_grouped.GROUPED_EXTRA_SMEM_BYTES <= sm90.SMEM_CAPACITY_BYTES)


# sizeof(GemmKernel::SharedStorage) and the mainloop's DispatchPolicy::Stages of SM90 ptr-array grouped kernels
# (bf16, cluster 1x1x1), printed by a host program built with nvcc 13.0 against the nvidia-cutlass 4.2 headers.
GROUPED_MEASURED = [
    ("128x128x64", "cooperative", "auto", False, 6, 215040),
    ("128x256x64", "cooperative", "auto", False, 4, 215040),
    ("128x256x64", "cooperative", "4", False, 4, 215040),
    ("256x128x64", "cooperative", "auto", True, 4, 215040),
    ("64x128x64", "pingpong", "auto", False, 9, 231424),
    ("128x128x64", "pingpong", "auto", True, 6, 206848),
    ("128x128x64", "pingpong", "6", True, 6, 206848),
    ("64x256x64", "pingpong", "auto", False, 5, 215040),
]


@pytest.mark.parametrize("tile,schedule,stages,bias,want_stages,want_bytes", GROUPED_MEASURED)
def test_grouped_smem_model_matches_nvcc(tile, schedule, stages, bias, want_stages, want_bytes):
    from ucutlass.arch import sm90

    epilogue = "epilogue { bias : bf16[G, N]  d = acc + bias }" if bias else ""
    k = grouped(f"tile = {tile}  schedule = {schedule}  stages = {stages}  {epilogue}")
    assert sm90.mainloop_stages(sm90_grouped.group_view(k)) == want_stages
    assert sm90_grouped.smem_bytes(k) == want_bytes
    assert rule_codes(k) == []


def test_grouped_alignment_rule_uses_n_and_k():
    k = grouped("tile = 128x128x64")
    assert rule_codes(k, {"N": 4096, "K": 7168, "G": 256}) == []
    (bad_n,) = [d for d in check_kernel(k, {"N": 4100, "K": 7168}) if d.severity == "error"]
    assert bad_n.code == "sm90.align" and bad_n.message.startswith("d: ")  # b [G, N, K] is contiguous in K
    assert sorted(d.message[:2] for d in check_kernel(k, {"N": 4096, "K": 7170})) == ["a:", "b:"]


def test_grouped_choices_are_counted():
    prog = lang.parse(PLAIN % "tile = {64x128x64, 128x128x64, 256x128x64}  schedule = {auto, cooperative, pingpong}")
    note = arch.check(prog)[-1]
    assert note.code == "choices" and note.severity == "note"
    legal, rejected = arch.legal_combinations(prog.kernel())
    assert (len(legal), len(rejected)) == (7, 2)
    assert {e.code for _, errs in rejected for e in errs} == {"sm90.cooperative-tile-m", "sm90.pingpong-tile-m"}


# --- rendering and ABI -------------------------------------------------------------------------------------------


def test_grouped_abi_puts_the_group_operand_last():
    k = lang.parse_file(KERNELS / "grouped_epilogue.ucut").kernel()
    abi = codegen.abi_of(k)
    assert abi.ptr_names == ("a", "b", "d", "bias", "shift", "w", "m_offsets")
    assert abi.scalar_names == ("alpha",) and abi.extents == ("M", "N", "K", "G")


def test_grouped_render_plain():
    k = lang.parse_file(KERNELS / "grouped_plain.ucut").kernel()
    src = codegen.render(k, "grouped_plain.ucut")
    for text in ("cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
                 "cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative",
                 "cutlass::gemm::GroupProblemShape<Shape<int, int, int>>", "GemmUniversalMode::kGrouped",
                 "ElementA, LayoutA*, AlignA", "ElementD, LayoutD*, AlignD", "using ElementGroup = int32_t;",
                 "constexpr bool kGroupsAreSizes = true;", "using LayoutB = cutlass::layout::ColumnMajor;",
                 "{groups, arrays.shapes, nullptr}"):
        assert text in src, text
    info = json.loads(src.split('R"UCUTINFO(')[1].split(')UCUTINFO"')[0])
    assert info["family"] == "grouped_gemm" and info["extents"] == ["M", "N", "K", "G"]
    assert info["ptrs"] == ["a", "b", "d", "m_sizes"] and info["digest"] == k.build_digest()


def test_grouped_render_epilogue_nodes():
    k = lang.parse_file(KERNELS / "grouped_epilogue.ucut").kernel()
    src = codegen.render(k)
    assert "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong" in src
    assert "using LayoutB = cutlass::layout::RowMajor;" in src  # b : [G, K, N] row
    assert "using ElementGroup = int64_t;" in src and "constexpr bool kGroupsAreSizes = false;" in src
    # [G, N]: batch stride N; [N]: stride 0; [M]: the per-group pointer array, element-aligned
    assert "{_0{}, _1{}, static_cast<int64_t>(extents[1])}" in src and "{_0{}, _1{}, 0}" in src
    assert "Sm90ColBroadcast<0, CtaTileShape, float*, ElementCompute, Stride<_1, _0, _0>, 1>" in src
    assert "arrays.ptr_col[0]" in src and "cols.base[0] = static_cast<char const*>(ptrs[5]);  // w" in src


def test_grouped_render_sm100():
    """target = sm100: the SM100 ptr-array kernels (example 75), compiled for sm_100a only (no B200 here)."""
    k = grouped("target = sm100  tile = 256x128x64  cluster = 2x1x1  "
                "epilogue { bias : bf16[G, N]  d = acc + bias }")
    src = codegen.render(k)
    for text in ("cutlass::gemm::KernelPtrArrayTmaWarpSpecialized2SmSm100",
                 "cutlass::epilogue::PtrArrayTmaWarpSpecialized2Sm",
                 "cutlass::arch::Sm100, cutlass::arch::OpClassTensorOp", "using CtaTileShape = Shape<_128, _128, _64>;",
                 "Sm90RowBroadcast<0, CtaTileShape,"):
        assert text in src, text
    assert "cutlass::arch::Sm90," not in src


def test_grouped_render_refuses_a_broken_rule():
    with pytest.raises(CheckError) as e:
        codegen.render(grouped("schedule = warpspecialized"))
    assert e.value.diagnostics[0].code == "sm90.grouped-schedule"


# --- binding -------------------------------------------------------------------------------------------------------


def _moe_problem(tmp_path: Path, sizes_dtype: str = "int32") -> Path:
    folder = tmp_path / "moe_up"
    folder.mkdir()
    definition = {
        "name": "moe_up", "axes": {"rows": {"type": "var"}, "experts": {"type": "const", "value": 8},
                                   "hidden": {"type": "const", "value": 256}, "inter": {"type": "const", "value": 512}},
        "inputs": {"x": {"shape": ["rows", "hidden"], "dtype": "bfloat16"},
                   "w": {"shape": ["experts", "inter", "hidden"], "dtype": "bfloat16"},
                   "tokens_per_expert": {"shape": ["experts"], "dtype": sizes_dtype}},
        "outputs": {"y": {"shape": ["rows", "inter"], "dtype": "bfloat16"}},
        "reference": "def run(x, w, tokens_per_expert):\n    raise NotImplementedError\n",
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text(json.dumps({"axes": {"rows": 64}, "inputs": {}}) + "\n")
    return folder


BOUND = """
kernel up : grouped_gemm {
  a : bf16[M, K] row <- x
  b : bf16[G, N, K] row <- w
  d : bf16[M, N] row -> y
  m_sizes : %s[G] <- tokens_per_expert
}
"""


def test_grouped_binds_to_a_problem(tmp_path):
    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    problem = load_problem(_moe_problem(tmp_path))
    binding = bind(lang.parse(BOUND % "i32").kernel(), problem)
    assert binding.extents(problem.workloads[0]) == {"M": 64, "K": 256, "G": 8, "N": 512}
    assert [s.arg for s in binding.slots] == ["a", "b", "d", "m_sizes"]


def test_grouped_binding_checks_the_group_dtype(tmp_path):
    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    problem = load_problem(_moe_problem(tmp_path, "int64"))
    with pytest.raises(CheckError) as e:
        bind(lang.parse(BOUND % "i32").kernel(), problem)
    assert [d.code for d in e.value.diagnostics] == ["bind-dtype"]


# --- a real compile ------------------------------------------------------------------------------------------------


SM100_GROUPED = """
kernel grouped_sm100 : grouped_gemm {
  target = sm100
  a : bf16[M, K] row   b : bf16[G, N, K] row   d : bf16[M, N] row   m_sizes : i32[G]
  tile = 256x128x64   cluster = 2x1x1   schedule = warpspecialized_2sm
  epilogue { bias : bf16[G, N]  w : f32[M]  d = silu(acc + bias) * w }
}
"""


@pytest.fixture(scope="module")
def compiled_grouped(tmp_path_factory):
    from ucutlass.build import build_kernels

    kernels = [lang.parse_file(KERNELS / "grouped_epilogue.ucut").kernel(), lang.parse(SM100_GROUPED).kernel()]
    results = build_kernels(kernels, jobs=2, root=tmp_path_factory.mktemp("grouped-cache"), timeout_s=900)
    return dict(zip(("sm90", "sm100"), zip(kernels, results)))


@pytest.mark.nvcc
@pytest.mark.parametrize("target", ["sm90", "sm100"])
def test_grouped_kernel_compiles_with_nvcc(compiled_grouped, target):
    """CI compiles two generated grouped kernels: sm90 (pingpong, [G, K, N] weights, i64 offsets, every epilogue node
    kind the grouped template has; tests/test_grouped_gpu.py runs it and a cooperative one on the H200) and sm100
    (2SM, per-group bias, per-row scale; compile-only, there is no B200 here)."""
    from ucutlass.runtime import load_kernel

    kernel, result = compiled_grouped[target]
    assert result.ok, f"nvcc failed:\n{result.log[-3000:]}"
    assert not result.cached
    lib = ctypes.CDLL(str(result.so_path))
    for symbol in ("ucut_run", "ucut_workspace_size", "ucut_can_implement", "ucut_info", "ucut_last_error"):
        assert hasattr(lib, symbol)
    loaded = load_kernel(result.so_path, kernel)  # checks the ABI version, pointer order and digest; no CUDA call
    assert type(loaded).__name__ == "GroupedCompiledKernel"
    assert loaded.info["family"] == "grouped_gemm" and loaded.info["ptrs"] == list(loaded.abi.ptr_names)
    gencode = {"sm90": "arch=compute_90a,code=sm_90a", "sm100": "arch=compute_100a,code=sm_100a"}[target]
    assert gencode in json.loads((result.entry / "meta.json").read_text())["command"]


def test_grouped_kernels_fit_the_moe_problems_expert_weights(sol_execbench_dir):
    """L1_044 (DeepSeek-V3 MoE experts) stacks its expert weights [E, N, K] as b wants: gate/up [256, 2048, 7168] and
    down [256, 7168, 2048] give legal grouped kernels for every workload (the routing, SwiGLU and the weighted
    scatter-add back to token order stay outside the kernel)."""
    from ucutlass.problem import load_problem

    problem = load_problem(sol_execbench_dir / "L1_044_moe_expert_computation")
    k = lang.parse_file(Path(__file__).resolve().parents[1] / "examples" / "moe_experts_grouped.ucut").kernel()
    legal_any = False
    for w in problem.workloads:
        axes = problem.resolve_axes(w)
        for weight in ("gate_proj_weights", "up_proj_weights", "down_proj_weights"):
            g, n, kk = problem.shape(problem.inputs[weight], axes)
            rows = axes["num_tokens"] * axes["num_experts_per_tok"]  # tokens x top-k, sorted by expert
            legal, _ = arch.legal_combinations(k, {"M": rows, "N": n, "K": kk, "G": g})
            assert legal, (w.label(), weight)
            legal_any = True
    assert legal_any
