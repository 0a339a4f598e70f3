"""Extra epilogue outputs, row/column reductions and casts on the GPU, against fp64 torch references.

Run on the H200: ``pytest -m gpu tests/test_evt_gpu.py``. Two kernels (tests/kernels/evt_outputs.ucut,
tests/kernels/evt_reduce_pingpong.ucut) are compiled first, in a fresh cache:
- evt_outputs (cooperative 128x128x64): pre = bf16(acc + bias) stored, d = gelu(pre), rowmax = max over n of
  bf16(d's value) (Sm90ColReduction, max), colsum = sum over m of gelu(pre) in f32 (Sm90RowReduction, sum);
- evt_reduce_pingpong (pingpong 64x128x64, source c): z = acc * scale + c stored f32 column-major,
  rowsum = sum over n of z, colmax = max over m of f16(silu(z)), d = silu(z).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse_file

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ["evt_outputs.ucut", "evt_reduce_pingpong.ucut"]


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse_file(KERNELS / f).kernel() for f in FILES], kernel_cache)


@pytest.mark.parametrize("m,n,k", [(77, 1024, 512), (1000, 4096, 2048), (4096, 2304, 1024)])
def test_stored_pre_activation_row_max_and_column_sum(kernels, m, n, k):
    g = kernels["evt_outputs"]
    for seed in (0, 1):  # a second call must not see the first one's partial reductions (the workspace resets)
        torch.manual_seed(seed)
        a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
        d, pre = poisoned(m, n), poisoned(m, n)
        rowmax, colsum = poisoned(m, dtype=torch.float32), poisoned(n, dtype=torch.float32)
        g(a=a, b=w, d=d, bias=bias, pre=pre, rowmax=rowmax, colsum=colsum)
        torch.cuda.synchronize()
        for t in (d, pre, rowmax, colsum):
            assert not t.isnan().any()
        # fp64 reference; pre is rounded to bf16 as stored, and d reads the rounded value
        ref_pre = (a.double() @ w.double().T + bias.double()).to(torch.bfloat16).double()
        ref_y = F.gelu(ref_pre)
        assert rel_err(pre, ref_pre) < 1e-2
        assert rel_err(d, ref_y) < 1e-2
        # d as the kernel read it: gelu of the stored pre (not of the unrounded acc + bias)
        assert rel_err(d, F.gelu(pre.double())) < 5e-3
        # rowmax reduces cast(y, bf16): the very values d holds, so the max matches d's exactly
        assert torch.equal(rowmax, d.float().amax(dim=1))
        # colsum reduces y unrounded, in f32
        scale = ref_y.abs().sum(dim=0)
        assert ((colsum.double() - ref_y.sum(dim=0)).abs() <= 1e-2 * scale + 1e-3).all()


@pytest.mark.parametrize("m,n,k", [(64, 4096, 4096), (332, 2048, 1024), (2048, 1536, 2048)])
def test_f32_column_major_output_row_sum_and_f16_column_max(kernels, m, n, k):
    g = kernels["evt_reduce_pingpong"]
    a, w, c = randn(m, k), randn(n, k, std=k ** -0.5), randn(m, n)
    scale = torch.rand(m, device="cuda") + 0.5
    d = poisoned(m, n)
    z = torch.full((n, m), float("nan"), device="cuda").t()  # [M, N] column-major: M contiguous (M % 4 == 0)
    rowsum, colmax = poisoned(m, dtype=torch.float32), poisoned(n, dtype=torch.float32)
    g(a=a, b=w, c=c, d=d, scale=scale, z=z, rowsum=rowsum, colmax=colmax)
    torch.cuda.synchronize()
    for t in (d, z, rowsum, colmax):
        assert not t.isnan().any()
    ref_z = (a.double() @ w.double().T) * scale.double()[:, None] + c.double()
    assert rel_err(z, ref_z) < 1e-4  # stored in f32: only the f32 accumulation differs
    assert rel_err(d, F.silu(ref_z)) < 1e-2
    tol = 5e-4 * ref_z.abs().sum(dim=1) + 1e-4  # a lost 128-column tile would be ~3e-3 of it
    assert ((rowsum.double() - ref_z.sum(dim=1)).abs() <= tol).all()
    ref_colmax = F.silu(ref_z).to(torch.float16).double().amax(dim=0)
    assert ((colmax.double() - ref_colmax).abs() <= 2e-3 * ref_colmax.abs() + 1e-3).all()
    # the f16 rounding is really applied: every column max is an f16 value
    assert torch.equal(colmax, colmax.half().float())
