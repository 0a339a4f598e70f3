"""Attention (FMHA) kernels on the GPU: correct against torch SDPA in fp32, LSE, GQA and MHA, argument errors.

Run on the H200: ``pytest -m gpu tests/test_attention_gpu.py``. Four sm90 kernels are compiled first, in parallel,
in a fresh cache (each ~1-3 minutes of nvcc); together they cover causal and non-causal masks, GQA (Hq = 4·Hkv) and
MHA, d = 64 and d = 128, BSHD and BHSD, bf16 and f16, both schedules, persistent and not, a custom scale and the
LSE output, on sequence lengths that are and are not multiples of the tiles. The reference is
``torch.nn.functional.scaled_dot_product_attention`` on the same inputs upcast to fp32 (the math backend).
"""

from __future__ import annotations

import math

import pytest

from gpu_build import build_and_load  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse
from ucutlass.errors import KernelRuntimeError

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _kernel(name: str, dtype: str, layout: str, d: int, kv_heads: str, settings: str, lse: bool) -> str:
    def dims(seq: str, heads: str) -> str:
        return f"[B, {seq}, {heads}, {d}]" if layout == "bshd" else f"[B, {heads}, {seq}, {d}]"

    return (f"kernel {name} : attention {{\n  target = sm90\n"
            f"  q : {dtype}{dims('Sq', 'Hq')}\n  k : {dtype}{dims('Sk', kv_heads)}\n"
            f"  v : {dtype}{dims('Sk', kv_heads)}\n  o : {dtype}{dims('Sq', 'Hq')}\n"
            + ("  lse : f32[B, Hq, Sq]\n" if lse else "") + f"  {settings}\n}}\n")


#: name -> (source, dtype, layout, head dim, causal, scale or None, has lse, kv declared over Hq)
SPECS = {
    # the shipped problem's configuration (BSHD, d = 128, causal), with the LSE output
    "causal_lse": ("bf16", "bshd", 128, "Hkv", "mask = causal   tile = 128x128   schedule = cooperative", True),
    # non-causal, ping-pong (always persistent), BlockKV 64
    "full_pingpong": ("bf16", "bshd", 128, "Hkv", "mask = none   tile = 128x64   schedule = pingpong", False),
    # f16, BHSD, d = 64, causal, persistent cooperative, 4 KV stages, a custom softmax scale
    "f16_bhsd_causal": ("f16", "bhsd", 64, "Hkv",
                        "mask = causal   persistent = true   stages = 4   scale = 0.1", False),
    # MHA by declaration (K and V over Hq), BHSD, d = 64, non-causal, LSE
    "mha_bhsd_lse": ("bf16", "bhsd", 64, "Hq", "mask = none   tile = 128x128", True),
}


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse(_kernel(name, dt, lay, d, kv, settings, lse), f"{name}.ucut").kernel()
                           for name, (dt, lay, d, kv, settings, lse) in SPECS.items()], kernel_cache)


def _tensors(dtype, layout, b, sq, sk, hq, hkv, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(s, h):
        shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
        return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)

    return rnd(sq, hq), rnd(sk, hkv), rnd(sk, hkv)


def _reference(q, k, v, layout, causal, scale):
    """fp32 SDPA (GQA through enable_gqa: K/V heads repeated by torch) and the fp32 LSE, both [B, Hq, Sq, ·]."""
    to_bhsd = (lambda t: t.float().transpose(1, 2)) if layout == "bshd" else (lambda t: t.float())
    qf, kf, vf = to_bhsd(q), to_bhsd(k), to_bhsd(v)
    out = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale, enable_gqa=True)
    rep = qf.shape[1] // kf.shape[1]
    s = (qf @ kf.repeat_interleave(rep, dim=1).transpose(-1, -2)) * (scale if scale else 1 / math.sqrt(qf.shape[-1]))
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return (out.transpose(1, 2) if layout == "bshd" else out), lse


CASES = [  # (B, Sq, Sk, Hq, Hkv): GQA and MHA, lengths that are and are not multiples of 128 (and of 64);
    # example 88 needs Sq a multiple of 8 (test_ragged_sq_is_refused_by_name)
    (2, 256, 256, 8, 2),
    (1, 1000, 1000, 8, 2),
    (2, 328, 328, 4, 4),
    (1, 72, 72, 2, 1),
    (1, 200, 520, 4, 1),     # Sq < Sk
    (3, 136, 136, 4, 2),     # BSHD with B > Hq/Hkv: one launch per query head of a group, on forked streams
]


def _run_case(kern, name, case):
    dt_name, layout, d, kv_decl, settings, has_lse = SPECS[name]
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dt_name]
    b, sq, sk, hq, hkv = case
    if kv_decl == "Hq":
        hkv = hq  # K and V declared over the query heads: MHA only
    causal = "causal" in settings
    scale = 0.1 if "scale = 0.1" in settings else None
    q, k, v = _tensors(dtype, layout, b, sq, sk, hq, hkv, d, seed=sum(case))
    o = torch.full_like(q, float("nan"))
    args = {"q": q, "k": k, "v": v, "o": o}
    if has_lse:
        args["lse"] = torch.full((b, hq, sq), float("nan"), device="cuda", dtype=torch.float32)
    kern(**args)
    torch.cuda.synchronize()
    ref, ref_lse = _reference(q, k, v, layout, causal, scale)
    assert not o.isnan().any(), "unwritten or NaN outputs"
    err = (o.float() - ref).abs()
    # One bf16 (f16) rounding of P before P·V and one of O: a few units of 2^-9 (2^-11) relative, plus cancellation.
    atol, rtol = (1e-2, 2e-2) if dtype is torch.bfloat16 else (2e-3, 4e-3)
    bad = err > atol + rtol * ref.abs()
    assert not bad.any(), f"{name} {case}: {int(bad.sum())} elements off, max |err| {err.max().item():.3g}"
    assert err.mean().item() < atol / 4, f"{name} {case}: mean |err| {err.mean().item():.3g}"
    # torch's own low-precision SDPA as a yardstick: ours is not much worse than it.
    qb, kb, vb = ((t.transpose(1, 2) if layout == "bshd" else t) for t in (q, k, v))
    torch_lp = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, scale=scale, enable_gqa=True)
    torch_lp = torch_lp.transpose(1, 2) if layout == "bshd" else torch_lp
    torch_err = (torch_lp.float() - ref).abs().mean().item()
    assert err.mean().item() <= 4 * torch_err + 1e-5
    if has_lse:
        lse = args["lse"]
        assert not lse.isnan().any()
        assert (lse - ref_lse).abs().max().item() < 1e-2, f"{name} {case}: LSE off"


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}_Sq{}_Sk{}_H{}-{}".format(*c))
@pytest.mark.parametrize("name", list(SPECS))
def test_matches_fp32_sdpa(kernels, name, case):
    if "causal" in SPECS[name][4] and case[1] > case[2]:
        pytest.skip("causal needs Sq <= Sk")
    _run_case(kernels[name], name, case)


def test_large_gqa_causal_prefill(kernels):
    """The shipped problem's shape class at full size: B=1, S=4000 (not a multiple of 128), 32/8 heads."""
    _run_case(kernels["causal_lse"], "causal_lse", (1, 4000, 4000, 32, 8))


def test_gqa_heads_are_not_mixed_up(kernels):
    """Each query head reads its own KV head h // (Hq/Hkv): zeroing V of KV head 1 zeroes exactly heads 4..7."""
    b, s, hq, hkv, d = 1, 256, 8, 2, 128
    q, k, v = _tensors(torch.bfloat16, "bshd", b, s, s, hq, hkv, d)
    v[:, :, 1] = 0
    o = torch.full_like(q, float("nan"))
    kernels["full_pingpong"](q=q, k=k, v=v, o=o)
    torch.cuda.synchronize()
    assert (o[:, :, 4:] == 0).all() and (o[:, :, :4].abs().amax() > 0.1)


def test_bad_arguments_are_named(kernels):
    kern = kernels["causal_lse"]
    q, k, v = _tensors(torch.bfloat16, "bshd", 1, 256, 256, 8, 3, 128)
    o = torch.empty_like(q)
    lse = torch.empty(1, 8, 256, device="cuda")
    with pytest.raises(KernelRuntimeError, match="multiple of Hkv"):
        kern(q=q, k=k, v=v, o=o, lse=lse)
    q, k, v = _tensors(torch.bfloat16, "bshd", 1, 256, 256, 8, 2, 128)
    with pytest.raises(KernelRuntimeError, match="dtype"):
        kern(q=q.half(), k=k, v=v, o=o, lse=lse)
    with pytest.raises(KernelRuntimeError, match="contiguous"):
        kern(q=q.transpose(1, 2), k=k, v=v, o=o, lse=lse)
    with pytest.raises(KernelRuntimeError, match="Sq <= Sk"):
        q2, _, _ = _tensors(torch.bfloat16, "bshd", 1, 512, 256, 8, 2, 128)
        kern(q=q2, k=k, v=v, o=torch.empty_like(q2), lse=torch.empty(1, 8, 512, device="cuda"))


def test_ragged_sq_is_refused_by_name(kernels):
    """Sq = 77: example 88's can_implement refuses it; the error says why and what to pad to, before any launch."""
    q, k, v = _tensors(torch.bfloat16, "bshd", 1, 77, 77, 2, 1, 128)
    o = torch.full_like(q, float("nan"))
    with pytest.raises(KernelRuntimeError, match="Sq = 77 is not a multiple of 8.*pad the sequence to 80"):
        kernels["full_pingpong"](q=q, k=k, v=v, o=o)
    assert o.isnan().all()


def test_two_builds_of_one_kernel_type_run_in_one_process(kernel_cache):
    """Two .so files holding the same CUTLASS kernel type (they differ only in how the softmax scale is spelled)
    and the fixture's causal_lse (the same type again) run in one process. CUTLASS's device adapter keeps its
    `initialized` flag in a function-local static; bound STB_GNU_UNIQUE it was one per process, so the later
    .so's never set their shared-memory attribute and failed every launch (status 307, Error Internal)."""
    settings = "mask = causal   tile = 128x128   schedule = cooperative"
    scale = 1 / math.sqrt(128)
    pair = build_and_load([parse(_kernel("auto_scale", "bf16", "bshd", 128, "Hkv", settings, False)).kernel(),
                           parse(_kernel("literal_scale", "bf16", "bshd", 128, "Hkv", f"{settings}   scale = {scale!r}",
                                         False)).kernel()], kernel_cache)
    assert pair["auto_scale"].so_path != pair["literal_scale"].so_path
    q, k, v = _tensors(torch.bfloat16, "bshd", 2, 256, 256, 8, 2, 128)
    ref, _ = _reference(q, k, v, "bshd", True, None)
    for name, kern in pair.items():
        o = torch.full_like(q, float("nan"))
        kern(q=q, k=k, v=v, o=o)
        torch.cuda.synchronize()
        assert (o.float() - ref).abs().max().item() < 0.05, name


def test_forked_launches_join_the_callers_stream(kernels):
    """BSHD GQA with B > Hq/Hkv runs several launches on forked streams: work queued after the call on the
    caller's (non-default) stream sees the finished output, also when the call is captured in a CUDA graph."""
    b, s, hq, hkv, d = 6, 512, 8, 2, 128
    q, k, v = _tensors(torch.bfloat16, "bshd", b, s, s, hq, hkv, d)
    ref, _ = _reference(q, k, v, "bshd", True, None)
    kern = kernels["causal_lse"]
    lse = torch.empty(b, hq, s, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = torch.full_like(q, float("nan"))
        kern(q=q, k=k, v=v, o=o, lse=lse)
        seen = o.clone()  # queued on `side` right after the call
    torch.cuda.synchronize()
    assert not seen.isnan().any() and (seen.float() - ref).abs().max().item() < 0.05

    o = torch.full_like(q, float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kern(q=q, k=k, v=v, o=o, lse=lse)
        seen = o.clone()
    o.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert not seen.isnan().any() and (seen.float() - ref).abs().max().item() < 0.05
