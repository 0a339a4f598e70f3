"""ucutlass.arch.sm90: every rule fires on a bad config and stays quiet on a good one; the smem model."""

from __future__ import annotations

import itertools

import pytest

from ucutlass import lang
from ucutlass.arch import sm90
from ucutlass.ir import Schedule

ABD = "a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row"


def kernel(settings: str = "", operands: str = ABD, epilogue: str = ""):
    text = f"kernel k : gemm {{\n  {operands}\n  {settings}\n  {epilogue}\n}}\n"
    return lang.parse(text, "k.ucut").kernel()


def codes(k, extents=None) -> list[str]:
    return [d.code for d in sm90.check_kernel(k, extents)]


# Known good on the H200 (shared/reference/cutlass/README.md): compiled, ran and matched torch.
KNOWN_GOOD = [
    "tile = 128x256x64 cluster = 2x1x1 schedule = cooperative",
    "tile = 64x128x64 schedule = pingpong",
    "tile = 128x128x64 schedule = cooperative scheduler = stream_k",
    "tile = 64x64x128 schedule = pingpong",
    "tile = 256x128x64 cluster = 2x1x1 schedule = cooperative",
    "tile = 128x256x64 cluster = 2x1x1 schedule = cooperative scheduler = stream_k",
]


@pytest.mark.parametrize("settings", KNOWN_GOOD)
def test_known_good_configs_pass(settings):
    assert codes(kernel(settings), {"M": 4096, "N": 14336, "K": 4096}) == []


def test_known_good_with_fused_epilogues():
    epi = "epilogue { bias : bf16[N]  rs : f32[M]  r : bf16[M, N]  d = gelu(acc * rs + bias) + r }"
    assert codes(kernel("tile = 128x256x64 cluster = 2x1x1 schedule = cooperative", epilogue=epi)) == []
    assert codes(kernel("tile = 64x128x64 schedule = pingpong", ABD + " c : f32[M, N] row",
                        "epilogue { d = acc + c }")) == []


@pytest.mark.parametrize("tile, schedule", [
    ((128, 128, 64), Schedule.cooperative), ((256, 128, 64), Schedule.cooperative),
    ((64, 128, 64), Schedule.pingpong), ((192, 128, 64), Schedule.pingpong),
])
def test_resolve_schedule_auto(tile, schedule):
    k = kernel(f"tile = {'x'.join(map(str, tile))}")
    assert sm90.resolve_schedule(k) is schedule
    assert sm90.resolve_schedule(kernel("schedule = warpspecialized")) is Schedule.warpspecialized


# (settings, operands, epilogue, the one code expected, the line of the diagnostic)
BAD = [
    ("schedule = warpspecialized_2sm", ABD, "", "sm90.schedule", 3),
    ("schedule = warpspecialized_1sm", ABD, "", "sm90.schedule", 3),
    ("", "a : bf16[M, K] row  b : f16[N, K] row  d : bf16[M, N] row", "", "sm90.mixed-input", 2),
    ("accum = bf16", ABD, "", "sm90.accum", 3),
    ("accum = f16", ABD, "", "sm90.accum", 3),
    ("tile = 128x128x32", "a : f32[M, K] col  b : f32[N, K] row  d : f32[M, N] row", "", "sm90.tf32-k-major", 2),
    ("tile = 128x128x32", "a : f32[M, K] row  b : f32[K, N] row  d : f32[M, N] row", "", "sm90.tf32-k-major", 2),
    ("tile = 64x128x64 schedule = cooperative", ABD, "", "sm90.cooperative-tile-m", 3),
    ("tile = 192x128x64 schedule = cooperative", ABD, "", "sm90.cooperative-tile-m", 3),
    ("tile = 256x128x64 schedule = pingpong", ABD, "", "sm90.pingpong-tile-m", 3),
    ("tile = 192x128x64", ABD, "", "sm90.pingpong-tile-m", 3),  # auto -> pingpong
    ("tile = 256x64x64 schedule = warpspecialized", ABD, "", "sm90.warpspecialized-tile-m", 3),
    ("tile = 128x204x64", ABD, "", "sm90.tile-n", 3),
    ("tile = 128x272x64", ABD, "", "sm90.tile-n", 3),
    ("tile = 128x4x64", ABD, "", "sm90.tile-n", 3),
    ("tile = 128x24x128", ABD, "", "sm90.tile-n", 3),
    ("tile = 128x8x64 schedule = cooperative", ABD, "", "sm90.smem-layout", 3),
    ("tile = 128x40x64 swap_ab = true", ABD, "", "sm90.smem-layout", 3),
    ("tile = 128x12x64 swap_ab = true", ABD, "", "sm90.tile-n", 3),
    ("swap_ab = true", "a : bf16[B, M, K] row  b : bf16[B, N, K] row  d : bf16[B, M, N] row", "", "sm90.swap-ab", 3),
    ("tile = 128x128x16", ABD, "", "sm90.tile-k", 3),
    ("tile = 128x128x48", ABD, "", "sm90.tile-k", 3),
    ("tile = 128x128x128", "a : f32[M, K] row  b : f32[N, K] row  d : f32[M, N] row", "", "sm90.tile-k", 3),
    ("cluster = 3x1x1", ABD, "", "sm90.cluster-shape", 3),
    ("cluster = 1x1x2", ABD, "", "sm90.cluster-shape", 3),
    ("cluster = 16x1x1", ABD, "", "sm90.cluster-shape", 3),
    ("cluster = 4x4x1", ABD, "", "sm90.cluster-size", 3),
    ("tile = 64x128x64 schedule = pingpong scheduler = stream_k", ABD, "", "sm90.stream-k-schedule", 3),
    ("tile = 64x128x64 scheduler = stream_k", ABD, "", "sm90.stream-k-schedule", 3),
    ("schedule = warpspecialized scheduler = stream_k", ABD, "", "sm90.stream-k-schedule", 3),
    ("stages = 1", ABD, "", "sm90.stages-min", 3),
    ("tile = 128x128x64 stages = 7", ABD, "", "sm90.smem", 3),
    ("tile = 256x240x128", ABD, "", "sm90.smem-auto", 3),
    ("tile = 128x256x64 schedule = pingpong", ABD, "", "sm90.accumulator-registers", 3),
    ("tile = 256x256x64 schedule = cooperative", ABD, "", "sm90.accumulator-registers", 3),
    ("tile = 128x256x64 schedule = warpspecialized", ABD, "", "sm90.accumulator-registers", 3),
    ("split_k = 4", ABD, "", "sm90.split-k-scheduler", 3),
    ("tile = 128x128x64 scheduler = stream_k swizzle = 3", ABD, "", "sm90.swizzle", 3),
    ("alignment = 1", "a : bf16[M, K] row  b : bf16[N, K] row  d : f32[M, N] row", "", "sm90.align-cp-async", 3),
    ("alignment = 4 cluster = 2x1x1", "a : bf16[M, K] row  b : bf16[N, K] row  d : f32[M, N] row", "",
     "sm90.align-cp-async", 3),
    ("alignment = 2", ABD, "epilogue { bias : bf16[N]  d = acc + bias }", "sm90.align-epilogue", 3),
]


@pytest.mark.parametrize("settings, operands, epilogue, code, line", BAD)
def test_each_rule_fires_alone_at_the_setting(settings, operands, epilogue, code, line):
    diags = sm90.check_kernel(kernel(settings, operands, epilogue))
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    (d,) = diags
    assert d.pos.line == line and d.pos.file == "k.ucut" and d.severity == "error"
    assert code in sm90.RULES
    assert d.message


def test_every_rule_has_a_failing_case():
    from test_fp8 import BAD_SM90  # the FP8 rules (scales, fast accumulation) have their cases there

    fp8 = {code for _, code in BAD_SM90}
    assert {code for *_, code, _ in BAD} | {"sm90.align", "sm90.split-k-range"} | fp8 == set(sm90.RULES)


def test_split_k_needs_k_tiles_when_extents_are_known():
    k = kernel("tile = 128x128x64 scheduler = stream_k split_k = 8")
    assert codes(k, {"M": 16, "N": 4096, "K": 4096}) == []
    diags = sm90.check_kernel(k, {"M": 16, "N": 4096, "K": 256})
    assert [d.code for d in diags] == ["sm90.split-k-range"]
    assert diags[0].valid == ("1", "2", "4")


def test_run_time_settings_share_one_build():
    base = kernel("tile = 128x128x64 scheduler = stream_k")
    variant = kernel("tile = 128x128x64 scheduler = stream_k split_k = 4 raster = along_n swizzle = 2")
    assert base.digest() != variant.digest()
    assert base.build_digest() == variant.build_digest()
    assert variant.config_name().endswith("_sk4_ralong_n_sw2")


def test_good_neighbours_of_the_bad_configs_pass():
    for settings, operands in [
        ("accum = f16", "a : f16[M, K] row  b : f16[N, K] row  d : f16[M, N] row"),
        ("tile = 128x128x32", "a : f32[M, K] row  b : f32[N, K] row  d : f32[M, N] row"),
        ("tile = 128x128x64", "a : f32[K, M] col  b : f32[K, N] col  d : f32[M, N] row"),
        ("tile = 128x128x64", "a : bf16[K, M] row  b : bf16[K, N] row  d : bf16[M, N] col"),
        ("tile = 128x16x64", ABD), ("tile = 128x256x32", ABD), ("tile = 64x64x128", ABD),
        ("cluster = 8x1x1", ABD), ("cluster = 2x4x1", ABD), ("cluster = 1x8x1", ABD),
        ("tile = 128x128x64 stages = 6", ABD), ("tile = 128x128x64 stages = 2", ABD),
        ("tile = 256x128x64 schedule = cooperative", ABD), ("tile = 128x64x64 schedule = pingpong", ABD),
        ("tile = 128x128x64 schedule = warpspecialized", ABD),
    ]:
        assert codes(kernel(settings, operands)) == [], settings


def test_messages_name_the_values_and_the_fix():
    (d,) = sm90.check_kernel(kernel("tile = 64x128x64 schedule = cooperative"))
    assert "tile 64x128x64 with schedule cooperative" in d.message and d.valid == ("128x128x64", "256x128x64")
    (d,) = sm90.check_kernel(kernel("tile = 256x128x64 schedule = pingpong"))
    assert "cooperative" in d.message and d.valid == ("64x128x64", "128x128x64")
    (d,) = sm90.check_kernel(kernel("tile = 64x128x64 scheduler = stream_k"))
    assert "auto resolves to pingpong" in d.message and "Ping-pong kernel does not currently support" in d.message
    assert d.pos.line == 3 and d.valid == ("persistent",)
    (d,) = sm90.check_kernel(kernel("schedule = warpspecialized_2sm"))
    assert "an sm100 schedule" in d.message and "target = sm100" in d.message
    assert d.valid == ("auto", "cooperative", "pingpong", "warpspecialized", "cooperative_fp8_fastaccum",
                       "pingpong_fp8_fastaccum", "warpspecialized_fp8_fastaccum")
    (d,) = sm90.check_kernel(kernel("tile = 128x128x48"))
    assert d.valid == ("32", "64", "128")
    (d,) = sm90.check_kernel(kernel("tile = 128x128x8", "a : f32[M, K] row  b : f32[N, K] row  d : f32[M, N]"))
    assert d.valid == ("16", "32", "64")
    (d,) = sm90.check_kernel(kernel("tile = 128x128x64 stages = 7"))
    assert "at most 6 fit" in d.message and d.valid == ("auto", "2", "3", "4", "5", "6")
    (d,) = sm90.check_kernel(kernel("tile = 256x240x128"))
    assert "too large for shared memory" in d.message and "fits 1" in d.message
    (d,) = sm90.check_kernel(kernel("tile = 128x256x64 schedule = pingpong"))
    assert "256 registers per thread" in d.message and "schedule cooperative" in d.message
    assert d.valid == ("64x256x64", "128x240x64")


def test_accumulator_registers_count_the_accumulator_type():
    # f16 accumulators take half the registers: 128x256 pingpong fits with accum = f16 (f16 a and b)
    f16 = "a : f16[M, K] row   b : f16[N, K] row   d : f16[M, N] row"
    assert codes(kernel("tile = 128x256x64 schedule = pingpong accum = f16", f16)) == []
    assert codes(kernel("tile = 128x256x64 schedule = pingpong", f16)) == ["sm90.accumulator-registers"]
    assert codes(kernel("tile = 128x240x64 schedule = warpspecialized")) == []  # 240 of 255: no setmaxnreg


def test_an_sm100_kernel_is_not_checked_by_the_sm90_rules():
    with pytest.raises(ValueError, match="ucutlass.arch.check_kernel"):
        sm90.check_kernel(kernel("target = sm100"))


def test_an_sm100_schedule_skips_the_schedule_dependent_rules():
    got = codes(kernel("schedule = warpspecialized_2sm tile = 64x8x48 cluster = 3x1x1 scheduler = stream_k"))
    assert got == ["sm90.schedule", "sm90.tile-k", "sm90.cluster-shape"]


def test_several_rules_at_once():
    got = codes(kernel("tile = 64x204x48 schedule = cooperative cluster = 4x4x1 scheduler = stream_k accum = bf16"))
    assert got == ["sm90.accum", "sm90.cooperative-tile-m", "sm90.tile-n", "sm90.tile-k", "sm90.cluster-size"]


def test_open_choices_are_refused():
    with pytest.raises(ValueError, match="open choices"):
        sm90.check_kernel(kernel("tile = {128x128x64, 64x128x64}"))


# --- alignment -----------------------------------------------------------------------------------------

def test_alignment_fires_per_operand_with_nearest_extents():
    k = kernel(operands="a : bf16[M, K] row  b : bf16[N, K] row  d : f32[M, N] row")
    diags = sm90.check_kernel(k, {"M": 4095, "N": 4098, "K": 4100})
    assert [d.code for d in diags] == ["sm90.align"] * 3
    a, b, d = diags
    assert a.message.startswith("a: its contiguous dim K = 4100 bf16 elements is 8200 bytes")
    assert a.valid == ("4096", "4104") and a.pos.line == 2
    assert b.message.startswith("b: its contiguous dim K = 4100")
    assert d.message.startswith("d: its contiguous dim N = 4098 f32 elements") and d.valid == ("4096", "4100")
    assert sm90.check_kernel(k, {"M": 4095, "N": 4100, "K": 4096}) == []  # M is never contiguous here


def test_alignment_follows_layouts_and_epilogue_inputs():
    k = kernel(operands="a : bf16[M, K] col  b : bf16[K, N] row  d : bf16[M, N] row",
               epilogue="epilogue { bias : f32[N]  s : bf16[M]  r : bf16[M, N] col  x : f32  "
                        "d = acc * s * x + bias + r }")
    diags = sm90.check_kernel(k, {"M": 1001, "N": 4094, "K": 3})
    assert [d.message.split(":")[0] for d in diags] == ["a", "b", "d", "bias", "s", "r"]
    assert sm90.check_kernel(k, {"M": 1024, "N": 4096, "K": 3}) == []
    assert sm90.check_kernel(k) == [] and sm90.check_kernel(k, {"K": 3}) == []


# --- shared memory ----------------------------------------------------------------------------------------

BIAS = "epilogue { bias : bf16[N]  d = acc + bias }"
CADD = "epilogue { d = acc + c }"
RESID = "epilogue { bias : bf16[N]  rs : f32[M]  r : bf16[M, N] row  d = acc * rs + bias + r }"


def _k(ab, tile, schedule, c=None, d="bf16", epi="", extra="", b_dims="[N, K] row", d_layout="row",
       a_layout="row"):
    ops = f"a : {ab}[M, K] {a_layout}  b : {ab}{b_dims}  d : {d}[M, N] {d_layout}" + (f"  c : {c}[M, N] row"
                                                                                        if c else "")
    return kernel(f"tile = {'x'.join(map(str, tile))} schedule = {schedule} {extra}", ops, epi)


# What nvcc 13.0 with the CUTLASS 4.2 headers printed for these configs (a host program instantiating the
# same CollectiveBuilder types ucutlass emits and printing CollectiveMainloop::DispatchPolicy::Stages,
# sizeof(CollectiveEpilogue::SharedStorage) and sizeof(GemmKernel::SharedStorage)).
MEASURED = [
    (_k("bf16", (128, 256, 64), "cooperative", epi=BIAS, extra="cluster = 2x1x1"), 4, 17408, 214016),
    (_k("bf16", (64, 128, 64), "pingpong"), 9, 9216, 230400),
    (_k("bf16", (128, 128, 64), "cooperative", extra="scheduler = stream_k"), 6, 17408, 214016),
    (_k("bf16", (256, 128, 64), "cooperative"), 4, 17408, 214016),
    (_k("bf16", (128, 128, 64), "cooperative", c="bf16", epi=CADD), 6, 33792, 230400),
    (_k("bf16", (128, 128, 64), "cooperative", epi=RESID), 5, 50176, 214016),
    (_k("bf16", (64, 64, 128), "pingpong"), 6, 9216, 205824),
    (_k("f32", (128, 128, 32), "cooperative", d="f32"), 6, 34816, 231424),
    (_k("bf16", (128, 256, 64), "pingpong", epi=BIAS), 4, 9216, 205824),
    (_k("bf16", (128, 128, 64), "cooperative", c="f32", epi=CADD), 4, 83968, 215040),
    (_k("bf16", (64, 256, 128), "warpspecialized"), 2, 9216, 164352),
    (_k("bf16", (256, 128, 128), "cooperative", d="f32", epi=BIAS), 2, 34816, 231424),
    (_k("bf16", (128, 64, 64), "pingpong", c="bf16", epi=CADD), 8, 17408, 214016),
    (_k("bf16", (128, 128, 64), "cooperative", extra="stages = 7"), 7, 17408, 246784),
    (_k("bf16", (128, 16, 64), "cooperative", epi=RESID), 12, 8704, 229888),
    (_k("bf16", (64, 48, 64), "pingpong", epi=BIAS), 15, 4608, 219904),
    (_k("bf16", (128, 128, 64), "cooperative", d="f32"), 6, 34816, 231424),
    (_k("bf16", (64, 256, 64), "pingpong", d="f16", epi=RESID), 5, 25600, 230400),
    (_k("bf16", (128, 128, 64), "cooperative", c="bf16", d="f32", epi=CADD), 5, 67584, 231424),
    (_k("bf16", (64, 256, 64), "pingpong", extra="stages = 3"), 3, 9216, 132096),
    (_k("f16", (128, 128, 64), "cooperative"), 6, 17408, 214016),
    (_k("bf16", (128, 128, 64), "cooperative", d_layout="col"), 6, 18432, 215040),
    (_k("bf16", (128, 128, 64), "cooperative", b_dims="[K, N] row"), 6, 17408, 214016),
    (_k("bf16", (128, 128, 64), "cooperative", c="bf16", epi=RESID.replace("+ r }", "+ r + c }")),
     5, 66560, 230400),
    (_k("bf16", (64, 128, 64), "pingpong", d_layout="col", epi=BIAS), 9, 10240, 231424),
    (_k("bf16", (128, 256, 64), "cooperative", a_layout="col", epi=BIAS,
        extra="cluster = 2x1x1 scheduler = stream_k"), 4, 17408, 214016),
]


@pytest.mark.parametrize("k, stages, epilogue_bytes, kernel_bytes", MEASURED)
def test_smem_model_matches_cutlass(k, stages, epilogue_bytes, kernel_bytes):
    assert sm90.mainloop_stages(k) == stages
    assert sm90.epilogue_smem_bytes(k) == epilogue_bytes
    assert sm90.smem_bytes(k) == kernel_bytes
    assert sm90.smem_bytes(k, stages) == kernel_bytes


def test_stage_helpers():
    k = kernel("tile = 128x256x64")
    assert sm90.stage_bytes(k) == 128 * 64 * 2 + 256 * 64 * 2
    assert sm90.epilogue_tile(k) == (128, 32)
    assert sm90.epilogue_tile(kernel("tile = 64x48x64")) == (64, 16)
    assert sm90.auto_stages(k) == sm90.mainloop_stages(k) == 4
    assert sm90.mainloop_stages(kernel("tile = 128x256x64 stages = 3")) == 3
    assert sm90.max_stages(kernel("tile = 128x128x64")) == 6


def test_auto_stages_always_fit_and_max_stages_is_tight():
    tiles = [(m, n, k) for m, n, k in itertools.product((64, 128, 256), (16, 64, 128, 192, 256), (32, 64, 128))]
    for tile, schedule, epi in itertools.product(tiles, ("auto", "warpspecialized"), ("", BIAS, RESID)):
        k = _k("bf16", tile, schedule, epi=epi)
        if codes(k):
            continue
        most = sm90.max_stages(k)
        assert sm90.smem_bytes(k, most) <= sm90.SMEM_CAPACITY_BYTES < sm90.smem_bytes(k, most + 1)
        assert sm90.MIN_STAGES <= sm90.auto_stages(k) <= most


def test_constants():
    assert sm90.SMEM_CAPACITY_BYTES == 232448 == 227 * 1024
    assert sm90.TMA_ALIGNMENT_BYTES == 16 and sm90.MIN_STAGES == 2
    assert sm90.COOPERATIVE_TILE_M == (128, 256) and sm90.WARPSPECIALIZED_TILE_M == (64, 128)
    assert sm90.TILE_K_BYTES == (64, 128, 256) and sm90.CLUSTER_EXTENTS == (1, 2, 4, 8)
    assert sm90.MAX_CLUSTER_SIZE == 8 and sm90.TILE_N_MAX == 256 and sm90.TILE_N_MULTIPLE == 8
