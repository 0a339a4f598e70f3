"""Attention variants (issue 20 item 1): soft-capping, a scale or softcap read from a problem scalar, a sliding
window, an additive bias broadcast over heads (and batches), head dims 96 and 192 on the 128 and 256 tiles.

CPU: the language and its errors, the arch rules, the ABI, rendering, binding, and the emulation against torch's
SDPA with the same arguments (soft-capping, which SDPA lacks, against the formula). One test marked ``nvcc``
compiles the variant template path.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ucutlass import arch, codegen, lang
from ucutlass.codegen import abi_of
from ucutlass.emulate import emulate_kernel
from ucutlass.errors import CheckError, UcutSyntaxError

from shared_data import SHARED_SOL_EXECBENCH

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROOT = Path(__file__).resolve().parents[1]
SOL = SHARED_SOL_EXECBENCH
L1_047 = SOL / "L1_047_attention_with_qk_norm_and_rope"
EXAMPLE = ROOT / "examples" / "pipeline_attention_softcap_mask.ucut"


def attn(extra: str = "", d: int = 128, settings: str = "") -> str:
    return (f"kernel attn : attention {{\n"
            f"  q : bf16[B, Sq, Hq, {d}]   k : bf16[B, Sk, Hkv, {d}]   v : bf16[B, Sk, Hkv, {d}]\n"
            f"  o : bf16[B, Sq, Hq, {d}]\n{extra}\n  {settings}\n}}\n")


def one(text: str):
    return lang.parse(text).kernel()


def diags(text: str):
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(text)
    return [(d.code, d.pos.line, d.pos.column) for d in e.value.diagnostics]


# --- language ------------------------------------------------------------------------------------------------

def test_variants_lower_to_the_kernel_and_its_abi():
    k = one(attn("  bias : bf16[B, 1, Sq, Sk] <- mask\n  softcap : f32 <- cap\n  scale : f32 <- scaling",
                 settings="mask = causal   window = 64"))
    assert k.bias.dims == ("B", "1", "Sq", "Sk") and k.bias.binding == "mask"
    assert [(s.name, s.binding) for s in k.scalars] == [("softcap", "cap"), ("scale", "scaling")]
    assert k.window == 64 and k.softcap is None and k.has_softcap and k.is_variant
    abi = abi_of(k)
    assert abi.ptr_names == ("q", "k", "v", "o", "bias") and abi.scalar_names == ("softcap", "scale")
    assert k.config_name().endswith("_softcaparg_scalearg_win64_biasb1sqsk")
    literal = one(attn(settings="softcap = 30.0"))
    assert literal.softcap == 30.0 and abi_of(literal).scalar_names == ()
    assert one(attn("  softcap : f32 = 50.0")).softcap == 50.0
    # a plain kernel keeps its digest (the variant fields count only when set)
    plain = one(attn())
    assert not plain.is_variant and plain.digest() != literal.digest()
    assert one(attn(d=96)).tile_head_dim == 128 and one(attn(d=192)).tile_head_dim == 256


@pytest.mark.parametrize("extra, settings, code, line, col", [
    ("", "softcap = 0", "bad-value", 5, 13),
    ("", "window = 0", "bad-value", 5, 12),
    ("", "window = 1.5", "bad-value", 5, 12),
    ("", "window = -1", "bad-value", 5, 12),  # a syntax error in words, at the '-'
    ("  bias : bf16[Sk, Sq] <- m", "", "bad-dims", 4, 14),
    ("  bias : bf16[B, Hq, Sq, Sk] <- m", "", "bad-dims", 4, 14),
    ("  bias : i32[Sq, Sk] <- m", "", "unknown-dtype", 4, 10),
    ("  softcap : f32[Sq] <- c", "", "bad-dims", 4, 16),
    ("  softcap : bf16 <- c", "", "unknown-dtype", 4, 13),
    ("  scale : f32 -> s", "", "bad-binding", 4, 15),
    ("  scale : f32", "", "bad-binding", 4, 3),
    ("  softcap : f32 <- c", "softcap = 30.0", "duplicate-setting", 4, 3),
])
def test_variant_errors_at_line_and_column(extra, settings, code, line, col):
    assert (code, line, col) in diags(attn(extra, settings=settings))


def test_rules_head_dims_and_sm100():
    assert arch.check_kernel(one(attn(d=96))) == []
    assert arch.check_kernel(one(attn(d=192, settings="tile = 128x64  stages = 4"))) == []
    bad = arch.check_kernel(one(attn(d=80)))
    assert [d.code for d in bad] == ["sm90.attn-head-dim"] and "96" in bad[0].message
    sm100 = arch.check_kernel(one(attn("  bias : bf16[Sq, Sk]", settings="target = sm100  tile = 256x128  "
                                       "window = 8")))
    assert [d.code for d in sm100] == ["sm100.attn-variant"] and "bias, window" in sm100[0].message
    # d = 192 runs on the 256 tile: its shared memory is the 256 one
    assert arch.check_kernel(one(attn(d=192, settings="tile = 128x128  stages = 5")))[0].code == "sm90.attn-smem"


# --- rendering ------------------------------------------------------------------------------------------------

def test_render_of_the_variant_path():
    src = codegen.render(one(attn("  bias : f32[B, Sq, Sk]\n  softcap : f32 <- cap", d=96,
                                  settings="mask = causal  window = 32")))
    assert "using Fusion = VariantFusion;" in src
    assert "struct VariantFusion : cutlass::fmha::collective::CausalFusion" in src
    assert "cute::_128>;" in src and "constexpr int kHeadDim = 96;" in src
    assert "masked = masked || kj < qi - 32;" in src and "return ::tanhf(x);" in src  # tanh_impl libm
    assert "vp.softcap = static_cast<float>(scalars[0]);" in src
    # a per-batch bias on a non-persistent kernel: one launch, each CTA's batch (its bias) from blockIdx.y
    assert "return Plan{R, false};" in src and "const float* bias;" in src
    assert "p.bias + int64_t(blockIdx.y) * p.batch_stride" in src
    info = json.loads(src.split('R"UCUTINFO(')[1].split(')UCUTINFO')[0])
    assert info["ptrs"] == ["q", "k", "v", "o", "bias"] and info["scalars"] == ["softcap"]
    plain = codegen.render(one(attn(settings="mask = causal")))
    assert "VariantFusion" not in plain and "using Fusion = cutlass::fmha::collective::CausalFusion;" in plain
    shared = codegen.render(one(attn("  bias : bf16[Sq, Sk]", settings="softcap = 30.0")))
    assert "DefaultFusion" in shared and "vp.softcap = 30.0f;" in shared and "return Plan{x.B, true};" not in shared


# --- emulation against SDPA -------------------------------------------------------------------------------------

def _qkv(B=2, Sq=24, Sk=40, Hq=4, Hkv=2, D=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Sq, Hq, D, generator=g).bfloat16()
    k = torch.randn(B, Sk, Hkv, D, generator=g).bfloat16()
    v = torch.randn(B, Sk, Hkv, D, generator=g).bfloat16()
    return q, k, v


def _run(kernel, q, k, v, *extra, scalars=()):
    o = torch.empty_like(q)
    emulate_kernel(kernel).call([q, k, v, o, *extra, *scalars])
    return o.float()


def _sdpa(q, k, v, **kw):
    """torch's SDPA on BSHD bf16 operands, in f32."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                         v.transpose(1, 2).float(), enable_gqa=True, **kw)
    return out.transpose(1, 2)


@pytest.mark.parametrize("bias_dims", ["Sq, Sk", "B, Sq, Sk", "B, 1, Sq, Sk"])
def test_emulated_bias_is_sdpas_attn_mask(bias_dims):
    q, k, v = _qkv()
    shape = {"Sq, Sk": (24, 40), "B, Sq, Sk": (2, 24, 40), "B, 1, Sq, Sk": (2, 1, 24, 40)}[bias_dims]
    bias = torch.randn(*shape).bfloat16()
    got = _run(one(attn(f"  bias : bf16[{bias_dims}]")), q, k, v, bias)
    mask = bias.float() if len(shape) != 3 else bias.float().unsqueeze(1)
    torch.testing.assert_close(got, _sdpa(q, k, v, attn_mask=mask), atol=2e-2, rtol=2e-2)


def test_emulated_window_and_scalar_scale_are_sdpas():
    q, k, v = _qkv(Sq=40, Sk=40)
    i, j = torch.arange(40).unsqueeze(1), torch.arange(40).unsqueeze(0)
    got = _run(one(attn("  scale : f32 <- s", settings="mask = causal   window = 7")), q, k, v, scalars=(0.05,))
    want = _sdpa(q, k, v, attn_mask=(j <= i) & (j >= i - 7), scale=0.05)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    got = _run(one(attn(settings="window = 3")), q, k, v)  # left window only, no causal bound
    torch.testing.assert_close(got, _sdpa(q, k, v, attn_mask=j >= i - 3), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("d", [96, 192])
def test_emulated_padded_head_dims_are_sdpas(d):
    q, k, v = _qkv(D=d)
    got = _run(one(attn(d=d, settings="mask = causal")), q, k[:, :24], v[:, :24])
    torch.testing.assert_close(got, _sdpa(q, k[:, :24], v[:, :24], is_causal=True), atol=2e-2, rtol=2e-2)


def test_emulated_softcap_and_bias_follow_the_gemma_formula():
    q, k, v = _qkv(B=1, Sq=16, Sk=16, Hq=2, Hkv=1)
    bias = torch.randn(1, 1, 16, 16).bfloat16()
    kernel = one(attn("  bias : bf16[B, 1, Sq, Sk]\n  softcap : f32 <- c", settings="mask = causal"))
    got = _run(kernel, q, k, v, bias, scalars=(5.0,))
    qh, kh, vh = (x.transpose(1, 2).float() for x in (q, k, v))
    kh, vh = kh.repeat_interleave(2, 1), vh.repeat_interleave(2, 1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(128)
    s = torch.tanh(s / 5.0) * 5.0 + bias.float()
    s = s.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(got, (s.softmax(-1) @ vh).transpose(1, 2), atol=2e-2, rtol=2e-2)
    literal = _run(one(attn("  bias : bf16[B, 1, Sq, Sk]", settings="mask = causal  softcap = 5.0")), q, k, v, bias)
    torch.testing.assert_close(literal, got)


# --- binding and the L1_047 pipeline ------------------------------------------------------------------------------

def test_bias_extents_are_checked():
    from ucutlass.bind.attention import extents_of

    k = one(attn("  bias : bf16[B, 1, Sq, Sk]"))
    shapes = {"q": (2, 24, 4, 128), "k": (2, 40, 2, 128), "bias": (2, 4, 24, 40)}
    assert "bias: the dim declared 1 is 4" in extents_of(k, shapes)[1][0]
    shapes["bias"] = (2, 1, 24, 41)
    assert "bias: Sk = 41, but k gives Sk = 40" in extents_of(k, shapes)[1][0]


@pytest.mark.skipif(not L1_047.is_dir(), reason="needs ../shared/sol-execbench")
def test_example_for_l1_047_grades_emulated_on_its_smallest_workload(tmp_path):
    """``ucutlass grade FILE L1_047 --emulate`` on the workload with the fewest tokens (batch 1, seq_len 128) runs the
    whole pipeline and passes. The reference rounds the normalized P to bf16 before P·V; an online softmax (the FMHA)
    cannot, and with outputs near 1700 that rounding noise alone puts ~3% of the elements outside atol 0.033 + rtol
    0.05 of the reference (99% required; ``scores = eager`` took it from ~78% to ~97%). Against the float64 ground
    truth the program matches about as well as the reference (structured trial: 62.746% against 62.753%), which the
    grader accepts (grader/check.py ``tolerance_against_truth``)."""
    smallest = min((json.loads(line) for line in (L1_047 / "workload.jsonl").read_text().splitlines()),
                   key=lambda w: w["axes"]["batch_size"] * w["axes"]["seq_len"])
    problem = tmp_path / "L1_047"
    problem.mkdir()
    (problem / "definition.json").write_text((L1_047 / "definition.json").read_text())
    (problem / "workload.jsonl").write_text(json.dumps(smallest) + "\n")
    run = subprocess.run([sys.executable, "-m", "ucutlass.cli", "grade", str(EXAMPLE), str(problem), "--emulate"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "PASSED" in out, out[-3000:]


# --- nvcc ------------------------------------------------------------------------------------------------------

@pytest.mark.nvcc
def test_the_variant_template_path_compiles(tmp_path_factory):
    """One build of every variant piece at once: per-batch bias, soft-capping from a scalar, causal window, D 96,
    eager scores (the f32-score path of the same template compiled too while this was written)."""
    from ucutlass.build import build_kernels

    kernel = one(attn("  bias : bf16[B, 1, Sq, Sk]\n  softcap : f32 <- cap", d=96,
                      settings="mask = causal   window = 64   scores = eager"))
    result = build_kernels([kernel], root=tmp_path_factory.mktemp("attnvar_cache"), timeout_s=900)[0]
    assert result.ok, f"{result.error}\n{result.log[-3000:]}"
    assert result.so_path.stat().st_size > 0


def test_check_error_for_a_bound_scalar_that_is_a_tensor():
    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    if not L1_047.is_dir():
        pytest.skip("needs ../shared/sol-execbench")
    problem = load_problem(L1_047)
    kernel = one(attn("  softcap : f32 <- cos"))
    with pytest.raises(CheckError) as e:
        bind(kernel, problem)
    assert any("softcap is a scalar but" in d.message for d in e.value.diagnostics)


def test_eager_scores_round_each_step_like_an_eager_reference():
    q, k, v = _qkv(B=1, Sq=16, Sk=16, Hq=2, Hkv=2, seed=3)
    q = q * 8
    kernel = one(attn("  softcap : f32 <- c", settings="scores = eager"))
    assert kernel.scores == "eager" and kernel.is_variant and kernel.config_name().endswith("_scoreseager")
    got = _run(kernel, q, k, v, scalars=(20.0,))
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    s = torch.matmul(qh, kh.transpose(-1, -2)) * (128 ** -0.5)   # bf16 at every step, as an eager reference
    s = torch.tanh(s / 20.0) * 20.0
    want = (torch.softmax(s.float(), -1) @ vh.float()).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    f32 = _run(one(attn("  softcap : f32 <- c")), q, k, v, scalars=(20.0,))
    assert (f32 - got).abs().max().item() > 1e-3  # the rounding is really applied
    src = codegen.render(kernel)
    assert "s = r(r(fast_tanh(r(s / p.softcap))) * p.softcap);" in src and "return ::tanhf(x);" in src
    assert ("bad-value", 5, 12) in diags(attn(settings="scores = f16"))
