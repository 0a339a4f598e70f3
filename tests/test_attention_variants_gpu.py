"""Attention variants on the GPU (issue 20 item 1): each compiled and compared with torch's SDPA in fp32.

Run on the H200: ``pytest -m gpu tests/test_attention_variants_gpu.py``. Seven sm90 kernels are compiled first, in
parallel, in a fresh cache: an additive bias shared by every batch and head, a per-batch bias with a causal mask,
soft-capping and the scale read from scalars, a causal sliding window, a non-causal window with GQA and B > Hq/Hkv
(forked launches), head dims 96 and 192 (zero-padded tiles), and a BHSD per-batch bias in one launch. The reference is
``torch.nn.functional.scaled_dot_product_attention`` on the inputs upcast to fp32, with the same ``attn_mask`` /
``scale`` (soft-capping, which SDPA lacks, by its formula on fp32 scores).
"""

from __future__ import annotations

import math

import pytest

from gpu_build import build_and_load  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _kernel(name: str, d: int, extra: str, settings: str) -> str:
    return (f"kernel {name} : attention {{\n  target = sm90\n"
            f"  q : bf16[B, Sq, Hq, {d}]   k : bf16[B, Sk, Hkv, {d}]   v : bf16[B, Sk, Hkv, {d}]\n"
            f"  o : bf16[B, Sq, Hq, {d}]\n{extra}\n  {settings}\n}}\n")


#: name -> (head dim, operand/scalar lines, settings)
SPECS = {
    "bias_shared": (128, "  bias : bf16[Sq, Sk]", "mask = none"),
    "bias_batched_causal": (128, "  bias : f32[B, 1, Sq, Sk]", "mask = causal   schedule = pingpong"),
    "softcap_scalars": (128, "  softcap : f32 <- cap\n  scale : f32 <- scaling", "mask = causal"),
    "window_causal": (128, "", "mask = causal   window = 100   tile = 128x64"),
    "window_full_d96": (96, "  bias : bf16[B, Sq, Sk]", "mask = none   window = 50   softcap = 20.0"),
    "d192": (192, "", "mask = causal   tile = 128x64   stages = 4"),
}
#: BHSD with a per-batch bias, not persistent: one launch, a CTA's batch is blockIdx.z / Hkv (the template's
#: batch_from_grid), as in L1_047's pipeline.
BHSD_BIAS = """kernel bias_bhsd : attention {
  target = sm90
  q : bf16[B, Hq, Sq, 128]   k : bf16[B, Hkv, Sk, 128]   v : bf16[B, Hkv, Sk, 128]   o : bf16[B, Hq, Sq, 128]
  bias : bf16[B, 1, Sq, Sk]
  mask = causal   schedule = cooperative   persistent = false
}
"""


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse(_kernel(name, *spec), f"{name}.ucut").kernel() for name, spec in SPECS.items()]
                          + [parse(BHSD_BIAS, "bias_bhsd.ucut").kernel()], kernel_cache)


def _qkv(b, sq, sk, hq, hkv, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda s, h: torch.randn(b, s, h, d, generator=g, device="cuda").bfloat16()  # noqa: E731
    return rnd(sq, hq), rnd(sk, hkv), rnd(sk, hkv)


def _reference(q, k, v, *, mask=None, scale=None, softcap=None):
    """fp32 attention on BSHD operands: SDPA with ``attn_mask`` (bool or additive), or the formula with softcap."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    if softcap is None:
        out = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale, enable_gqa=True)
        return out.transpose(1, 2)
    rep = qf.shape[1] // kf.shape[1]
    kf, vf = kf.repeat_interleave(rep, 1), vf.repeat_interleave(rep, 1)
    s = qf @ kf.transpose(-1, -2) * (scale or 1 / math.sqrt(qf.shape[-1]))
    s = torch.tanh(s / softcap) * softcap
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype is torch.bool else s + mask
    return (s.softmax(-1) @ vf).transpose(1, 2)


def _check(o, ref, what):
    torch.cuda.synchronize()
    assert not o.isnan().any(), f"{what}: NaN or unwritten outputs"
    err = (o.float() - ref).abs()
    bad = err > 1e-2 + 2e-2 * ref.abs()
    assert not bad.any(), f"{what}: {int(bad.sum())} elements off, max |err| {err.max().item():.3g}"


def _causal(sq, sk, window=None, causal=True):
    i = torch.arange(sq, device="cuda").unsqueeze(1)
    j = torch.arange(sk, device="cuda").unsqueeze(0)
    keep = (j <= i) if causal else torch.ones(sq, sk, dtype=torch.bool, device="cuda")
    return keep & (j >= i - window) if window is not None else keep


# the last case: B > Hq/Hkv, the launches on forked streams share the modifier's values
@pytest.mark.parametrize("case", [(2, 256, 256, 8, 2), (1, 200, 520, 4, 1), (3, 136, 136, 4, 2)])
def test_shared_bias_is_sdpas_attn_mask(kernels, case):
    b, sq, sk, hq, hkv = case
    q, k, v = _qkv(*case, 128, seed=sum(case))
    bias = torch.randn(sq, sk, device="cuda").bfloat16()
    o = torch.full_like(q, float("nan"))
    kernels["bias_shared"](q=q, k=k, v=v, o=o, bias=bias)
    _check(o, _reference(q, k, v, mask=bias.float()), f"bias_shared {case}")


def test_a_misaligned_bias_is_refused_before_the_launch(kernels):
    """The kernel loads two adjacent bias keys at once: a bias starting off a 16-byte boundary is refused first."""
    from ucutlass.errors import KernelRuntimeError

    q, k, v = _qkv(1, 136, 264, 4, 2, 128, seed=5)
    bias = torch.randn(136 * 264 + 1, device="cuda").bfloat16()[1:].view(136, 264)
    with pytest.raises(KernelRuntimeError, match="bias: data pointer is not 16-byte aligned"):
        kernels["bias_shared"](q=q, k=k, v=v, o=torch.empty_like(q), bias=bias)


def test_per_batch_bias_with_causal_mask(kernels, case):
    b, sq, sk, hq, hkv = case
    q, k, v = _qkv(*case, 128, seed=sum(case))
    bias = torch.randn(b, 1, sq, sk, device="cuda")
    o = torch.full_like(q, float("nan"))
    kernels["bias_batched_causal"](q=q, k=k, v=v, o=o, bias=bias)
    mask = bias.masked_fill(~_causal(sq, sk), float("-inf"))
    _check(o, _reference(q, k, v, mask=mask), f"bias_batched_causal {case}")


@pytest.mark.parametrize("case", [(3, 256, 256, 8, 2), (2, 200, 330, 4, 4)])
def test_per_batch_bias_bhsd_in_one_launch(kernels, case):
    b, sq, sk, hq, hkv = case
    q, k, v = (t.transpose(1, 2).contiguous() for t in _qkv(*case, 128, seed=sum(case) + 1))  # BHSD
    bias = torch.randn(b, 1, sq, sk, device="cuda").bfloat16()
    o = torch.full_like(q, float("nan"))
    kernels["bias_bhsd"](q=q, k=k, v=v, o=o, bias=bias)
    mask = bias.float().masked_fill(~_causal(sq, sk), float("-inf"))
    ref = _reference(*(t.transpose(1, 2) for t in (q, k, v)), mask=mask).transpose(1, 2)
    _check(o, ref, f"bias_bhsd {case}")


def test_softcap_and_scale_from_scalars(kernels):
    case = (2, 384, 384, 8, 2)
    q, k, v = _qkv(*case, 128, seed=7)
    q = q * 4  # large scores, so the cap matters
    o = torch.full_like(q, float("nan"))
    kernels["softcap_scalars"](q=q, k=k, v=v, o=o, softcap=15.0, scale=0.06)
    _check(o, _reference(q, k, v, mask=_causal(384, 384), scale=0.06, softcap=15.0), "softcap_scalars")
    uncapped = _reference(q, k, v, mask=_causal(384, 384), scale=0.06)
    assert (o.float() - uncapped).abs().max().item() > 0.05, "the cap changed nothing: is it applied?"


@pytest.mark.parametrize("case", [(1, 1000, 1000, 8, 2), (2, 256, 256, 4, 4)])
def test_causal_sliding_window(kernels, case):
    b, sq, sk, hq, hkv = case
    q, k, v = _qkv(*case, 128, seed=sum(case))
    o = torch.full_like(q, float("nan"))
    kernels["window_causal"](q=q, k=k, v=v, o=o)
    _check(o, _reference(q, k, v, mask=_causal(sq, sk, window=100)), f"window_causal {case}")


def test_window_bias_softcap_at_head_dim_96(kernels):
    case = (3, 264, 264, 4, 2)  # a per-batch bias: one launch per batch, in order (B > Hq/Hkv)
    b, sq, sk, hq, hkv = case
    q, k, v = _qkv(*case, 96, seed=3)
    bias = torch.randn(b, sq, sk, device="cuda").bfloat16()
    o = torch.full_like(q, float("nan"))
    kernels["window_full_d96"](q=q, k=k, v=v, o=o, bias=bias)
    mask = bias.float().unsqueeze(1).masked_fill(~_causal(sq, sk, window=50, causal=False), float("-inf"))
    _check(o, _reference(q, k, v, mask=mask, softcap=20.0), "window_full_d96")


def test_head_dim_192_on_the_256_tile(kernels):
    case = (2, 328, 328, 8, 2)
    q, k, v = _qkv(*case, 192, seed=11)
    o = torch.full_like(q, float("nan"))
    kernels["d192"](q=q, k=k, v=v, o=o)
    _check(o, _reference(q, k, v, mask=_causal(328, 328)), "d192")
