"""Generated kernels on the GPU: correct against fp32/fp64 torch, ragged shapes, argument errors.

Run on the H200 (device machine): ``pytest -m gpu tests/test_runtime_gpu.py``. All kernels of
tests/kernels/ are compiled first, in parallel (one nvcc per core), in a fresh cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.errors import KernelRuntimeError
from ucutlass.runtime import CompiledKernel

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    files = sorted(KERNELS.glob("*.ucut"))
    parsed = [parse_file(f).kernel() for f in files]
    # attention: tests/test_attention_gpu.py; grouped_gemm: tests/test_grouped_gpu.py; conv: tests/test_conv_gpu.py
    return build_and_load([k for k in parsed if k.family not in ("attention", "grouped_gemm", "conv")], kernel_cache)


def test_sm100_kernels_are_refused_on_this_gpu_before_launching(kernels):
    """The sm100 files compile for sm_100a; on the H200 (sm_90) the call says so and launches nothing."""
    if torch.cuda.get_device_capability() == (10, 0):
        pytest.skip("a B200 runs sm100 kernels")
    m, n, k = 256, 256, 128
    d = poisoned(m, n)
    with pytest.raises(KernelRuntimeError, match=r"kernel built for sm100 \(Blackwell, sm_100a\); this GPU is "
                                                 r"sm_\d+ \(.*\): compile only here"):
        kernels["sm100_bias_gelu"](a=randn(m, k), b=randn(n, k), d=d, bias=randn(n))
    assert d.isnan().all()  # nothing was written


@pytest.mark.parametrize("m", [1, 77, 1000, 4096])
def test_evt_full(kernels, m):
    n, k = 4096, 4096
    a, w = randn(m, k), randn(n, k, std=k ** -0.5)
    rowscale = torch.rand(m, device="cuda") + 0.5
    bias, residual = randn(n), randn(m, n)
    d = poisoned(m, n)
    kernels["evt_full"](a=a, b=w, d=d, rowscale=rowscale, alpha=0.75, bias=bias, residual=residual)
    acc = a.double() @ w.double().T
    ref = F.gelu(acc * rowscale.double()[:, None] * 0.75 + bias.double(), approximate="tanh") + residual.double() * 0.5
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


@pytest.mark.parametrize("m,n,k", [(1, 6400, 1600), (64, 6400, 1600), (1000, 4608, 3584), (3011, 128, 2048)])
def test_pingpong_bias_gelu_ragged(kernels, m, n, k):
    a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
    d = poisoned(m, n)
    kernels["pingpong_bias_gelu"](a=a, b=w, d=d, bias=bias)
    ref = F.gelu(a.double() @ w.double().T + bias.double())
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


def test_column_major_a_with_source_and_relu(kernels):
    m, n, k = 1000, 2048, 4096
    a_km = randn(k, m, dtype=torch.float16)  # memory K×M row-major == A[M, K] column-major
    a = a_km.t()
    w, c = randn(n, k, dtype=torch.float16, std=k ** -0.5), randn(m, n, dtype=torch.float16)
    d = poisoned(m, n, dtype=torch.float16)
    kernels["src_colmajor_f16"](a=a, b=w, c=c, d=d)
    ref = torch.relu(a.double() @ w.double().T - c.double())
    assert rel_err(d, ref) < 5e-3


@pytest.mark.parametrize("m", [1, 16, 128])
def test_stream_k_long_k(kernels, m):
    n, k = 4096, 14336
    a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
    d = poisoned(m, n, dtype=torch.float32)
    kernels["stream_k"](a=a, b=w, d=d, bias=bias)
    ref = F.silu(a.double() @ w.double().T + bias.double())
    assert rel_err(d, ref) < 2e-3


@pytest.mark.parametrize("split_k,raster,swizzle", [(4, "along_n", 2), (8, "along_m", 1), (2, "auto", 8)])
def test_run_time_settings_reuse_the_build(kernels, split_k, raster, swizzle):
    """split_k / raster / swizzle are tile-scheduler arguments: the stream_k build serves them all."""
    import dataclasses

    from ucutlass.ir import RasterOrder

    base = kernels["stream_k"]
    k = dataclasses.replace(base.kernel, split_k=split_k, raster=RasterOrder(raster), swizzle=swizzle)
    g = CompiledKernel(base.so_path, k)
    m, n, kk = 16, 4096, 14336
    a, w, bias = randn(m, kk), randn(n, kk, std=kk ** -0.5), randn(n)
    d = poisoned(m, n, dtype=torch.float32)
    g(a=a, b=w, d=d, bias=bias)
    assert g.workspace_size(m, n, kk) > 0  # split-K reduces partial tiles through the workspace
    assert rel_err(d, F.silu(a.double() @ w.double().T + bias.double())) < 2e-3


def test_b_stored_k_by_n_and_two_acc_reads(kernels):
    m, n, k = 2048, 4096, 1024
    a, b = randn(m, k), randn(k, n, std=k ** -0.5)
    d = poisoned(m, n)
    kernels["plain_kn"](a=a, b=b, d=d)
    acc = a.double() @ b.double()
    assert rel_err(d, torch.sigmoid(acc) * torch.tanh(acc)) < 1e-2


def test_leading_dims_fold_into_m_and_side_stream(kernels):
    a, w, bias = randn(4, 250, 1600), randn(6400, 1600, std=1600 ** -0.5), randn(6400)
    d = poisoned(4, 250, 6400)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        kernels["pingpong_bias_gelu"](a=a, b=w, d=d, bias=bias)
    s.synchronize()
    assert rel_err(d, F.gelu(a.double() @ w.double().T + bias.double())) < 1e-2


def test_argument_errors_are_named(kernels):
    g = kernels["pingpong_bias_gelu"]
    a, w, bias, d = randn(64, 1600), randn(6400, 1600), randn(6400), poisoned(64, 6400)
    with pytest.raises(KernelRuntimeError, match="dtype"):
        g(a=a.float(), b=w, d=d, bias=bias)
    with pytest.raises(KernelRuntimeError, match="multiple of 16"):
        g(a=randn(64, 1601), b=randn(6400, 1601), d=d, bias=bias)
    with pytest.raises(KernelRuntimeError, match="K = 1608, but another operand gives K = 1600"):
        g(a=a, b=randn(6400, 1608), d=d, bias=bias)
    with pytest.raises(KernelRuntimeError, match="missing"):
        g(a=a, b=w, d=d)
    with pytest.raises(KernelRuntimeError, match="CUDA"):
        g(a=a.cpu(), b=w.cpu(), d=d.cpu(), bias=bias.cpu())
    with pytest.raises(KernelRuntimeError, match="strides"):
        g(a=randn(1600, 64).t(), b=w, d=d, bias=bias)


def test_matches_torch_for_the_shipped_problem_binding(kernels, tmp_path):
    """A problem's kernel.ucut, compiled and graded through the grader's worker, passes every trial."""
    from ucutlass.bind import bind
    from ucutlass.lang import parse_file as pf
    from ucutlass.grader import Grader
    from ucutlass.problem import find_problem
    from ucutlass.solution import solution_for

    problem = find_problem("o_proj_residual_llama3_1_8b")
    program = pf(problem.spec_path).resolve({"o_proj.tile": "128x128x64", "o_proj.cluster": "1x1x1",
                                             "o_proj.schedule": "cooperative", "o_proj.scheduler": "stream_k",
                                             "o_proj.split_k": "2", "o_proj.swap_ab": "false"})
    kernel = program.kernel()
    bind(kernel, problem)
    result = build_kernels([kernel], root=tmp_path, timeout_s=900)[0]
    assert result.ok, result.log[-2000:]
    ref = solution_for(result.so_path, program.source, "kernel.ucut", kernel.name, kernel.config_name())
    with Grader(problem) as grader:
        records = grader.grade(ref, list(problem.workloads[:4]))
    assert all(r.passed for r in records), [(r.label, r.status, r.reason) for r in records]
    assert all(r.latency_ms > 0 and r.reference_latency_ms > 0 for r in records)
