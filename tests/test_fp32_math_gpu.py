"""``math = 3xtf32`` compiled and run on the H200 against torch's f32 matmul with TF32 off (issue 20, item 2).

Run on the H200: ``pytest -m gpu tests/test_fp32_math_gpu.py``. One 3xTF32 kernel (bias + gelu_tanh, the first GEMM
of examples/pipeline_fp32_flux_ffn.ucut) and one plain one, on f32 operands with M not a multiple of the tile; the
error against an fp64 reference must be close to torch's f32 matmul (TF32 off) and well below a TF32 matmul's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse_file

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
EX = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    ffn = parse_file(EX / "pipeline_fp32_flux_ffn.ucut")
    plain = parse_file(EX / "pipeline_fp32_qkv_norm.ucut").kernel()
    return build_and_load([ffn.kernel("fc1"), plain], kernel_cache)


def _torch_matmul(a, b, tf32: bool):
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return a @ b.T
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("m, n, k", [(131, 1024, 3072), (1000, 3072, 1024)])
def test_3xtf32_is_as_accurate_as_f32_and_far_better_than_tf32(kernels, m, n, k):
    torch.manual_seed(0)
    a, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    d = poisoned(m, n, dtype=torch.float32)
    kernels["proj"](a=a, b=b, d=d)
    exact = a.double() @ b.double().T
    err = rel_err(d, exact)
    f32_err = rel_err(_torch_matmul(a, b, tf32=False), exact)
    tf32_err = rel_err(_torch_matmul(a, b, tf32=True), exact)
    assert not torch.isnan(d).any()
    # 3xTF32 drops the small·small product and rounds the parts to TF32 (about 2^-21 a product): within a few times
    # an f32 GEMM's error, and over a hundred times below TF32's (about 2^-11 a product)
    assert err < max(8 * f32_err, 2e-6), (err, f32_err)
    assert err < tf32_err / 50, (err, tf32_err)


def test_3xtf32_bias_gelu_tanh_epilogue(kernels):
    torch.manual_seed(1)
    m, n, k = 131, 1024, 3072
    a, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda") / k ** 0.5
    bias = torch.randn(n, device="cuda")
    d = poisoned(m, n, dtype=torch.float32)
    kernels["fc1"](a=a, b=b, d=d, bias=bias)
    ref = F.gelu(a.double() @ b.double().T + bias.double(), approximate="tanh")
    assert not torch.isnan(d).any()
    assert (d.double() - ref).abs().max().item() < 1e-4
