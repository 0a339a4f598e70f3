"""ucutlass.arch.sm100 and the target dispatcher: every rule fires alone on a bad config and stays quiet on a
good one; the shared-memory model matches what nvcc printed for the SM100 builders."""

from __future__ import annotations

import itertools

import pytest

from ucutlass import arch, lang
from ucutlass.arch import sm90, sm100
from ucutlass.ir import Schedule, Target

ABD = "a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row"


def kernel(settings: str = "", operands: str = ABD, epilogue: str = "", target: str = "sm100"):
    text = f"kernel k : gemm {{\n  target = {target}\n  {operands}\n  {settings}\n  {epilogue}\n}}\n"
    return lang.parse(text, "k.ucut").kernel()


def codes(k, extents=None) -> list[str]:
    return [d.code for d in sm100.check_kernel(k, extents)]


# shared/reference/cutlass/sm100_gemm_bias_gelu.cu and sm100_2sm_gemm_bias_gelu.cu (compiled, not run), the
# tests/kernels/sm100_*.ucut files, and CUTLASS's example 74 (2SM 256x128x64 with the stream-K scheduler).
KNOWN_GOOD = [
    "tile = 128x128x64 schedule = warpspecialized_1sm",
    "tile = 256x128x64 cluster = 2x1x1 schedule = warpspecialized_2sm",
    "tile = 256x128x64 cluster = 2x1x1 schedule = warpspecialized_2sm scheduler = stream_k",
    "tile = 64x128x64",
    "tile = 128x256x64 cluster = 2x2x1",
    "tile = 128x128x64 cluster = 1x2x1 scheduler = stream_k split_k = 2",
]


@pytest.mark.parametrize("settings", KNOWN_GOOD)
def test_known_good_configs_pass(settings):
    epi = "epilogue { bias : bf16[N]  d = gelu(acc + bias) }"
    assert codes(kernel(settings), {"M": 4096, "N": 14336, "K": 4096}) == []
    assert codes(kernel(settings, epilogue=epi)) == []


@pytest.mark.parametrize("tile, cluster, schedule", [
    ("128x128x64", "1x1x1", Schedule.warpspecialized_1sm), ("256x128x64", "1x1x1", Schedule.warpspecialized_1sm),
    ("256x128x64", "2x1x1", Schedule.warpspecialized_2sm), ("128x128x64", "4x1x1", Schedule.warpspecialized_2sm),
    ("64x128x64", "2x1x1", Schedule.warpspecialized_1sm), ("128x128x64", "1x2x1", Schedule.warpspecialized_1sm),
])
def test_resolve_schedule_auto_is_cutlass_kernel_schedule_auto(tile, cluster, schedule):
    k = kernel(f"tile = {tile} cluster = {cluster}")
    assert sm100.resolve_schedule(k) is schedule is arch.resolve_schedule(k)


def test_cta_tile_halves_m_for_2sm():
    assert sm100.cta_tile(kernel("tile = 256x128x64 cluster = 2x1x1")) == (128, 128, 64)
    assert sm100.cta_tile(kernel("tile = 128x64x64 cluster = 2x1x1")) == (64, 64, 64)
    assert sm100.cta_tile(kernel("tile = 128x64x64")) == (128, 64, 64)


F32 = "a : f32[M, K] row   b : f32[N, K] row   d : f32[M, N] row"
CF32 = "a : bf16[M, K] row   b : bf16[N, K] row   c : f32[M, N] row   d : f32[M, N] row"

# (settings, operands, epilogue, the one code expected); every diagnostic is on line 4 (the settings)
# except the dtype ones, on line 3 (the operands).
BAD = [
    ("alignment = 4", ABD, "", "sm100.align-tma"),
    ("schedule = cooperative", ABD, "", "sm100.schedule"),
    ("schedule = pingpong tile = 64x128x64", ABD, "", "sm100.schedule"),
    ("", "a : bf16[M, K] row  b : f16[N, K] row  d : bf16[M, N] row", "", "sm100.mixed-input"),
    ("accum = f16", ABD, "", "sm100.accum"),
    ("tile = 256x128x64 schedule = warpspecialized_1sm", ABD, "", "sm100.tile-m"),
    ("tile = 192x128x64", ABD, "", "sm100.tile-m"),  # auto -> 1sm
    ("tile = 64x128x64 cluster = 2x1x1 schedule = warpspecialized_2sm", ABD, "", "sm100.tile-m"),
    ("tile = 128x200x64", ABD, "", "sm100.tile-n"),
    ("tile = 128x272x64", ABD, "", "sm100.tile-n"),
    ("swap_ab = true", ABD, "", "sm100.swap-ab"),
    ("tile = 128x128x48", ABD, "", "sm100.tile-k"),
    ("tile = 256x128x64 schedule = warpspecialized_2sm", ABD, "", "sm100.2sm-cluster"),
    ("tile = 256x128x64 cluster = 1x2x1 schedule = warpspecialized_2sm", ABD, "", "sm100.2sm-cluster"),
    ("cluster = 3x1x1", ABD, "", "sm100.cluster-shape"),
    ("cluster = 1x1x2", ABD, "", "sm100.cluster-shape"),
    ("cluster = 4x4x1", ABD, "", "sm100.cluster-size"),
    ("tile = 128x80x64 schedule = warpspecialized_1sm", ABD, "", "sm100.epilogue-tile"),
    ("tile = 256x96x32 cluster = 2x1x1", "a : f32[M, K] row  b : f32[K, N] row  d : f32[M, N] row", "",
     "sm100.tf32-mn-major"),
    ("split_k = 4", ABD, "", "sm100.split-k-scheduler"),
    ("scheduler = stream_k swizzle = 3", ABD, "", "sm100.swizzle"),
    ("stages = 1", ABD, "", "sm100.stages-min"),
    ("tile = 128x128x64 schedule = warpspecialized_1sm stages = 7", ABD, "", "sm100.smem"),
    ("tile = 128x256x128 schedule = warpspecialized_1sm", CF32, "epilogue { d = acc + c }", "sm100.smem-auto"),
]


@pytest.mark.parametrize("settings, operands, epilogue, code", BAD)
def test_each_rule_fires_alone_at_the_setting(settings, operands, epilogue, code):
    diags = sm100.check_kernel(kernel(settings, operands, epilogue))
    assert [d.code for d in diags] == [code], [d.format() for d in diags]
    (d,) = diags
    assert d.pos.line == (3 if code in ("sm100.mixed-input",) else 4) and d.pos.file == "k.ucut"
    assert d.severity == "error" and d.message and code in sm100.RULES


def test_every_rule_has_a_failing_case():
    from test_fp8 import BAD_SM100  # the block-scaled (NVFP4, MXFP8) rules have their cases there

    scaled = {code for _, code in BAD_SM100}
    assert {code for *_, code in BAD} | {"sm100.align", "sm100.split-k-range"} | scaled == set(sm100.RULES)


def test_extent_rules():
    k = kernel("scheduler = stream_k split_k = 8")
    assert codes(k, {"M": 16, "N": 4096, "K": 4096}) == []
    assert codes(k, {"M": 16, "N": 4096, "K": 256}) == ["sm100.split-k-range"]
    (d,) = sm100.check_kernel(kernel(), {"M": 64, "N": 4096, "K": 4100})[:1]
    assert d.code == "sm100.align" and d.valid == ("4096", "4104")


def test_good_neighbours_of_the_bad_configs_pass():
    for settings, operands in [
        ("accum = f16", "a : f16[M, K] row  b : f16[N, K] row  d : f16[M, N] row"),
        ("tile = 128x128x32", F32), ("tile = 128x128x32", "a : f32[K, M] row  b : f32[K, N] row  d : f32[M, N] row"),
        ("tile = 256x128x32 cluster = 2x1x1", "a : f32[M, K] row  b : f32[K, N] row  d : f32[M, N] row"),
        ("tile = 128x16x64", ABD), ("tile = 64x48x64", ABD), ("tile = 128x96x64", ABD), ("tile = 64x64x128", ABD),
        ("tile = 128x16x64 cluster = 2x1x1 schedule = warpspecialized_2sm", ABD),
        ("tile = 256x256x64 cluster = 8x1x1", ABD), ("cluster = 2x4x1", ABD), ("cluster = 1x8x1", ABD),
        ("tile = 128x128x64 schedule = warpspecialized_1sm stages = 6", ABD),
        ("tile = 128x128x64 stages = 2", ABD), ("tile = 128x256x128 schedule = warpspecialized_1sm", ABD),
    ]:
        assert codes(kernel(settings, operands)) == [], settings


def test_messages_name_the_values_and_the_fix():
    (d,) = sm100.check_kernel(kernel("schedule = cooperative"))
    assert "an sm90 schedule" in d.message
    assert d.valid == ("auto", "warpspecialized_1sm", "warpspecialized_2sm")
    (d,) = sm100.check_kernel(kernel("tile = 192x128x64"))
    assert "auto resolves to warpspecialized_1sm" in d.message and d.valid == ("64", "128")
    (d,) = sm100.check_kernel(kernel("tile = 256x128x64 schedule = warpspecialized_2sm"))
    assert "cluster M must be even" in d.message and "2x1x1" in d.valid
    (d,) = sm100.check_kernel(kernel("tile = 128x80x64 schedule = warpspecialized_1sm"))
    assert "32-column subtiles" in d.message and "80" not in d.valid and {"64", "96", "128"} <= set(d.valid)
    (d,) = sm100.check_kernel(kernel("tile = 128x128x64 schedule = warpspecialized_1sm stages = 7"))
    assert "at most 6 fit" in d.message and d.valid == ("auto", "2", "3", "4", "5", "6")


def test_several_rules_at_once():
    got = codes(kernel("tile = 64x200x48 cluster = 4x4x1 schedule = warpspecialized_2sm accum = bf16"))
    assert got == ["sm100.accum", "sm100.tile-m", "sm100.tile-n", "sm100.tile-k", "sm100.cluster-size"]


def test_open_choices_and_other_targets_are_refused():
    with pytest.raises(ValueError, match="open choices"):
        sm100.check_kernel(kernel("tile = {128x128x64, 64x128x64}"))
    with pytest.raises(ValueError, match="ucutlass.arch.check_kernel"):
        sm100.check_kernel(kernel(target="sm90"))


# --- the dispatcher --------------------------------------------------------------------------------------

def test_dispatcher_picks_the_rules_of_the_target():
    assert arch.rules_for(kernel()) is sm100 and arch.rules_for(kernel(target="sm90")) is sm90
    assert arch.TARGET_RULES == {Target.sm90: sm90, Target.sm100: sm100}
    assert [d.code for d in arch.check_kernel(kernel("schedule = cooperative"))] == ["sm100.schedule"]
    assert [d.code for d in arch.check_kernel(kernel("schedule = warpspecialized_1sm", target="sm90"))] == \
        ["sm90.schedule"]
    assert set(sm90.RULES) | set(sm100.RULES) <= set(arch.RULES)  # plus the other families' rules
    with pytest.raises(ValueError, match="target is an open choice"):
        arch.rules_for(lang.parse(f"kernel k : gemm {{ target = {{sm90, sm100}} {ABD} }}").kernel())


def test_dsl_check_covers_a_choice_of_targets():
    text = f"""kernel k : gemm {{ {ABD}
      target = {{sm90, sm100}}   tile = 256x128x64   cluster = 2x1x1
      schedule = {{cooperative, warpspecialized_2sm}} }}"""
    legal, rejected = arch.legal_combinations(lang.parse(text).kernel())
    assert legal == [{"target": Target.sm90, "schedule": Schedule.cooperative},
                     {"target": Target.sm100, "schedule": Schedule.warpspecialized_2sm}]
    assert [[d.code for d in errs] for _, errs in rejected] == [["sm90.schedule"], ["sm100.schedule"]]
    (note,) = arch.check(lang.parse(text))
    assert note.severity == "note" and "pass the sm90/sm100 rules" in note.message


# --- shared memory ----------------------------------------------------------------------------------------

BIAS = "epilogue { bias : bf16[N]  d = gelu(acc + bias) }"
RESID = "epilogue { bias : bf16[N]  rs : f32[M]  r : bf16[M, N] row  d = acc * rs + bias + r }"
CADD = "epilogue { d = acc + c }"
C16 = "a : bf16[M, K] row  b : bf16[N, K] row  c : bf16[M, N] row  d : bf16[M, N] row"
DCOL = "a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] col"
RCOL = "epilogue { r : bf16[M, N] col  d = acc + r }"

# What nvcc 13.0 with the CUTLASS 4.2 headers printed for these configs: a host program instantiating the
# types ucutlass renders (templates/sm100_gemm.cu.j2) and printing CollectiveMainloop::DispatchPolicy::Stages,
# sizeof(CollectiveEpilogue::SharedStorage), sizeof(GemmKernel::SharedStorage), the epilogue subtile (M, N),
# the epilogue's StagesC and StagesD and GemmKernel::AccumulatorPipelineStageCount.
MEASURED = [
    (kernel("tile = 128x128x64 schedule = warpspecialized_1sm", ABD, BIAS), 6, 17408, 214016, (128, 32), 4, 2, 4),
    (kernel("tile = 256x128x64 cluster = 2x1x1", ABD, BIAS), 8, 17408, 214016, (128, 32), 4, 2, 4),
    (kernel("tile = 64x128x64"), 8, 18432, 215040, (64, 64), 2, 2, 4),
    (kernel("tile = 128x256x64 schedule = warpspecialized_1sm", ABD, RESID), 3, 50176, 197632, (128, 32), 4, 2, 2),
    (kernel("tile = 128x128x64 cluster = 2x1x1 schedule = warpspecialized_2sm", ABD, RESID),
     12, 33792, 230400, (64, 64), 2, 2, 4),
    (kernel("tile = 256x256x64 cluster = 2x1x1", C16, CADD), 5, 67584, 231424, (128, 64), 4, 2, 2),
    (kernel("tile = 128x64x64 schedule = warpspecialized_1sm",
            "a : bf16[M, K] row  b : bf16[N, K] row  c : f32[M, N] row  d : bf16[M, N] row", CADD),
     8, 33792, 230400, (128, 16), 4, 2, 4),
    (kernel("tile = 128x128x32 schedule = warpspecialized_1sm", F32), 6, 34816, 231424, (128, 32), 4, 2, 4),
    (kernel("tile = 128x192x64 schedule = warpspecialized_1sm stages = 4", DCOL, BIAS),
     4, 18432, 182272, (128, 32), 4, 2, 2),
    (kernel("tile = 256x128x128 cluster = 2x2x1 scheduler = stream_k",
            "a : bf16[K, M] row  b : bf16[K, N] row  d : f32[M, N] row"), 4, 34816, 231424, (128, 32), 4, 2, 4),
    (kernel("tile = 64x256x64 schedule = warpspecialized_1sm",
            "a : f16[M, K] row  b : f16[N, K] row  d : f16[M, N] row", RESID), 4, 51200, 215040, (64, 64), 4, 2, 4),
    (kernel("tile = 128x64x64 cluster = 2x1x1 schedule = warpspecialized_2sm", C16, CADD),
     17, 12800, 222208, (64, 32), 3, 2, 4),
    (kernel("tile = 128x256x64 cluster = 2x1x1 schedule = warpspecialized_2sm", ABD, RESID),
     7, 50176, 222208, (64, 64), 4, 2, 4),
    (kernel("tile = 128x256x64 cluster = 2x1x1 schedule = warpspecialized_2sm", DCOL, RCOL),
     7, 50176, 222208, (64, 64), 4, 2, 4),
    (kernel("tile = 128x128x32 schedule = warpspecialized_1sm", F32.replace("d : f32[M, N] row", "d : f32[M, N] col")),
     6, 33792, 230400, (128, 32), 4, 2, 4),
    (kernel("tile = 128x128x64 schedule = warpspecialized_1sm", CF32, CADD), 6, 33792, 230400, (128, 16), 4, 2, 4),
    (kernel("tile = 256x128x32 cluster = 2x1x1", "a : f32[K, M] row  b : f32[K, N] row  d : f32[M, N] row"),
     8, 34816, 231424, (128, 32), 4, 2, 4),
    (kernel("tile = 64x48x64 schedule = warpspecialized_1sm", ABD, BIAS), 15, 6656, 221952, (64, 48), 1, 1, 4),
    (kernel("tile = 128x128x64 schedule = warpspecialized_1sm accum = f16",
            "a : f16[M, K] row  b : f16[N, K] row  d : f16[M, N] row"), 6, 17408, 214016, (128, 32), 4, 2, 4),
    (kernel("tile = 64x64x128 schedule = warpspecialized_1sm", ABD, RESID), 6, 18432, 215040, (64, 64), 1, 1, 4),
    (kernel("tile = 256x256x128 cluster = 2x1x1"), 3, 17408, 214016, (128, 32), 4, 2, 2),
    (kernel("tile = 128x32x64 cluster = 2x1x1 schedule = warpspecialized_2sm", ABD, BIAS),
     22, 5120, 230912, (64, 32), 1, 1, 4),
    (kernel("tile = 128x16x64 cluster = 4x2x1 schedule = warpspecialized_2sm"), 24, 2560, 224256, (64, 16), 1, 1, 4),
    (kernel("tile = 128x128x64 schedule = warpspecialized_1sm stages = 3"), 3, 17408, 115712, (128, 32), 4, 2, 4),
    (kernel("tile = 256x128x64 cluster = 2x1x1 stages = 8", ABD, BIAS), 8, 17408, 214016, (128, 32), 4, 2, 4),
    (kernel("tile = 128x256x64 cluster = 2x1x1 schedule = warpspecialized_2sm stages = 7", DCOL, RCOL),
     7, 50176, 222208, (64, 64), 4, 2, 4),
    (kernel("tile = 64x128x64 cluster = 1x2x1 schedule = warpspecialized_1sm scheduler = stream_k",
            "a : bf16[M, K] row  b : bf16[N, K] row  c : bf16[M, N] col  d : bf16[M, N] row", CADD),
     8, 18432, 215040, (64, 32), 4, 2, 4),
    (kernel("tile = 128x64x128 schedule = warpspecialized_1sm",
            "a : bf16[M, K] row  b : bf16[N, K] row  d : f32[M, N] col",
            "epilogue { r : f32[M, N] col  s : f32[M]  d = acc * s + r }"), 3, 66048, 213504, (128, 32), 2, 2, 4),
]


@pytest.mark.parametrize("k, stages, epilogue_bytes, kernel_bytes, epi_tile, stages_c, stages_d, acc_stages",
                         MEASURED)
def test_smem_model_matches_cutlass(k, stages, epilogue_bytes, kernel_bytes, epi_tile, stages_c, stages_d,
                                    acc_stages):
    assert codes(k) == []
    assert sm100.epilogue_tile(k) == epi_tile
    assert sm100._epilogue_stages(k)[:2] == (stages_c, stages_d)
    assert sm100._accumulator_stages(k) == acc_stages
    assert sm100.mainloop_stages(k) == stages
    assert sm100.epilogue_smem_bytes(k) == epilogue_bytes
    assert sm100.smem_bytes(k) == kernel_bytes


def test_stage_helpers():
    k = kernel("tile = 256x128x64 cluster = 2x1x1")
    assert sm100.stage_bytes(k) == 128 * 64 * 2 + 64 * 64 * 2  # each CTA of the pair: half of A and of B
    assert sm100.stage_bytes(kernel("tile = 128x128x64")) == 128 * 64 * 2 * 2
    assert sm100.mainloop_stages(kernel("tile = 128x128x64 stages = 3")) == 3


def test_auto_stages_always_fit_and_max_stages_is_tight():
    tiles = [(m, n, k) for m, n, k in itertools.product((64, 128, 256), (16, 64, 128, 192, 256), (32, 64, 128))]
    for tile, cluster, epi in itertools.product(tiles, ("1x1x1", "2x1x1"), ("", BIAS, RESID)):
        k = kernel(f"tile = {'x'.join(map(str, tile))} cluster = {cluster}", epilogue=epi)
        if codes(k):
            continue
        most = sm100.max_stages(k)
        assert sm100.smem_bytes(k, most) <= sm100.SMEM_CAPACITY_BYTES < sm100.smem_bytes(k, most + 1)
        assert sm100.MIN_STAGES <= sm100.auto_stages(k) <= most


def test_constants():
    assert sm100.SMEM_CAPACITY_BYTES == 232448
    assert sm100.TILE_M_1SM == (64, 128) and sm100.TILE_M_2SM == (128, 256)
    assert sm100.TILE_N_MULTIPLE == 16 and sm100.TILE_N_MAX == 256
