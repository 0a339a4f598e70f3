"""Rendering `.ucut` kernels to CUTLASS C++ (no nvcc here; tests/test_compile_nvcc.py compiles)."""

from __future__ import annotations

import dataclasses

import json
import re

import pytest

from ucutlass import codegen
from ucutlass.lang import parse
from ucutlass.errors import CheckError

EVT_FULL = """
kernel evt : gemm {
  a : bf16[M, K] row
  b : bf16[N, K] row
  d : bf16[M, N] row
  tile = 128x256x64   cluster = 2x1x1   schedule = cooperative
  epilogue {
    bias     : bf16[N]
    rowscale : f32[M]
    residual : bf16[M, N] row
    alpha    : f32
    d = gelu_tanh(acc * rowscale * alpha + bias) + residual * 0.5
  }
}
"""


def render(text: str) -> str:
    return codegen.render(parse(text).kernel())


def evt_lines(src: str) -> list[str]:
    return [line for line in src.splitlines() if line.startswith("using EvtNode")]


def test_abi_order_is_operands_then_epilogue_tensors_then_scalars():
    k = parse(EVT_FULL).kernel()
    abi = codegen.abi_of(k)
    assert abi.ptr_names == ("a", "b", "d", "bias", "rowscale", "residual")
    assert abi.scalar_names == ("alpha",)


def test_evt_tree_follows_the_expression():
    src = render(EVT_FULL)
    nodes = evt_lines(src)
    kinds = [re.search(r"= fusion::(\w+)", n).group(1) for n in nodes]
    # leaves first, each EVT node after its children, the root last
    assert kinds.count("Sm90AccFetch") == 1
    assert kinds.count("Sm90RowBroadcast") == 1  # bias[N]: one value per column
    assert kinds.count("Sm90ColBroadcast") == 1  # rowscale[M]: one value per row
    assert kinds.count("Sm90AuxLoad") == 1  # residual[M, N]
    assert kinds.count("Sm90ScalarBroadcast") == 2  # alpha and 0.5
    assert "GELU_taylor" in src
    root = nodes[-1]
    assert "cutlass::plus, ElementD" in root  # only the root converts to ElementD
    assert "using FusionCallbacks = EvtNode%d;" % (len(nodes) - 1) in src
    assert "scalars[0]" in src and "0.5f" in src
    assert "AuxLoadDescriptor<EpiDesc, cutlass::layout::RowMajor, cutlass::bfloat16_t>" in src


def test_plain_epilogue_wraps_acc_in_an_identity_root():
    src = render("""kernel p : gemm { a : f16[M, K] row  b : f16[N, K] row  d : f32[M, N] row
                    tile = 64x128x64 schedule = pingpong stages = 4 }""")
    nodes = evt_lines(src)
    assert len(nodes) == 2 and "Identity, ElementD" in nodes[1]
    assert "StageCount<4>" in src and "StageCountAutoCarveout" not in src
    assert "KernelTmaWarpSpecializedPingpong" in src and "epilogue::TmaWarpSpecialized;" in src
    assert "using ElementD = float;" in src and "using ElementA = cutlass::half_t;" in src


@pytest.mark.parametrize("a_decl,b_decl,layout_a,layout_b", [
    ("a : bf16[M, K] row", "b : bf16[N, K] row", "RowMajor", "ColumnMajor"),  # nn.Linear: TN
    ("a : bf16[M, K] col", "b : bf16[K, N] row", "ColumnMajor", "RowMajor"),
    ("a : bf16[K, M] row", "b : bf16[N, K] col", "ColumnMajor", "RowMajor"),
])
def test_layouts_translate_to_cutlass_names(a_decl, b_decl, layout_a, layout_b):
    src = render(f"kernel l : gemm {{ {a_decl}  {b_decl}  d : bf16[M, N] row }}")
    assert f"using LayoutA = cutlass::layout::{layout_a};" in src
    assert f"using LayoutB = cutlass::layout::{layout_b};" in src


def test_source_operand_c_uses_src_fetch_and_element_c():
    src = render("""kernel r : gemm { a : bf16[M, K] row  b : bf16[N, K] row  c : bf16[M, N] row
                    d : bf16[M, N] row  epilogue { d = acc + c } }""")
    assert "fusion::Sm90SrcFetch<ElementC>" in src
    assert "using ElementC = cutlass::bfloat16_t;" in src
    assert "static_cast<ElementC const*>(ptrs[2])" in src  # ptrs: a, b, c, d


def test_stream_k_and_schedules():
    src = render("kernel s : gemm { a : bf16[M, K] row b : bf16[N, K] row d : bf16[M, N] row "
                 "tile = 128x128x64 schedule = cooperative scheduler = stream_k }")
    assert "cutlass::gemm::StreamKScheduler" in src
    assert "KernelTmaWarpSpecializedCooperative" in src


def test_open_choices_are_not_rendered():
    k = parse("kernel o : gemm { a : bf16[M, K] row b : bf16[N, K] row d : bf16[M, N] row "
              "tile = {128x128x64, 128x256x64} }").kernel()
    with pytest.raises(CheckError) as e:
        codegen.render(k)
    assert "open choices" in str(e.value) and "tile" in str(e.value)


def test_rule_violation_is_rejected_before_rendering():
    k = parse("kernel bad : gemm { a : bf16[M, K] row b : bf16[N, K] row d : bf16[M, N] row "
              "tile = 64x128x64 schedule = cooperative }").kernel()
    with pytest.raises(CheckError) as e:
        codegen.render(k)
    assert "cooperative" in str(e.value)


def test_info_json_names_the_abi():
    src = render(EVT_FULL)
    info = re.search(r'R"UCUTINFO\((.*)\)UCUTINFO"', src).group(1)
    import json

    doc = json.loads(info)
    assert doc["ptrs"] == ["a", "b", "d", "bias", "rowscale", "residual"]
    assert doc["scalars"] == ["alpha"]
    # the digest of the kernel as built: swap_ab = auto written out as the rules decide it (false here)
    kernel = parse(EVT_FULL).kernel()
    assert doc["digest"] == dataclasses.replace(kernel, swap_ab=False).build_digest() != kernel.build_digest()
    assert doc["swap_ab"] is False and doc["extents"] == ["M", "N", "K"]
    assert doc["name"] == "kernel"  # compiled under ir.BUILD_NAME: renamed copies (a dispatch) share the build


def test_a_renamed_kernel_is_the_same_build():
    """Only the header comment names the kernel; the cache key leaves it out, so a tuned kernel and its renamed
    copy in a dispatch program are one nvcc run."""
    from ucutlass.build import cache_key

    k = parse(EVT_FULL).kernel()
    renamed = dataclasses.replace(k, name="evt_m64")
    a, b = codegen.render(k), codegen.render(renamed)
    assert a != b and "// kernel evt_m64: evt_m64_sm90" in b
    assert cache_key(a, "sm90") == cache_key(b, "sm90")
    assert k.build_digest() == renamed.build_digest() and k.digest() != renamed.digest()


def test_template_has_no_undefined_holes(monkeypatch):
    """StrictUndefined: a missing value is an error, never an empty string in C++."""
    import jinja2

    values = codegen.template_values(parse(EVT_FULL).kernel())
    values.pop("tile_scheduler")
    with pytest.raises(jinja2.UndefinedError):
        codegen.environment().get_template("sm90_gemm.cu.j2").render(**values)


# --- sm100 (Blackwell) -----------------------------------------------------------------------------------

SM100_1SM = """
kernel b1 : gemm {
  target = sm100
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
  tile = 128x128x64   schedule = warpspecialized_1sm
  epilogue { bias : bf16[N]  d = gelu(acc + bias) }
}
"""

SM100_2SM_EVT = """
kernel b2 : gemm {
  target = sm100
  a : bf16[M, K] row   b : bf16[N, K] row   c : bf16[M, N] row   d : bf16[M, N] row
  tile = 256x128x64   cluster = 2x1x1   scheduler = stream_k
  epilogue {
    rowscale : f32[M]   residual : bf16[M, N] row   alpha : f32
    d = silu(acc * rowscale) * alpha + residual + 0.5 * c
  }
}
"""


def test_sm100_1sm_renders_the_reference_types():
    """The types of shared/reference/cutlass/sm100_gemm_bias_gelu.cu (compiled there with nvcc 13.0)."""
    src = render(SM100_1SM)
    for line in ("using TileShape = Shape<_128, _128, _64>;", "using CtaTileShape = Shape<_128, _128, _64>;",
                 "using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized1SmSm100;",
                 "using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized1Sm;",
                 "using TileScheduler = cutlass::gemm::PersistentScheduler;"):
        assert line in src, line
    assert src.count("cutlass::arch::Sm100, cutlass::arch::OpClassTensorOp") == 2 and "arch::Sm90," not in src
    kinds = [re.search(r"= fusion::(\w+)", n).group(1) for n in evt_lines(src)]
    assert kinds == ["Sm90AccFetch", "Sm90RowBroadcast", "Sm90EVT", "Sm90EVT"]  # SM100 reuses the Sm90 nodes
    assert "Sm90RowBroadcast<0, CtaTileShape," in src and "cutlass::epilogue::thread::GELU," in src
    assert "EpiDesc" not in src  # no aux load, no descriptor


def test_sm100_2sm_renders_cta_tile_and_sm100_descriptors():
    src = render(SM100_2SM_EVT)
    assert "using TileShape = Shape<_256, _128, _64>;" in src  # the MMA tile over the CTA pair
    assert "using CtaTileShape = Shape<_128, _128, _64>;" in src  # what one CTA and the epilogue see
    assert "KernelTmaWarpSpecialized2SmSm100;" in src and "epilogue::TmaWarpSpecialized2Sm;" in src
    assert "using ClusterShape = Shape<_2, _1, _1>;" in src and "cutlass::gemm::StreamKScheduler" in src
    assert "detail::Sm100EpilogueDescriptor<" in src
    assert "Sm100AuxLoadDescriptor<EpiDesc, cutlass::layout::RowMajor, cutlass::bfloat16_t>" in src
    kinds = [re.search(r"= fusion::(\w+)", n).group(1) for n in evt_lines(src)]
    for kind in ("Sm90AccFetch", "Sm90SrcFetch", "Sm90ColBroadcast", "Sm90AuxLoad", "Sm90ScalarBroadcast"):
        assert kind in kinds, kind
    assert "Sm90ColBroadcast<0, CtaTileShape," in src
    assert "args.scheduler.splits = static_cast<int>(knobs[0]);" in src
    info = json.loads(re.search(r'R"UCUTINFO\((.*)\)UCUTINFO"', src).group(1))
    assert info["target"] == "sm100" and info["ptrs"] == ["a", "b", "c", "d", "rowscale", "residual"]


def test_both_targets_share_one_copy_of_the_evt_and_the_abi():
    """The EVT list, the nested arguments and the C ABI come from templates/_gemm_common.j2: the same text."""
    sm90_src = render(EVT_FULL.replace("kernel evt", "kernel same"))
    sm100_src = render(EVT_FULL.replace("kernel evt", "kernel same").replace(
        "schedule = cooperative", "schedule = warpspecialized_1sm target = sm100"))
    tail = lambda s: s[s.index("thread_local char g_last_error"):]  # noqa: E731
    strip_info = lambda s: re.sub(r'R"UCUTINFO\(.*\)UCUTINFO"', "", s)  # noqa: E731
    assert strip_info(tail(sm90_src)) == strip_info(tail(sm100_src))
    assert [n.replace("TileShape", "T").replace("CtaT", "T") for n in evt_lines(sm90_src)] == \
        [n.replace("TileShape", "T").replace("CtaT", "T") for n in evt_lines(sm100_src)]
    for name in ("ucut_run", "ucut_workspace_size", "ucut_can_implement", "ucut_info", "ucut_last_error",
                 "ucut_abi_version() { return %d; }" % codegen.ABI_VERSION):
        assert name in sm100_src


def test_templates_cover_both_targets():
    from ucutlass.ir import Target

    gemm = {key: name for key, name in codegen.TEMPLATES.items() if key[0] == "gemm"}  # other families: own tests
    assert gemm == {("gemm", Target.sm90): "sm90_gemm.cu.j2", ("gemm", Target.sm100): "sm100_gemm.cu.j2"}


def test_sm100_rule_violation_is_rejected_before_rendering():
    k = parse(SM100_1SM.replace("tile = 128x128x64   schedule = warpspecialized_1sm",
                                "tile = 256x128x64   schedule = warpspecialized_2sm")).kernel()
    with pytest.raises(CheckError) as e:
        codegen.render(k)
    assert "sm100.2sm-cluster" in str(e.value.diagnostics[0].code)
