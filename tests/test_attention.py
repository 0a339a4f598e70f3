"""Attention (FMHA) kernels: the language, the arch rules, rendering, build flags, binding, tuning space, SOL.

CPU only, except the test marked ``nvcc`` (a real compile of one sm90 and one sm100 kernel).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from ucutlass import arch, build, codegen, lang
from ucutlass.codegen import ABI_VERSION, abi_of
from ucutlass.codegen.attention import template_values
from ucutlass.ir import AttentionKernel
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.ir import DType, Schedule, Target

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "kernels"
PROBLEM = "gqa_attention_llama3_1_8b"


def attn(body: str = "", *, q="bf16[B, Sq, Hq, 128]", k="bf16[B, Sk, Hkv, 128]", o=None, extra="") -> str:
    o = o or q
    return (f"kernel attn : attention {{\n  q : {q}\n  k : {k}\n  v : {k}\n  o : {o}\n{extra}"
            f"  {body}\n}}\n")


def one(text: str) -> AttentionKernel:
    return lang.parse(text).kernel()


def codes(text: str) -> list[str]:
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(text)
    return [d.code for d in e.value.diagnostics]


def rule_codes(text: str, extents=None) -> list[str]:
    return [d.code for d in arch.check_kernel(one(text), extents) if d.severity == "error"]


# --- language -----------------------------------------------------------------------------------------------

def test_bshd_gqa_causal_lowers_with_defaults():
    k = one(attn("mask = causal"))
    assert isinstance(k, AttentionKernel) and k.family == "attention"
    assert (k.layout, k.head_dim, k.mask, k.dtype) == ("bshd", 128, "causal", DType.bf16)
    assert (k.target, k.tile, k.schedule, k.stages, k.persistent, k.scale) == \
        (Target.sm90, (128, 128), Schedule.auto, None, None, None)
    assert [op.name for op in k.operands] == ["q", "k", "v", "o"]
    assert abi_of(k).ptr_names == ("q", "k", "v", "o") and abi_of(k).extents == ("B", "Sq", "Sk", "Hq", "Hkv", "D")


def test_bhsd_with_lse_scale_and_f16():
    k = one(attn("scale = 0.1   persistent = true   stages = 4   tile = 128x64", q="f16[B, Hq, Sq, 64]",
                 k="f16[B, Hkv, Sk, 64]", extra="  lse : f32[B, Hq, Sq] -> lse\n"))
    assert (k.layout, k.head_dim, k.dtype, k.scale, k.persistent, k.stages, k.tile) == \
        ("bhsd", 64, DType.f16, 0.1, True, 4, (128, 64))
    assert [op.name for op in k.operands] == ["q", "k", "v", "o", "lse"]
    assert k.lse.binding == "lse"


def test_choices_resolve_to_concrete_source():
    prog = lang.parse(attn("tile = {128x128, 128x64}   schedule = {cooperative, pingpong}   persistent = {auto, true}"))
    assert sorted(prog.choices()) == ["attn.persistent", "attn.schedule", "attn.tile"]
    concrete = prog.resolve({"attn.tile": "128x64", "attn.schedule": "pingpong", "attn.persistent": "true"})
    k = concrete.kernel()
    assert concrete.is_concrete() and (k.tile, k.schedule, k.persistent) == ((128, 64), Schedule.pingpong, True)
    assert "tile = 128x64" in concrete.source


def test_causal_as_a_setting_hints_the_mask():
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(attn("causal = true"))
    (d,) = e.value.diagnostics
    assert d.code == "unknown-setting" and "did you mean mask = causal?" in d.message


@pytest.mark.parametrize("text,code", [
    (attn("mask = sliding"), "bad-value"),                                  # no window in the 88/77 collectives
    (attn("tiles = 128x128"), "unknown-setting"),
    (attn("tile = 128x128x64"), "bad-value"),
    (attn("scale = -1"), "bad-value"),                                      # a setting value is never negative
    (attn("scale = fast"), "bad-value"),
    (attn("persistent = yes"), "bad-value"),
    (attn("schedule = warpspecialized"), "bad-value"),
    (attn("", q="bf16[B, Sq, Hq, D]"), "bad-dims"),                         # the head dim is a number
    (attn("", q="bf16[B, Sq, Hq]"), "bad-dims"),
    (attn("", k="bf16[B, Hkv, Sk, 128]"), "bad-dims"),                      # k BHSD, q BSHD
    (attn("", k="bf16[B, Sk, Hkv, 64]"), "bad-dims"),                       # another head dim
    (attn("", q="f32[B, Sq, Hq, 128]"), "unknown-dtype"),
    (attn("", k="f16[B, Sk, Hkv, 128]"), "bad-value"),                      # q bf16, k f16
    (attn("", extra="  lse : f32[B, Sq, Hq]\n"), "bad-dims"),
    (attn("", extra="  lse : bf16[B, Hq, Sq]\n"), "unknown-dtype"),
    (attn("", extra="  lse : f32[B, Hq, Sq] <- x\n"), "bad-binding"),
    (attn("", extra="  gate : f32[N]\n"), "unknown-operand"),  # (bias is an operand since issue 20: bad-dims)
    (attn("", extra="  bias : f32[N]\n"), "bad-dims"),
    (attn("", extra="  epilogue { d = acc }\n"), "unsupported"),
    ("kernel a : attention { q : bf16[B, Sq, Hq, 128]  o : bf16[B, Sq, Hq, 128] }", "missing-operand"),
    ("kernel a : attention { q : bf16[B, Sq, Hq, 128] row  k : bf16[B, Sk, Hkv, 128]  v : bf16[B, Sk, Hkv, 128] "
     "o : bf16[B, Sq, Hq, 128] }", "bad-layout"),
])
def test_language_errors(text, code):
    assert code in codes(text)


def test_error_lists_valid_masks_with_position():
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(attn("mask = casual"), file="a.ucut")
    d = e.value.diagnostics[0]
    assert d.valid == ("none", "causal") and "did you mean 'causal'" in d.message
    assert str(d.pos).startswith("a.ucut:6:")


def test_gemm_operand_with_a_number_dim_is_still_an_error():
    assert "bad-dims" in codes("kernel g : gemm { a : bf16[M, 64] row  b : bf16[N, K] row  d : bf16[M, N] row }")


# --- rules --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body,q,code", [
    ("tile = 64x128", "bf16[B, Sq, Hq, 128]", "sm90.attn-tile"),
    ("tile = 128x32", "bf16[B, Sq, Hq, 128]", "sm90.attn-tile"),
    ("tile = 128x256", "bf16[B, Sq, Hq, 128]", "sm90.attn-smem"),          # failed at initialize on the H200
    ("stages = 7", "bf16[B, Sq, Hq, 128]", "sm90.attn-smem"),
    ("stages = 1", "bf16[B, Sq, Hq, 128]", "sm90.attn-stages"),
    ("schedule = pingpong   persistent = false", "bf16[B, Sq, Hq, 128]", "sm90.attn-pingpong-persistent"),
    ("", "bf16[B, Sq, Hq, 80]", "sm90.attn-head-dim"),  # (96 runs on the 128 tile since issue 20)
    ("target = sm100", "bf16[B, Sq, Hq, 128]", "sm100.attn-tile"),         # 128x128 default; 77 runs 256x128
    ("target = sm100   tile = 256x128   schedule = cooperative", "bf16[B, Sq, Hq, 128]", "sm100.attn-schedule"),
    ("target = sm100   tile = 256x128   stages = 3", "bf16[B, Sq, Hq, 128]", "sm100.attn-stages"),
    ("target = sm100   tile = 256x128", "bf16[B, Sq, Hq, 256]", "sm100.attn-head-dim"),
])
def test_rules_reject_before_nvcc(body, q, code):
    k = q.replace("Sq", "Sk").replace("Hq", "Hkv")
    assert code in rule_codes(attn(body, q=q, k=k))


def test_smem_rule_says_how_many_stages_fit_and_allows_smaller_tiles():
    d = [d for d in arch.check_kernel(one(attn("stages = 7"))) if d.code == "sm90.attn-smem"][0]
    assert "at most 6 KV stages fit" in d.message and "6" in d.valid
    assert rule_codes(attn("tile = 128x256", q="bf16[B, Sq, Hq, 64]", k="bf16[B, Sk, Hkv, 64]")) == []
    assert rule_codes(attn("tile = 128x64   stages = 8")) == []
    d256 = dict(q="bf16[B, Sq, Hq, 256]", k="bf16[B, Sk, Hkv, 256]")  # 88 runs d = 256 as 128x64 only
    assert rule_codes(attn("tile = 128x64", **d256)) == [] and rule_codes(attn("", **d256)) == ["sm90.attn-smem"]


def test_legal_kernels_pass_both_targets():
    assert rule_codes(attn("mask = causal   schedule = pingpong   tile = 128x64")) == []
    assert rule_codes(attn("target = sm100   tile = 256x128   persistent = false", q="f16[B, Hq, Sq, 64]",
                           k="f16[B, Hkv, Sk, 64]")) == []


def test_extent_rules():
    assert "sm90.attn-extents" in rule_codes(attn(""), {"Hq": 32, "Hkv": 5})
    assert "sm90.attn-extents" in rule_codes(attn("mask = causal"), {"Sq": 200, "Sk": 100})
    assert rule_codes(attn(""), {"Sq": 200, "Sk": 100, "Hq": 32, "Hkv": 8, "D": 128}) == []


def test_check_counts_legal_combinations_and_names_rules():
    text = attn("tile = {128x128, 128x256, 64x128}   schedule = {cooperative, pingpong}")
    prog = lang.parse(text)
    diags = arch.check(prog)
    (note,) = [d for d in diags if d.code == "choices"]
    assert note.message.startswith("2 of 6 combinations")
    assert "sm90.attn-smem (2)" in note.message and "sm90.attn-tile (2)" in note.message
    dead = [d for d in diags if d.code == "dead-option"]  # at the option itself, with the options that are legal
    assert [d.message.split(" is in")[0] for d in dead] == ["tile = 128x256", "tile = 64x128"]
    assert all(d.severity == "warning" and d.valid == ("128x128",) for d in dead)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "128x256" in ln)
    at = text.splitlines()[line - 1]
    assert [(d.pos.line, d.pos.column) for d in dead] == [(line, at.index("128x256") + 1), (line, at.index("64x128") + 1)]


def test_every_attention_rule_is_in_arch_rules():
    from ucutlass.arch import sm90_attention, sm100_attention

    assert set(sm90_attention.RULES) | set(sm100_attention.RULES) <= set(arch.RULES)


# --- rendering ----------------------------------------------------------------------------------------------

def test_sm90_render_follows_the_settings():
    src = codegen.render(one(attn("mask = causal")))
    assert "FmhaBuilder" in src and "CausalFusion" in src and "KernelTmaWarpSpecializedCooperative" in src
    assert "kIsPersistent" not in src and "kStagesKV" not in src
    assert "Shape<cute::_128, cute::_128, cute::_128>" in src and "x.Hq * D, _1{}" in src  # BSHD row stride
    assert "77_blackwell" not in src and "sm100_fmha" not in src
    src = codegen.render(one(attn("schedule = pingpong   tile = 128x64   stages = 3   scale = 0.25",
                                  q="f16[B, Hq, Sq, 64]", k="f16[B, Hkv, Sk, 64]",
                                  extra="  lse : f32[B, Hq, Sq]\n")))
    assert "KernelTmaWarpSpecializedPingpong" in src and "ResidualFusion" in src and "cutlass::half_t" in src
    assert "Int<3>" in src and "0.25f" in src and "Shape<cute::_128, cute::_64, cute::_64>" in src
    assert "make_stride(D, _1{}" in src and "static_cast<float*>(ptrs[4])" in src  # BHSD, lse pointer
    src = codegen.render(one(attn("persistent = true")))
    assert "fk::Option<fk::Tag::kIsPersistent, cute::true_type>" in src


def test_sm100_render_uses_77_only():
    src = codegen.render(one(attn("target = sm100   tile = 256x128   mask = causal   persistent = false",
                                  extra="  lse : f32[B, Hq, Sq]\n")))
    assert "Sm100FmhaFwdKernelTmaWarpspecialized" in src and "CausalMask<true>" in src
    assert "IndividualTileScheduler" in src and "fmha_kernel_builder" not in src
    src = codegen.render(one(attn("target = sm100   tile = 256x128")))
    assert "ResidualMask" in src and "PersistentTileScheduler" in src and "nullptr, sL" in src


def test_render_refuses_open_choices_and_broken_rules():
    with pytest.raises(CheckError) as e:
        codegen.render(one(attn("tile = {128x128, 128x64}")))
    assert e.value.diagnostics[0].code == "open-choices"
    with pytest.raises(CheckError) as e:
        codegen.render(one(attn("tile = 64x64")))
    assert e.value.diagnostics[0].code == "sm90.attn-tile"


def test_info_json_and_abi_match_the_gemm_abi():
    import json

    values = template_values(one(attn("mask = causal", extra="  lse : f32[B, Hq, Sq]\n")))
    info = json.loads(values["info_json"])
    assert ABI_VERSION == codegen.ABI_VERSION
    assert info["family"] == "attention" and info["ptrs"] == ["q", "k", "v", "o", "lse"]
    assert info["extents"] == ["B", "Sq", "Sk", "Hq", "Hkv", "D"]


def test_nvcc_command_adds_fast_math_and_the_example_headers():
    src = Path("/tmp/x.cu")
    cmd90 = build.nvcc_command(src, Path("/tmp/x.so"), "sm90", family="attention")
    cmd100 = build.nvcc_command(src, Path("/tmp/x.so"), "sm100", family="attention")
    assert "--use_fast_math" in cmd90 and any(c.endswith("examples/88_hopper_fmha") for c in cmd90)
    assert not any("77_blackwell" in c for c in cmd90)
    assert any(c.endswith("examples/77_blackwell_fmha") for c in cmd100)
    gemm = build.nvcc_command(src, Path("/tmp/x.so"), "sm90")
    assert "--use_fast_math" not in gemm and not any("examples" in c for c in gemm)
    assert build.cache_key("x", "sm90", "attention") != build.cache_key("x", "sm90")
    for target in ("sm90", "sm100"):
        assert (build.cutlass_dir() / "examples" / build.FAMILY_EXAMPLES[("attention", target)]).is_dir()


# --- problem, binding, tuning space, SOL ---------------------------------------------------------------------

def _problem():
    from ucutlass.problem import find_problem

    return find_problem(PROBLEM)


def test_shipped_problem_binds_and_has_the_workloads():
    from ucutlass.bind import bind

    problem = _problem()
    prog = lang.parse_file(ROOT / "problems" / PROBLEM / "kernel.ucut")
    binding = bind(prog.kernel(), problem)
    ext = [binding.extents(w) for w in problem.workloads]
    assert {(e["B"], e["Sq"]) for e in ext} >= {(4, 4096), (1, 16384), (16, 1024), (4, 4000)}
    assert any(e["Sq"] % 128 for e in ext)
    assert all((e["Hq"], e["Hkv"], e["D"], e["Sk"]) == (32, 8, 128, e["Sq"]) for e in ext)


def test_binding_errors_name_the_tensors():
    from ucutlass.bind import bind

    text = ("kernel attn : attention { q : bf16[B, Sq, Hq, 128] <- q  k : bf16[B, Sk, Hkv, 128] <- key "
            "v : f16[B, Sk, Hkv, 128] <- v  o : f16[B, Sq, Hq, 128] -> output }")
    with pytest.raises(UcutSyntaxError):  # dtypes disagree: a language error first
        lang.parse(text)
    text = text.replace(": f16[", ": bf16[")
    with pytest.raises(CheckError) as e:
        bind(lang.parse(text).kernel(), _problem())
    got = {d.code for d in e.value.diagnostics}
    assert got == {"bind-unknown", "bind-unused"}
    mha = text.replace("<- key", "<- k").replace("Hkv", "Hq")
    with pytest.raises(CheckError) as e:  # K declared over Hq (MHA) but the problem has 8 KV heads
        bind(lang.parse(mha).kernel(), _problem())
    assert e.value.diagnostics[0].code == "bind-extent"


def test_search_space_over_the_problem_kernel():
    from ucutlass.search import plan

    p = plan(_problem(), lang.parse_file(ROOT / "problems" / PROBLEM / "kernel.ucut"),
             source_file=str(ROOT / "problems" / PROBLEM / "kernel.ucut"))
    assert p.space.size == 24 and len(p.legal) == 18  # pingpong: persistent auto and true are one kernel
    k = p.space.concrete(p.space.legal_params()[0])
    assert k.is_concrete() and "FmhaBuilder" in codegen.render(k)


def test_sol_counts_the_causal_half():
    from ucutlass.sol import count_workload

    problem = _problem()
    for w in problem.workloads:
        b, s = w.axes["batch_size"], w.axes["seq_len"]
        c = count_workload(problem, w)
        kept = s * (s + 1) // 2  # lower triangle with the diagonal (PyTorch's top-left is_causal)
        assert c.flops_by_precision == {"bf16": 2 * b * 32 * kept * (128 + 128)}
        full = 4 * b * 32 * s * s * 128
        assert math.isclose(c.flops / full, 0.5 * (1 + 1 / s))


# --- nvcc ---------------------------------------------------------------------------------------------------

@pytest.mark.nvcc
def test_generated_sm90_and_sm100_attention_kernels_compile(tmp_path_factory):
    from ucutlass.build import build_kernels

    cache = tmp_path_factory.mktemp("attn_cache")
    kernels = [lang.parse_file(KERNELS / f).kernel() for f in ("attn_gqa_causal.ucut", "attn_sm100.ucut")]
    results = build_kernels(kernels, root=cache, timeout_s=900)
    for k, r in zip(kernels, results):
        assert r.ok, f"{k.config_name()}: {r.error}\n{r.log[-3000:]}"
        assert "--use_fast_math" in r.meta["command"] and r.meta["family"] == "attention"
        assert r.so_path.stat().st_size > 0
        # CUTLASS's FMHA adapters keep an `initialized` flag in a function-local static; with STB_GNU_UNIQUE
        # binding two loaded .so's holding the same kernel type would share it (and the second skip its setup).
        assert _unique_symbols(r.so_path) == [], f"{k.config_name()}: process-wide symbols"


def _unique_symbols(so) -> list[str]:
    """Dynamic symbols of ``so`` bound STB_GNU_UNIQUE (one per process, even across RTLD_LOCAL libraries)."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(so)], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if " UNIQUE " in line]


def test_one_kernel_spelled_two_ways_is_one_configuration():
    """sm90 pingpong is persistent whether ``persistent`` says auto or true: one kernel, listed once; cooperative
    with auto (not persistent) and true are two."""
    from ucutlass.search import plan

    p = plan(_problem(), lang.parse_file(ROOT / "problems" / PROBLEM / "kernel.ucut"), source_file="kernel.ucut")
    assert len(p.legal) == 2 * 3 * 3  # tiles x stages x (cooperative auto, cooperative true, pingpong)
    assert "the same kernel as a combination listed before it" in " ".join(p.rejected)
    ping = {"tile": "128x64", "schedule": "pingpong", "stages": "3"}
    assert p.space.identity({**ping, "persistent": "auto"}) == p.space.identity({**ping, "persistent": "true"})
    assert p.space.representative({**ping, "persistent": "true"}) == {**ping, "persistent": "auto"}
    coop = {**ping, "schedule": "cooperative"}
    assert p.space.identity({**coop, "persistent": "auto"}) != p.space.identity({**coop, "persistent": "true"})
    assert p.space.representative({**coop, "persistent": "true"}) == {**coop, "persistent": "true"}


@pytest.mark.parametrize("sampler", ["brute", "tpe"])
def test_tuner_picks_the_fastest_attention_config(sampler):
    """The tuner runs on an attention kernel like on a GEMM (fake builder and measurer: no nvcc, no GPU), and
    measures each kernel once however many spellings of it the sampler proposes."""
    from ucutlass.build import BuildResult
    from ucutlass.search import TuneConfig, Tuner, plan
    from ucutlass.search.study import Outcome

    p = plan(_problem(), lang.parse_file(ROOT / "problems" / PROBLEM / "kernel.ucut"), source_file="kernel.ucut",
             max_workloads=2)

    def build_fn(cands):
        return [BuildResult(key=c.kernel.digest(), name=c.kernel.config_name(), entry=Path("/nonexistent"),
                            so_path=Path("/nonexistent/kernel.so"), source_path=Path("/nonexistent/kernel.cu"),
                            cached=False, seconds=0.0) for c in cands]

    class Measure:
        sol_ms = 1.0

        def reference_ms(self, workload):
            return 2.0

        def __call__(self, cand, workloads):
            k = cand.kernel
            t = {(128, 128): 1.2, (128, 64): 1.5}[k.tile] * (1.1 if k.schedule is Schedule.pingpong else 1.0)
            t *= 0.9 if k.stages == 4 else 1.0
            return [Outcome(w, "PASSED", latency_ms=t, reference_ms=2.0, t_sol_ms=1.0) for w in workloads]

    result = Tuner(p.problem, p.binding, p.space, build=build_fn, measure=Measure(), t_sol_ms=lambda w: 1.0,
                   config=TuneConfig(batch=4, seed=1, trials=30, epsilon=0.0, patience=100, sampler=sampler)).run()
    assert result.best.params["tile"] == "128x128" and result.best.params["schedule"] == "cooperative"
    assert result.best.params["stages"] == "4"
    assert result.best_value == pytest.approx(1.2 * 0.9)
    measured = [p.space.identity(t["params"]) for t in result.trials
                if t["state"] == "COMPLETE" and not t.get("duplicate")]
    assert len(measured) == len(set(measured)) == len(p.legal)


def test_sm90_needs_sq_a_multiple_of_8():
    """Example 88's can_implement refuses Sq % 8 != 0 (16-byte TMA rows of Q); the runtime says so before a launch."""
    from ucutlass.runtime import extents_of

    k90 = one(attn("mask = causal"))
    shapes = {n: (1, 77, 2, 128) for n in ("q", "o")} | {n: (1, 77, 1, 128) for n in ("k", "v")}
    _, errors = extents_of(k90, shapes)
    assert errors == ["Sq = 77 is not a multiple of 8: CUTLASS's sm90 FMHA (example 88) loads Q in 16-byte TMA "
                      "rows; pad the sequence to 80"]
    shapes = {n: (1, 72, 2, 128) for n in ("q", "o")} | {n: (1, 72, 1, 128) for n in ("k", "v")}
    assert extents_of(k90, shapes)[1] == []
    assert extents_of(one(attn("target = sm100  mask = causal")), {n: (1, 77, 2, 128) for n in ("q", "o")}
                      | {n: (1, 77, 1, 128) for n in ("k", "v")})[1] == []
