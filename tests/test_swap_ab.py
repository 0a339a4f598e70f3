"""Swap AB (``swap_ab``), narrow tile N and split-K / stream-K on them, without nvcc: the setting, its rules, the
C++ a swapped kernel renders for each epilogue kind, the run-time argument packing and what bindings, the tuner
and dispatches make of ``auto``. tests/test_compile_nvcc.py compiles two swapped kernels (tests/kernels/swap_*.ucut);
tests/test_swap_ab_gpu.py runs them on the H200.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from pathlib import Path

import pytest

from ucutlass import arch, codegen, ir, lang
from ucutlass.arch import sm90
from ucutlass.bind import bind
from ucutlass.lang import kernel_block, pin_swap_ab, render_dispatch
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.ir import EpilogueInputKind, Layout, ReductionMode
from ucutlass.problem import load_problem
from ucutlass.runtime import extent_values

ABD = "a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row"
KERNELS = Path(__file__).parent / "kernels"


def kernel(settings: str = "", operands: str = ABD, epilogue: str = "", when: tuple[str, int] | None = None):
    """One gemm kernel from its parts (settings on line 3); ``when``: as a dispatch's kernel with that condition."""
    k = lang.parse(f"kernel k : gemm {{\n  {operands}\n  {settings}\n  {epilogue}\n}}", "k.ucut").kernels[0]
    return dataclasses.replace(k, when=when) if when else k


def codes(k, extents=None) -> list[str]:
    return [d.code for d in arch.check_kernel(k, extents) if d.severity == "error"]


def render(k) -> str:
    return codegen.render(k)


def using(src: str, name: str) -> str:
    """The right-hand side of ``using NAME = …;`` in rendered C++."""
    return re.search(rf"^using {name} = (.*?);", src, re.M | re.S).group(1)


def evt(src: str) -> list[str]:
    return [line for line in src.splitlines() if line.startswith("using EvtNode")]


SWAP = "tile = 128x16x128   schedule = cooperative   swap_ab = true"


# --- the setting -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [("auto", None), ("true", True), ("false", False)])
def test_swap_ab_values(text, value):
    assert kernel(f"swap_ab = {text}").swap_ab is value
    assert kernel().swap_ab is None  # default: auto


def test_swap_ab_bad_value_names_the_valid_ones():
    with pytest.raises(UcutSyntaxError) as e:
        kernel("swap_ab = yes")
    (d,) = e.value.diagnostics
    assert d.code == "bad-value" and d.valid == ("auto", "true", "false")
    assert (d.pos.line, d.pos.column) == (3, 13) and "swap_ab = yes" in d.message


def test_swap_ab_is_a_choice_and_a_build_setting():
    k = kernel("swap_ab = {false, true}")
    assert list(k.choices()) == ["swap_ab"]
    on, off = k.resolve({"swap_ab": True}), k.resolve({"swap_ab": False})
    assert on.build_digest() != off.build_digest()  # not a run-time knob: another binary
    assert on.config_name().endswith("_swapab") and "swap" not in off.config_name()


def test_reduction_mode_is_a_run_time_knob_of_stream_k():
    k = kernel("tile = 128x16x128 scheduler = stream_k swap_ab = true reduction_mode = nondeterministic split_k = 4")
    assert k.reduction_mode is ReductionMode.nondeterministic and codes(k) == []
    assert k.build_digest() == dataclasses.replace(k, reduction_mode=ReductionMode.deterministic).build_digest()
    assert k.config_name().endswith("_sk4_rednondeterministic")
    assert codegen.abi_of(k).knobs == ("split_k", "raster", "swizzle", "reduction_mode")
    assert "reduction_mode = static_cast<cutlass::gemm::kernel::detail::ReductionMode>(knobs[3])" in render(k)
    bad = kernel("tile = 128x16x128 swap_ab = true reduction_mode = nondeterministic")
    (d,) = arch.check_kernel(bad)
    assert d.code == "sm90.split-k-scheduler" and d.valid == ("deterministic",) and d.pos.line == 3


# --- the view CUTLASS builds ---------------------------------------------------------------------------------

def test_transposed_exchanges_a_and_b_and_reads_every_declaration_the_other_way():
    k = kernel(SWAP, "a : bf16[M, K] row   b : bf16[K, N] row   c : f32[M, N] col   d : f32[M, N] row",
               "epilogue { bias : bf16[N]  s : f32[M]  r : f16[M, N] row  p : f32[M, N] row -> p_out  "
               "rs : f32[M] -> rs_out  cm : f32[N] -> cm_out  y = acc * s + bias + r + c  p = y  rs = sum_n(y)  "
               "cm = max_m(y)  d = relu(y) }")
    t = ir.transposed(k)
    assert (t.a.name, t.a.dims, t.a.layout) == ("a", ("K", "M"), Layout.row)  # the declared b, M contiguous
    assert (t.b.name, t.b.dims, t.b.layout) == ("b", ("N", "K"), Layout.row)  # the declared a
    assert t.c.dims == ("N", "M") and t.d.dims == ("N", "M") and t.swap_ab is False
    kinds = {i.name: (i.kind, i.dims) for i in t.epilogue_inputs}
    assert kinds == {"bias": (EpilogueInputKind.col_vector, ("M",)), "s": (EpilogueInputKind.row_vector, ("N",)),
                     "r": (EpilogueInputKind.matrix, ("N", "M"))}
    outs = {o.name: (o.kind, o.dims, o.reduce) for o in t.epilogue_outputs}
    assert outs == {"p": (EpilogueInputKind.matrix, ("N", "M"), None),
                    "rs": (EpilogueInputKind.row_vector, ("N",), "sum"),
                    "cm": (EpilogueInputKind.col_vector, ("M",), "max")}
    assert t.epilogue == k.epilogue and t.tile == k.tile
    assert t.setting_pos["b.dtype"] == k.setting_pos["a.dtype"]  # diagnostics still point at the declaration
    assert ir.transposed(t).a == dataclasses.replace(k.a, name="a")  # twice is the identity (swap_ab aside)


# --- rules ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tile,schedule", [
    ("128x8x128", "cooperative"), ("128x16x128", "cooperative"), ("128x32x128", "cooperative"),
    ("128x64x128", "cooperative"), ("128x16x64", "cooperative"), ("128x48x64", "cooperative"),
    ("256x8x64", "cooperative"), ("256x16x64", "cooperative"), ("64x8x128", "pingpong"), ("64x16x128", "pingpong"),
    ("64x32x64", "warpspecialized"),
])
def test_narrow_tiles_are_legal_with_and_without_swap(tile, schedule):
    for swap in ("true", "false"):
        assert codes(kernel(f"tile = {tile} schedule = {schedule} swap_ab = {swap}")) == [], (tile, swap)


# What nvcc 13.0 with CUTLASS 4.2 said of one stage slice of a swizzled shared-memory tile (a host program slicing
# tile_to_shape(ss_smem_selector<...>(), (rows|run, stages)) as the mainloop and epilogue do): (rows across the
# contiguous dim, run along it, stages, element bytes, compiled). K-major and MN-major tiles alike.
STAGE_SLICE_PROBES = [
    (8, 64, 13, 2, False), (8, 64, 12, 2, True), (8, 64, 14, 2, True), (8, 64, 1, 2, True), (16, 64, 13, 2, True),
    (8, 128, 13, 2, True), (24, 64, 11, 2, False), (24, 64, 12, 2, False), (24, 64, 7, 2, False),
    (32, 64, 13, 2, True), (48, 64, 13, 2, True), (40, 64, 7, 2, False), (8, 32, 13, 2, False), (16, 32, 13, 2, True),
    (24, 32, 12, 2, False), (32, 128, 2, 2, True), (8, 32, 13, 4, False), (24, 32, 13, 4, False),
    (8, 32, 12, 4, True), (16, 32, 13, 4, False), (32, 32, 13, 4, True), (8, 16, 13, 4, False),
    (8, 128, 13, 1, True), (24, 128, 13, 1, True), (56, 64, 4, 1, True), (16, 128, 4, 1, True),
    # MN-major (the run is the N extent, rows the K extent): 64 x {8, 16, 24, 40} bf16
    (64, 8, 13, 2, True), (64, 24, 13, 2, True), (64, 16, 13, 2, True), (64, 40, 13, 2, True), (128, 24, 1, 2, True),
    # a random 90 of (N 8..64, K, stages 1..7, bf16 / f32 / e4m3, K- or MN-major)
    (8, 16, 7, 4, False), (8, 32, 4, 2, True), (8, 64, 4, 1, True), (8, 128, 7, 1, True), (16, 16, 6, 4, True),
    (16, 32, 1, 4, True), (16, 32, 4, 4, True), (16, 32, 7, 2, True), (16, 64, 3, 1, True), (16, 64, 4, 2, True),
    (16, 64, 6, 1, True), (16, 128, 1, 1, True), (16, 128, 2, 2, True), (16, 128, 3, 1, True), (16, 128, 4, 1, True),
    (24, 16, 1, 4, True), (24, 32, 1, 4, True), (24, 32, 3, 2, False), (24, 32, 3, 4, False), (24, 32, 4, 2, False),
    (24, 32, 4, 4, False), (24, 32, 7, 2, False), (24, 32, 7, 4, False), (24, 64, 1, 1, True), (24, 64, 4, 2, False),
    (24, 64, 6, 1, True), (24, 64, 7, 2, False), (24, 128, 3, 2, False), (32, 8, 7, 2, True), (32, 16, 3, 4, True),
    (32, 16, 7, 2, True), (32, 16, 7, 4, True), (32, 24, 4, 2, True), (32, 32, 1, 4, True), (32, 32, 7, 2, True),
    (32, 32, 7, 4, True), (32, 40, 2, 2, True), (32, 40, 6, 2, True), (32, 48, 6, 2, True), (32, 64, 3, 2, True),
    (32, 64, 4, 2, True), (32, 64, 6, 2, True), (32, 64, 7, 1, True), (32, 128, 2, 2, True), (32, 128, 4, 1, True),
    (32, 128, 4, 2, True), (32, 128, 6, 2, True), (32, 128, 7, 2, True), (40, 32, 2, 2, False),
    (40, 32, 7, 2, False), (40, 64, 3, 2, False), (40, 64, 7, 1, True), (40, 128, 1, 2, False),
    (40, 128, 7, 2, False), (48, 16, 1, 4, False), (48, 16, 7, 4, False), (48, 32, 2, 2, True), (48, 32, 4, 2, True),
    (48, 64, 1, 1, True), (48, 64, 3, 2, True), (48, 128, 2, 2, True), (48, 128, 6, 1, True), (56, 16, 7, 4, False),
    (56, 32, 1, 2, False), (56, 64, 4, 1, True), (56, 128, 2, 1, True), (56, 128, 3, 2, False),
    (56, 128, 4, 1, True), (56, 128, 4, 2, False), (56, 128, 6, 1, True), (56, 128, 7, 1, True),
    (64, 16, 7, 2, True), (64, 32, 2, 4, True), (64, 32, 7, 2, True), (64, 40, 2, 2, True), (64, 48, 6, 2, True),
    (64, 64, 2, 1, True), (64, 64, 4, 2, True), (64, 128, 4, 1, True), (64, 128, 6, 2, True), (128, 8, 3, 2, True),
    (128, 16, 6, 2, True), (128, 16, 7, 2, True), (128, 24, 1, 2, True), (128, 24, 2, 2, True),
    (128, 32, 1, 2, True), (128, 40, 2, 2, True), (128, 48, 7, 2, True), (128, 56, 4, 2, True),
]


@pytest.mark.parametrize("rows,run,stages,elem_bytes,compiled", STAGE_SLICE_PROBES)
def test_stage_slices_matches_what_nvcc_said(rows, run, stages, elem_bytes, compiled):
    assert sm90.stage_slices(rows, run, stages, elem_bytes) is compiled


@pytest.mark.parametrize("settings,operands,culprit", [
    # 128x8x64 unswapped: b is 8 rows x 64 per stage, one swizzle atom, and auto gives 13 stages (nvcc: fails)
    ("tile = 128x8x64 schedule = cooperative swap_ab = false", ABD, "b's shared-memory tile is 8 rows x 64 bf16"),
    # swapped 128x40x64: the tokens (CUTLASS's B, the declared a) are 40 rows: 5 atoms (nvcc: fails, any stages)
    ("tile = 128x40x64 schedule = cooperative swap_ab = true", ABD, "a's shared-memory tile is 40 rows x 64 bf16"),
    # unswapped 128x56x64: b's 56 rows are 7 atoms
    ("tile = 128x56x64 schedule = cooperative", ABD, "b's shared-memory tile is 56 rows x 64 bf16"),
])
def test_smem_layout_rejects_tiles_cute_cannot_slice(settings, operands, culprit):
    (d,) = arch.check_kernel(kernel(settings, operands))
    assert d.code == "sm90.smem-layout" and culprit in d.message and "Shape Divisibility Condition" in d.message
    assert d.pos.line == 3 and d.valid
    for fix in d.valid:  # every alternative it lists is legal
        change = fix if fix.startswith("stages") else f"tile = {fix}"
        fixed = re.sub(r"tile = \S+", change if change.startswith("tile") else r"\g<0>", settings)
        fixed += "" if change.startswith("tile") else f" {change}"
        assert codes(kernel(fixed, operands)) == [], (settings, fix)
    if "128x8x64" in settings:
        assert d.valid[0] == "stages = 12" and "128x8x128" in d.valid and "128x16x64" in d.valid


def test_stream_k_and_split_k_on_every_cooperative_tile_small_n_included():
    for n in (8, 16, 32, 64):
        k = kernel(f"tile = 128x{n}x128 schedule = cooperative scheduler = stream_k split_k = 8 swap_ab = true")
        assert codes(k, {"M": 16, "N": 4096, "K": 4096}) == []
    # pingpong still has no stream-K (CUTLASS static_asserts), swapped or not
    pingpong = kernel("tile = 64x16x128 schedule = pingpong scheduler = stream_k swap_ab = true")
    assert codes(pingpong) == ["sm90.stream-k-schedule"]


@pytest.mark.parametrize("n", [4, 12, 20, 100, 264])
def test_tile_n_not_a_multiple_of_8_is_rejected_with_the_valid_values(n):
    (d,) = arch.check_kernel(kernel(f"tile = 128x{n}x64 swap_ab = true"))
    assert d.code == "sm90.tile-n" and d.pos.line == 3 and d.pos.column == 10
    assert "is not a multiple of 8 from 8 to 256, except 24" in d.message and "swap_ab: the tile's M runs along N" in d.message
    assert d.valid[:4] == ("8", "16", "32", "40") and d.valid[-1] == "256"


@pytest.mark.parametrize("operands", [ABD, "a : bf16[M, K] row   b : bf16[K, N] row   d : bf16[M, N] col"])
def test_tile_n_24_is_rejected_for_its_epilogue_fragment(operands):
    """N = 24 is the one multiple of 8 whose auto epilogue tile is 24 wide: 12 accumulators per thread, which nvcc
    13.0 refused on 128x24x128 ("Fragment size does not vectorize properly"); 40 (epilogue tile 8) compiled."""
    for swap in ("true", "false"):
        (d,) = arch.check_kernel(kernel(f"tile = 128x24x128 schedule = cooperative swap_ab = {swap}", operands))
        assert d.code == "sm90.tile-n" and "Fragment size does not vectorize properly" in d.message
    assert codes(kernel("tile = 128x40x64 schedule = cooperative",
                        "a : bf16[M, K] row   b : bf16[K, N] row   d : bf16[M, N] col")) == []


def test_swap_ab_rejects_batch_dims_and_blockwise_scales():
    batched = kernel("swap_ab = true", "a : bf16[B, M, K] row   b : bf16[N, K] row   d : bf16[B, M, N] row")
    (d,) = arch.check_kernel(batched)
    assert d.code == "sm90.swap-ab" and "batch dims [B]" in d.message and d.valid == ("false", "auto")
    assert d.pos.line == 3 and d.pos.column == 13
    fp8 = ("a : f8e4m3[M, K] row   b : f8e4m3[N, K] row   d : bf16[M, N] row   "
           "scale_a : f32[M, K/128] row   scale_b : f32[N/128, K/128] row")
    assert codes(kernel("tile = 128x128x128 swap_ab = true", fp8)) == ["sm90.swap-ab"]
    # auto does not swap what cannot be swapped, even where M is small
    assert arch.resolve_swap_ab(dataclasses.replace(batched, swap_ab=None), m_max=8) is False
    assert codes(kernel("tile = 128x128x128", fp8, when=("M", 16))) == []


def test_per_tensor_fp8_scales_swap():
    fp8 = "a : f8e4m3[M, K] row   b : f8e4m3[N, K] row   d : bf16[M, N] row   scale_a : f32   scale_b : f32"
    k = kernel(SWAP, fp8)
    assert codes(k) == []
    src = render(k)
    # one ScalarBroadcast reads both scale pointers: ptrs a, b, d, scale_a, scale_b
    assert "static_cast<ElementCompute const*>(ptrs[4]), static_cast<ElementCompute const*>(ptrs[3])" in src


def test_swap_ab_on_sm100_and_grouped_is_rejected_and_auto_does_not_swap_there():
    sm100 = kernel("target = sm100 tile = 128x128x64 swap_ab = true")
    assert codes(sm100) == ["sm100.swap-ab"]
    assert arch.resolve_swap_ab(dataclasses.replace(sm100, swap_ab=None), m_max=1) is False
    grouped = lang.parse("kernel g : grouped_gemm { a : bf16[M, K] row  b : bf16[G, N, K] row  d : bf16[M, N] row "
                        "m_sizes : i32[G]  swap_ab = true }").kernel()
    assert codes(grouped) == ["sm90.swap-ab"]
    assert arch.resolve_swap_ab(dataclasses.replace(grouped, swap_ab=None), m_max=1) is False


def test_smem_rules_read_the_swapped_view():
    """The shared-memory model reads the kernel as CUTLASS builds it: swapped, a bias [N] is a column broadcast
    (registers, no smem: the swapped kernel with it takes what the one without does) and d a column-major staging
    tile (aligned to the 128-byte swizzle of its 256-byte M run)."""
    bias = "epilogue { bias : bf16[N]  d = acc + bias }"
    plain = kernel("tile = 128x16x128 schedule = cooperative swap_ab = false", epilogue=bias)
    bare = kernel("tile = 128x16x128 schedule = cooperative swap_ab = false")
    view = sm90.mma_view(dataclasses.replace(plain, swap_ab=True))
    assert view.epilogue_inputs[0].kind is EpilogueInputKind.col_vector and view.d.contiguous_dim == "M"
    assert sm90.epilogue_smem_bytes(view) == sm90.epilogue_smem_bytes(sm90.mma_view(
        dataclasses.replace(bare, swap_ab=True)))  # swapped, the bias takes none
    assert sm90.epilogue_smem_bytes(view) % 1024 == 0 and sm90.auto_stages(view) >= 2


# --- rendered C++ of swapped kernels, one epilogue kind at a time ---------------------------------------------

def test_plain_swapped_kernel_exchanges_operands_and_writes_d_column_major():
    src = render(kernel(SWAP))
    assert using(src, "LayoutA") == "cutlass::layout::RowMajor"  # the weight [N, K] row: K-major A
    assert using(src, "LayoutB") == "cutlass::layout::ColumnMajor"  # the tokens [M, K] row: K-major B
    assert using(src, "LayoutD") == "cutlass::layout::ColumnMajor"  # d [M, N] row = Dᵀ column-major
    assert using(src, "TileShape") == "Shape<_128, _16, _128>"
    # CUTLASS's A is ptrs[1] (b), its B ptrs[0] (a); extents arrive as N, M, K
    assert "{static_cast<ElementA const*>(ptrs[1]), stride_a, static_cast<ElementB const*>(ptrs[0]), stride_b}" in src
    assert "static_cast<ElementD*>(ptrs[2]), stride_d}" in src
    assert "swap AB: CUTLASS computes Dᵀ = B·Aᵀ" in src and "extents: N, M, K (CUTLASS's M, N, K)" in src
    info = json.loads(re.search(r'R"UCUTINFO\((.*)\)UCUTINFO"', src).group(1))
    assert info["swap_ab"] is True and info["extents"] == ["N", "M", "K"] and info["ptrs"] == ["a", "b", "d"]


@pytest.mark.parametrize("decl,node,stride", [
    ("bias : bf16[N]", "Sm90ColBroadcast", "Stride<_1, _0, int64_t>"),  # one value per column n -> per CUTLASS row
    ("bias : bf16[M]", "Sm90RowBroadcast", "Stride<_0, _1, int64_t>"),  # one value per row m -> per CUTLASS column
])
def test_broadcasts_change_sides(decl, node, stride):
    plain_node = {"Sm90ColBroadcast": "Sm90RowBroadcast", "Sm90RowBroadcast": "Sm90ColBroadcast"}[node]
    epi = f"epilogue {{ {decl}  d = gelu(acc + bias) }}"
    swapped, plain = render(kernel(SWAP, epilogue=epi)), render(kernel(SWAP.replace("true", "false"), epilogue=epi))
    assert f"fusion::{node}<0, TileShape, cutlass::bfloat16_t, ElementCompute, {stride}>" in swapped
    assert f"fusion::{plain_node}<" in plain and f"fusion::{node}<" not in plain
    assert "cutlass::epilogue::thread::GELU," in swapped  # activations unchanged
    assert "static_cast<cutlass::bfloat16_t const*>(ptrs[3])" in swapped  # bias is ptrs[3]: a, b, d, bias


@pytest.mark.parametrize("layout,swapped_layout", [("row", "ColumnMajor"), ("col", "RowMajor")])
def test_residual_c_and_aux_inputs_change_layout(layout, swapped_layout):
    ops = f"a : bf16[M, K] row   b : bf16[N, K] row   c : bf16[M, N] {layout}   d : bf16[M, N] {layout}"
    src = render(kernel(SWAP, ops, f"epilogue {{ r : f16[M, N] {layout}  d = acc + c + r }}"))
    assert using(src, "LayoutC") == using(src, "LayoutD") == f"cutlass::layout::{swapped_layout}"
    assert f"AuxLoadDescriptor<EpiDesc, cutlass::layout::{swapped_layout}, cutlass::half_t>" in src
    assert "static_cast<ElementC const*>(ptrs[2])" in src and "static_cast<ElementD*>(ptrs[3])" in src
    assert "static_cast<cutlass::half_t const*>(ptrs[4])" in src  # r after a, b, c, d
    assert "Sm90SrcFetch<ElementC>" in src


def test_extra_outputs_change_layout_and_reductions_change_axis():
    epi = ("epilogue { bias : bf16[N]  pre : bf16[M, N] row -> p  rmax : f32[M] -> rm  csum : f32[N] -> cs\n"
           "  pre = acc + bias   rmax = max_n(pre)   csum = sum_m(pre)   d = silu(pre) }")
    swapped = render(kernel(SWAP, epilogue=epi))
    plain = render(kernel(SWAP.replace("true", "false"), epilogue=epi))
    assert "AuxStoreDescriptor<EpiDesc, cutlass::layout::ColumnMajor, cutlass::bfloat16_t>" in swapped
    assert "AuxStoreDescriptor<EpiDesc, cutlass::layout::RowMajor, cutlass::bfloat16_t>" in plain
    # rmax (one per row m, over n) is CUTLASS's reduction over its M: a row reduction; csum the other way
    assert re.search(r"Sm90RowReduction<UcutMaximum, .*Stride<_0, _1, int64_t>>;  // rmax", swapped)
    assert re.search(r"Sm90ColReduction<cutlass::plus, .*Stride<_1, _0, int64_t>>;  // csum", swapped)
    assert re.search(r"Sm90ColReduction<UcutMaximum, .*// rmax", plain)
    assert re.search(r"Sm90RowReduction<cutlass::plus, .*// csum", plain)
    # output pointers: a, b, d, bias, pre, rmax, csum
    assert "{ptrs[5], -cutlass::platform::numeric_limits<ElementCompute>::infinity(), {}}" in swapped
    assert "{ptrs[6], ElementCompute(0), {}}" in swapped
    assert "static_cast<cutlass::bfloat16_t*>(ptrs[4])" in swapped
    assert "Sm90TopologicalVisitor" in swapped and "SiLu" in swapped


def test_k_by_n_weight_and_column_major_a_swap_their_majorness():
    src = render(kernel(SWAP, "a : bf16[M, K] col   b : bf16[K, N] row   d : bf16[M, N] row"))
    assert using(src, "LayoutA") == "cutlass::layout::ColumnMajor"  # b [K, N] row: N contiguous = CUTLASS M-major A
    assert using(src, "LayoutB") == "cutlass::layout::RowMajor"  # a [M, K] col: M contiguous = CUTLASS N-major B


def test_fallback_alignment_swaps_too():
    ops = "a : bf16[M, K] row   b : bf16[N, K] row   c : bf16[M, N] row   d : bf16[M, N] row"
    src = render(kernel("tile = 128x16x64 schedule = cooperative alignment = 4 swap_ab = true", ops,
                        "epilogue { d = acc * 0.5 + c }"))
    assert "KernelCpAsyncWarpSpecializedCooperative" in src and "NoSmemWarpSpecialized" in src
    assert using(src, "LayoutD") == "cutlass::layout::ColumnMajor"


# --- the sample: many accepted configurations render, two compile (tests/test_compile_nvcc.py) ----------------

EPILOGUES = {
    "plain": ("", ABD),
    "bias_gelu": ("epilogue { bias : bf16[N]  d = gelu_tanh(acc + bias) }", ABD),
    "rowscale": ("epilogue { s : f32[M]  alpha : f32 = 0.5  d = acc * s * alpha }", ABD),
    "residual_c": ("epilogue { d = acc + c }",
                   "a : bf16[M, K] row   b : bf16[N, K] row   c : bf16[M, N] row   d : bf16[M, N] row"),
    "aux_in_col": ("epilogue { r : bf16[M, N] col  d = relu(acc + r) }", ABD),
    "outputs": ("epilogue { pre : bf16[M, N] row -> p  rs : f32[M] -> r  cm : f32[N] -> q  pre = acc  "
                "rs = sum_n(pre)  cm = max_m(pre)  d = sigmoid(pre) }", ABD),
    "f32_d_col": ("", "a : bf16[M, K] row   b : bf16[N, K] row   d : f32[M, N] col"),
}
TILES = ["128x8x128", "128x16x128", "128x32x64", "128x64x128", "256x16x64", "64x8x128", "64x32x64", "128x48x64"]


def sample():
    for (name, (epi, ops)), tile, sched, cluster in itertools.product(EPILOGUES.items(), TILES,
                                                                      ("persistent", "stream_k"), ("1x1x1", "2x1x1")):
        schedule = "cooperative" if tile[0] in "12" else "pingpong"
        yield name, f"tile = {tile} cluster = {cluster} schedule = {schedule} scheduler = {sched} swap_ab = true", ops, epi


def test_a_sample_of_accepted_swapped_configurations_renders():
    accepted = rejected = 0
    for name, settings, ops, epi in sample():
        k = kernel(settings, ops, epi)
        errors = codes(k)
        if errors:  # only what CUTLASS cannot build: stream-K on pingpong
            assert errors == ["sm90.stream-k-schedule"] and "pingpong" in settings, (settings, errors)
            rejected += 1
            continue
        assert sm90.stage_slices  # every accepted tile slices by stage (the rule ran)
        src = render(k)
        assert using(src, "TileShape") == "Shape<_{}, _{}, _{}>".format(*k.tile)
        assert "swap AB" in src and "ptrs[1]), stride_a" in src, (name, settings)
        accepted += 1
    assert accepted >= 150 and rejected == len(EPILOGUES) * 2 * 2  # two pingpong tiles x stream_k x 2 clusters


def test_ci_kernels_are_swapped_narrow_and_legal():
    for name in ("swap_bias_gelu_n16.ucut", "swap_residual_outputs_stream_k.ucut"):
        k = lang.parse_file(KERNELS / name).kernel()
        assert arch.resolve_swap_ab(k) and k.tile[1] <= 32 and codes(k) == []


# --- the runtime's argument packing ---------------------------------------------------------------------------

def test_extents_are_packed_in_the_order_the_abi_names():
    swapped, plain = codegen.abi_of(kernel(SWAP)), codegen.abi_of(kernel(SWAP.replace("true", "false")))
    assert swapped.extents == ("N", "M", "K") and plain.extents == ("M", "N", "K")
    assert swapped.ptr_names == plain.ptr_names == ("a", "b", "d")  # pointers as declared either way
    assert extent_values(swapped, 7, 4096, 1000) == [4096, 7, 1000]
    assert extent_values(plain, 7, 4096, 1000) == [7, 4096, 1000]
    batched = codegen.abi_of(kernel("", "a : bf16[B, M, K] row   b : bf16[N, K] row   d : bf16[B, M, N] row"))
    assert extent_values(batched, 3, 64, 32, 5) == [3, 64, 32, 5, 3 * 32, 0, 3 * 64]  # b shared: stride 0
    assert extent_values(batched, 3, 64, 32, 5, {"a": 999}) == [3, 64, 32, 5, 999, 0, 192]


def test_runtime_checks_the_swapped_build_by_its_canonical_digest():
    """ucut_info's digest is that of arch.canonical(kernel): auto written out as resolved, so a dispatch kernel that
    swaps (auto under when M <= 64) and the same settings alone (no swap) are two builds, each refused for the other."""
    decode = kernel("tile = 128x16x128 schedule = cooperative", when=("M", 16))
    alone = dataclasses.replace(decode, when=None)
    digest = lambda k: json.loads(re.search(r'R"UCUTINFO\((.*)\)UCUTINFO"', render(k)).group(1))["digest"]  # noqa
    assert digest(decode) == arch.canonical(decode).build_digest() != digest(alone)
    assert digest(alone) == arch.canonical(alone).build_digest()


# --- auto: dispatch ranges, bindings, the tuner ---------------------------------------------------------------

def test_auto_follows_the_dispatch_range():
    text = (f"kernel small : gemm when M <= 64 {{ {ABD} tile = 128x64x128 }}\n"
            f"kernel mid : gemm when M <= 128 {{ {ABD} tile = 128x64x128 }}\n"
            f"kernel large : gemm {{ {ABD} tile = 128x64x128 }}")
    small, mid, large = lang.parse(text).dispatch()
    assert [arch.resolve_swap_ab(k) for k in (small, mid, large)] == [True, False, False]
    assert "swap AB" in render(small) and "swap AB" not in render(mid)
    assert arch.check(lang.parse(text)) == []


def test_auto_resolution_makes_auto_and_its_value_one_kernel():
    k = kernel("tile = 128x64x128 swap_ab = {auto, false, true}")
    legal, _ = arch.legal_combinations(k)
    assert len(legal) == 3 and len(arch.distinct_combinations(k, legal)) == 2  # auto is false here


def _problem(tmp_path: Path, ms) -> Path:
    folder = tmp_path / f"decode_{max(ms)}"
    folder.mkdir()
    definition = {"name": folder.name, "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256},
                                               "K": {"type": "const", "value": 512}},
                  "inputs": {"x": {"shape": ["M", "K"], "dtype": "bfloat16"},
                             "w": {"shape": ["N", "K"], "dtype": "bfloat16"}},
                  "outputs": {"y": {"shape": ["M", "N"], "dtype": "bfloat16"}},
                  "reference": "import torch\n\ndef run(x, w):\n    return x @ w.T\n"}
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"m{m}", "axes": {"M": m}, "inputs": {"x": {"type": "random"}, "w": {"type": "random"}}})
        + "\n" for m in ms))
    return folder


SPEC = """kernel lin : gemm {
  a : bf16[M, K] row <- x   b : bf16[N, K] row <- w   d : bf16[M, N] row -> y
  tile = {128x16x128, 64x128x64}   swap_ab = {auto, false}
}"""


def test_a_binding_whose_workloads_all_have_small_m_swaps_auto(tmp_path):
    decode, mixed = load_problem(_problem(tmp_path, [1, 7, 64])), load_problem(_problem(tmp_path, [1, 4096]))
    k = lang.parse(SPEC).kernel().resolve({"tile": (128, 16, 128), "swap_ab": None})
    assert bind(k, decode).kernel.swap_ab is True
    assert bind(k, mixed).kernel.swap_ab is None  # auto stays auto: a when may still decide it
    assert bind(dataclasses.replace(k, swap_ab=False), decode).kernel.swap_ab is False


def test_the_tuner_builds_what_a_bound_call_loads(tmp_path):
    from ucutlass.search import plan

    problem = load_problem(_problem(tmp_path, [1, 7, 64]))
    p = plan(problem, lang.parse(SPEC), source_file="spec.ucut")
    # auto and false are two kernels for these workloads (auto swaps); one is 64x128x64 swapped and not
    built = {(p.space.concrete(params).tile, p.space.concrete(params).swap_ab) for params in p.legal}
    assert built == {((128, 16, 128), True), ((128, 16, 128), False), ((64, 128, 64), True), ((64, 128, 64), False)}
    for params in p.legal:
        program = p.space.concrete_program(params)
        assert bind(program.kernel(), problem).kernel == p.space.concrete(params)


def test_a_tuned_kernel_keeps_its_swap_ab_in_a_dispatch():
    source = f"kernel g : gemm {{ {ABD}\n  tile = 128x64x128 }}"
    block = kernel_block(source, "g")
    pinned = pin_swap_ab(block, False)
    assert "swap_ab = false" in pinned
    text = render_dispatch([(pinned, "g_m64", ("M", 64)), (block, "g", None)])
    small, large = lang.parse(text).dispatch()
    assert small.swap_ab is False and arch.resolve_swap_ab(small) is False  # measured without swap: stays so
    assert pin_swap_ab(block.replace("tile = 128x64x128", "tile = 128x64x128 swap_ab = auto"), True).count(
        "swap_ab = true") == 1
    written = block.replace("tile = 128x64x128", "tile = 128x64x128 swap_ab = false")
    assert pin_swap_ab(written, True) == written  # an explicit value is what was measured


def test_check_reports_a_binding_that_swaps(tmp_path, capsys):
    from ucutlass.cli import main

    folder = _problem(tmp_path, [1, 16])
    spec = tmp_path / "lin.ucut"
    spec.write_text(SPEC.replace("{128x16x128, 64x128x64}", "128x16x128").replace("{auto, false}", "auto"))
    assert main(["check", str(spec), "--problem", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "swap_ab = auto is true for these workloads" in out and "alignment" not in out


def test_open_swap_ab_is_refused_before_rendering():
    with pytest.raises(CheckError, match="open choices"):
        render(kernel("swap_ab = {true, false}"))
