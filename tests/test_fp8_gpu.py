"""FP8 GEMMs on the H200 against fp64 references of the dequantised inputs.

Run on the device machine: ``pytest -m gpu tests/test_fp8_gpu.py``. Four kernels from tests/kernels/ are
compiled first, in parallel, in a fresh cache: blockwise-scaled cooperative (1x128 activation and 128x128
weight scales, DeepSeek/FlashInfer-Bench layout, plus a bias), blockwise-scaled pingpong (small M), per-tensor
scales with the promoting FP8 mainloop, and per-tensor e4m3 x e5m2 on the fast-accumulation schedule.

Every reference is computed from the FP8 values the kernel reads, dequantised with the same scales, in fp64:
what the kernel must reproduce up to its accumulation order and the rounding of d.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse_file
from ucutlass.errors import KernelRuntimeError

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ["fp8_blockwise.ucut", "fp8_blockwise_pingpong.ucut", "fp8_tensor.ucut", "fp8_fastaccum.ucut"]
E4M3_MAX = 448.0


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse_file(KERNELS / f).kernel() for f in FILES], kernel_cache)


def quantize_blocks(x: torch.Tensor, rows: int, cols: int, dtype=torch.float8_e4m3fn):
    """x [R, C] f32 -> (x_fp8 [R, C], scales [ceil(R/rows), ceil(C/cols)] f32): one scale = amax/448 per block,
    as SOL-ExecBench's BlockwiseScaler (ragged edges form smaller blocks)."""
    r, c = x.shape
    rb, cb = -(-r // rows), -(-c // cols)
    padded = torch.zeros(rb * rows, cb * cols, device=x.device)
    padded[:r, :c] = x
    amax = padded.reshape(rb, rows, cb, cols).abs().amax(dim=(1, 3))
    scales = (amax / E4M3_MAX).clamp_min(1e-12)
    q = (padded.reshape(rb, rows, cb, cols) / scales[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX)
    return q.reshape(rb * rows, cb * cols)[:r, :c].to(dtype).contiguous(), scales.contiguous()


def dequantize_blocks(q: torch.Tensor, scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The fp64 values the kernel computes with: q · scale of its block."""
    r, c = q.shape
    s = scales.double().repeat_interleave(rows, 0)[:r].repeat_interleave(cols, 1)[:, :c]
    return q.double() * s


def blockwise_inputs(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * k ** -0.5
    xq, xs = quantize_blocks(x, 1, 128)
    wq, ws = quantize_blocks(w, 128, 128)
    return xq, xs, wq, ws


@pytest.mark.parametrize("m,n,k", [(1, 4096, 7168), (77, 2048, 4096), (1000, 7680, 7680), (4096, 4096, 4096),
                                   (1000, 1000, 1040)])  # last: ragged N and a partial last K block
def test_blockwise_cooperative_with_bias(kernels, m, n, k):
    xq, xs, wq, ws = blockwise_inputs(m, n, k)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    d = poisoned(m, n)
    kernels["fp8_blockwise"](a=xq, b=wq, d=d, bias=bias, scale_a=xs, scale_b=ws)
    ref = dequantize_blocks(xq, xs, 1, 128) @ dequantize_blocks(wq, ws, 128, 128).T + bias.double()
    assert not d.isnan().any()
    assert rel_err(d, ref) < 5e-3
    # not a lower-precision shortcut: ignoring the scales is far off
    assert rel_err(d, xq.double() @ wq.double().T) > 0.5


@pytest.mark.parametrize("m", [1, 16, 77, 1000])
def test_blockwise_pingpong_small_m(kernels, m):
    n, k = 7168, 2048
    xq, xs, wq, ws = blockwise_inputs(m, n, k, seed=m)
    d = poisoned(m, n)
    kernels["fp8_blockwise_pingpong"](a=xq, b=wq, d=d, scale_a=xs, scale_b=ws)
    ref = dequantize_blocks(xq, xs, 1, 128) @ dequantize_blocks(wq, ws, 128, 128).T
    assert not d.isnan().any()
    assert rel_err(d, ref) < 5e-3


def test_blockwise_scales_are_per_block(kernels):
    """Scaling one 1x128 block of A and one 128x128 block of B changes exactly the outputs that read them."""
    m, n, k = 256, 512, 1024
    xq, xs, wq, ws = blockwise_inputs(m, n, k, seed=3)
    d0, d1 = poisoned(m, n), poisoned(m, n)
    kernels["fp8_blockwise"](a=xq, b=wq, d=d0, bias=torch.zeros(n, device="cuda", dtype=torch.bfloat16),
                             scale_a=xs, scale_b=ws)
    xs2, ws2 = xs.clone(), ws.clone()
    xs2[5, 3] *= 4.0  # row 5, K block 3
    ws2[2, 6] *= 0.25  # N rows 256..383, K block 6
    kernels["fp8_blockwise"](a=xq, b=wq, d=d1, bias=torch.zeros(n, device="cuda", dtype=torch.bfloat16),
                             scale_a=xs2, scale_b=ws2)
    changed = d0 != d1
    expected = torch.zeros(m, n, dtype=torch.bool, device="cuda")
    expected[5, :] = True  # row 5 reads A's block (5, K block 3) for every n
    expected[:, 256:384] = True  # every row reads B's block (N block 2, K block 6) for n in 256..383
    assert not (changed & ~expected).any()  # nothing else moved
    assert changed[expected].float().mean() > 0.99
    ref = dequantize_blocks(xq, xs2, 1, 128) @ dequantize_blocks(wq, ws2, 128, 128).T
    assert rel_err(d1, ref) < 5e-3


@pytest.mark.parametrize("m", [1, 1000, 4096])
def test_per_tensor_scales(kernels, m):
    n, k = 4096, 4096
    g = torch.Generator(device="cuda").manual_seed(m)
    x, w = torch.randn(m, k, device="cuda", generator=g) * 3, torch.randn(n, k, device="cuda", generator=g) * 0.02
    sa = (x.abs().amax() / E4M3_MAX).reshape(1)
    sb = (w.abs().amax() / E4M3_MAX).reshape(1)
    xq, wq = (x / sa).to(torch.float8_e4m3fn), (w / sb).to(torch.float8_e4m3fn)
    d = poisoned(m, n)
    kernels["fp8_tensor"](a=xq, b=wq, d=d, scale_a=sa, scale_b=sb)
    ref = F.silu((xq.double() * sa.double()) @ (wq.double() * sb.double()).T)
    assert not d.isnan().any()
    assert rel_err(d, ref) < 5e-3
    # the scales are read from device memory on every call: new values, same kernel, no host sync
    d2 = poisoned(m, n)
    kernels["fp8_tensor"](a=xq, b=wq, d=d2, scale_a=sa * 2, scale_b=sb)
    assert rel_err(d2, F.silu(2 * (xq.double() * sa.double()) @ (wq.double() * sb.double()).T)) < 5e-3


@pytest.mark.parametrize("m", [1, 1000])
def test_fast_accumulation_e4m3_by_e5m2(kernels, m):
    n, k = 2048, 4096
    g = torch.Generator(device="cuda").manual_seed(7 + m)
    x, w = torch.randn(m, k, device="cuda", generator=g), torch.randn(n, k, device="cuda", generator=g)
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([0.125], device="cuda")
    xq, wq = (x / sa).to(torch.float8_e4m3fn), (w / sb).to(torch.float8_e5m2)
    d = poisoned(m, n, dtype=torch.float32)
    kernels["fp8_fastaccum"](a=xq, b=wq, d=d, scale_a=sa, scale_b=sb)
    ref = (xq.double() * 0.5) @ (wq.double() * 0.125).T
    assert not d.isnan().any()
    assert rel_err(d, ref) < 2e-2  # fast accumulation: the FP8 wgmma's own accumulator precision over K


def test_scale_argument_errors_are_named(kernels):
    g = kernels["fp8_blockwise_pingpong"]
    m, n, k = 64, 1024, 1024
    xq, xs, wq, ws = blockwise_inputs(m, n, k)
    d = poisoned(m, n)
    with pytest.raises(KernelRuntimeError, match=r"scale_b: expected shape \(8, 8\)"):
        g(a=xq, b=wq, d=d, scale_a=xs, scale_b=ws[:, :4].contiguous())
    with pytest.raises(KernelRuntimeError, match="scale_a: expected f32"):
        g(a=xq, b=wq, d=d, scale_a=xs.double(), scale_b=ws)
    with pytest.raises(KernelRuntimeError, match="scale_a: strides"):
        g(a=xq, b=wq, d=d, scale_a=xs.t().contiguous().t(), scale_b=ws)
    with pytest.raises(KernelRuntimeError, match="dtype"):
        g(a=xq.to(torch.bfloat16), b=wq, d=d, scale_a=xs, scale_b=ws)
    with pytest.raises(KernelRuntimeError, match="per-tensor scale is one element"):
        kernels["fp8_tensor"](a=xq, b=wq, d=d, scale_a=xs, scale_b=torch.ones(1, device="cuda"))
    assert d.isnan().all()  # nothing ran
