"""Swapped (swap_ab), narrow-N and split-K kernels on the GPU, against fp64 torch references.

Run on the H200: ``pytest -m gpu tests/test_swap_ab_gpu.py``. The kernels are tests/kernels/swap_*.ucut and
narrow_n8_stream_k.ucut (built in parallel into the session's kernel cache, shared with tests/test_runtime_gpu.py), plus
an inline dispatch whose small-M kernel swaps through ``swap_ab = auto``. Shapes: odd M (1, 3, 7, 17, 63) where a and
d are row-major, K not a multiple of tile K (K tails), N not a multiple of the tile side that runs along it (tile M
once swapped); every output is poisoned with NaN first, so an element the kernel does not write fails.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse, parse_file
from ucutlass.ir import ReductionMode
from ucutlass.runtime import CompiledKernel

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ["swap_bias_gelu_n16", "swap_residual_outputs_stream_k", "swap_scale_pingpong_n8", "swap_colmajor_stream_k_n8",
         "swap_split_k_f32_n64", "swap_kn_weight_n32", "swap_fp8_tensor_n16", "swap_tf32_n16", "swap_align4_n16",
         "narrow_n8_stream_k"]

ODD_M = [1, 3, 7, 17, 63]
# (N, K): N a multiple of 8 (16-byte rows) but not of 64/128/256; K a multiple of 8 but not of 64/128
RAGGED_NK = [(1000, 1000), (4104, 584), (136, 4040)]

DISPATCH = """
kernel decode : gemm when M <= 32 {
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
  tile = 128x32x128   schedule = cooperative   scheduler = stream_k      # swap_ab = auto: swaps (M <= 32)
  epilogue { bias : bf16[N]  d = relu(acc + bias) }
}
kernel large : gemm {
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
  tile = 128x32x128   schedule = cooperative   scheduler = stream_k      # the same settings, not swapped
  epilogue { bias : bf16[N]  d = relu(acc + bias) }
}
"""


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    files = [parse_file(KERNELS / f"{name}.ucut").kernel() for name in FILES]
    return build_and_load(files + list(parse(DISPATCH).dispatch()), kernel_cache)


def matmul(a, b_nk):
    """a · bᵀ in fp64 (b as the nn.Linear weight [N, K])."""
    return a.double() @ b_nk.double().T


def with_knobs(base: CompiledKernel, **knobs) -> CompiledKernel:
    """The same build with other run-time settings (split_k, reduction_mode, …)."""
    return CompiledKernel(base.so_path, dataclasses.replace(base.kernel, **knobs))


# --- row and column broadcasts -------------------------------------------------------------------------------

@pytest.mark.parametrize("m", ODD_M + [16, 64, 300])
@pytest.mark.parametrize("n,k", RAGGED_NK)
def test_swapped_bias_gelu(kernels, m, n, k):
    g = kernels["swap_bias_gelu_n16"]
    assert g.abi.extents == ("N", "M", "K") and g.info["swap_ab"] is True
    a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
    d = poisoned(m, n)
    g(a=a, b=w, d=d, bias=bias)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, F.gelu(matmul(a, w) + bias.double(), approximate="tanh")) < 1e-2


@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("n,k", RAGGED_NK)
def test_swapped_row_scale_scalar_and_residual_on_pingpong(kernels, m, n, k):
    g = kernels["swap_scale_pingpong_n8"]
    a, w = randn(m, k, dtype=torch.float16), randn(n, k, dtype=torch.float16, std=k ** -0.5)
    scale, res = torch.rand(m, device="cuda") + 0.5, randn(m, n, dtype=torch.float16)
    d = poisoned(m, n, dtype=torch.float32)
    g(a=a, b=w, d=d, scale=scale, alpha=0.75, res=res)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    ref = torch.relu(matmul(a, w) * scale.double()[:, None] * 0.75) + res.double()
    assert rel_err(d, ref) < 2e-3


# --- residual c, an extra output and both reductions, stream-K and split-K -----------------------------------

@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("n,k", [(1000, 1000), (4104, 4040)])
@pytest.mark.parametrize("split_k,mode", [(1, "deterministic"), (4, "deterministic"), (3, "nondeterministic")])
def test_swapped_residual_aux_output_and_reductions(kernels, m, n, k, split_k, mode):
    g = with_knobs(kernels["swap_residual_outputs_stream_k"], split_k=split_k, reduction_mode=ReductionMode(mode))
    for seed in (0, 1):  # a second call must not see the first one's partial sums (the workspace resets)
        torch.manual_seed(seed)
        a, w, c, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(m, n), randn(n)
        d, pre = poisoned(m, n), poisoned(m, n)
        rowmax, colsum = poisoned(m, dtype=torch.float32), poisoned(n, dtype=torch.float32)
        g(a=a, b=w, c=c, d=d, bias=bias, pre=pre, rowmax=rowmax, colsum=colsum)
        torch.cuda.synchronize()
        for t in (d, pre, rowmax, colsum):
            assert not t.isnan().any()
        ref_pre = matmul(a, w) + bias.double() + c.double()
        assert rel_err(pre, ref_pre) < 1e-2
        assert rel_err(d, F.silu(pre.double())) < 1e-2  # d reads pre as stored
        # rowmax reduces pre over n (a row reduction of CUTLASS's M once swapped): the max of what pre holds
        assert ((rowmax.double() - pre.double().amax(dim=1)).abs() <= 1e-2 * pre.double().abs().amax(dim=1) + 1e-2).all()
        ref_colsum = F.silu(ref_pre).sum(dim=0)
        scale = F.silu(ref_pre).abs().sum(dim=0)
        assert ((colsum.double() - ref_colsum).abs() <= 1e-2 * scale + 1e-3).all()


@pytest.mark.parametrize("m", [1, 7, 63, 100])
@pytest.mark.parametrize("split_k", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["deterministic", "nondeterministic"])
def test_swapped_split_k_long_k(kernels, m, split_k, mode):
    """Decode shapes of FlashInfer-Bench_008 (N 4096, K 14336) and a K tail: the weight spread over every SM."""
    g = with_knobs(kernels["swap_split_k_f32_n64"], split_k=split_k, reduction_mode=ReductionMode(mode))
    for n, k in ((4096, 14336), (1000, 4040)):
        a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
        d = poisoned(m, n, dtype=torch.float32)
        g(a=a, b=w, d=d, bias=bias)
        torch.cuda.synchronize()
        assert not d.isnan().any()
        assert rel_err(d, F.silu(matmul(a, w) + bias.double())) < 2e-3
        if split_k > 1:
            assert g.workspace_size(m, n, k) > 0  # partial tiles meet in the workspace


# --- layouts: column-major a, d and aux; a K x N weight ---------------------------------------------------------

@pytest.mark.parametrize("m", [8, 24, 72, 1000])  # a, d and r are contiguous along M: multiples of 8
@pytest.mark.parametrize("n,k", RAGGED_NK)
def test_swapped_column_major_operands_and_aux(kernels, m, n, k):
    g = kernels["swap_colmajor_stream_k_n8"]
    a = randn(k, m).t()  # [M, K] column-major
    w, s = randn(n, k, std=k ** -0.5), torch.rand(m, device="cuda") + 0.5
    r = randn(n, m).t()  # [M, N] column-major
    d = torch.full((n, m), float("nan"), device="cuda", dtype=torch.bfloat16).t()
    g(a=a, b=w, d=d, s=s, r=r)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, matmul(a, w) * s.double()[:, None] + r.double()) < 1e-2


@pytest.mark.parametrize("m", ODD_M)
@pytest.mark.parametrize("n,k", RAGGED_NK)
def test_swapped_k_by_n_weight_with_cluster(kernels, m, n, k):
    g = kernels["swap_kn_weight_n32"]
    a, w_kn, bias = randn(m, k), randn(k, n, std=k ** -0.5), randn(n)
    d = poisoned(m, n)
    g(a=a, b=w_kn, d=d, bias=bias)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, torch.sigmoid(a.double() @ w_kn.double() + bias.double())) < 1e-2


# --- other element types and the fallback alignment ----------------------------------------------------------------

@pytest.mark.parametrize("m", ODD_M)
def test_swapped_fp8_per_tensor_scales(kernels, m):
    g = kernels["swap_fp8_tensor_n16"]
    n, k = 2048, 1040
    a = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.25], device="cuda"), torch.tensor([0.125], device="cuda")
    d = poisoned(m, n)
    g(a=a, b=w, d=d, scale_a=sa, scale_b=sb)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, matmul(a.float(), w.float()) * 0.25 * 0.125) < 1e-2


@pytest.mark.parametrize("m", ODD_M)
def test_swapped_tf32(kernels, m):
    g = kernels["swap_tf32_n16"]
    n, k = 1000, 1004  # f32: 4 elements per 16 bytes
    a, w, bias = randn(m, k, dtype=torch.float32), randn(n, k, dtype=torch.float32, std=k ** -0.5), randn(n, dtype=torch.float32)
    d = poisoned(m, n, dtype=torch.float32)
    g(a=a, b=w, d=d, bias=bias)
    torch.cuda.synchronize()
    assert rel_err(d, torch.tanh(matmul(a, w) + bias.double())) < 5e-3  # tf32 inputs


@pytest.mark.parametrize("m", ODD_M)
def test_swapped_fallback_alignment_ragged_k_and_n(kernels, m):
    g = kernels["swap_align4_n16"]
    n, k = 1004, 1012  # multiples of 4 only: cp.async mainloop, no-smem epilogue
    a, w, c = randn(m, k), randn(n, k, std=k ** -0.5), randn(m, n)
    d = poisoned(m, n)
    g(a=a, b=w, c=c, d=d)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, matmul(a, w) * 0.5 + c.double()) < 1e-2


@pytest.mark.parametrize("m", ODD_M + [130, 2048])
@pytest.mark.parametrize("split_k", [1, 4])
def test_narrow_tile_without_swap(kernels, m, split_k):
    g = with_knobs(kernels["narrow_n8_stream_k"], split_k=split_k)
    n, k = 1000, 1000
    a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
    d = poisoned(m, n)
    g(a=a, b=w, d=d, bias=bias)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, matmul(a, w) + bias.double()) < 1e-2


# --- swap_ab = auto in a dispatch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 17, 32, 33, 500])
def test_auto_swaps_the_small_m_kernel_of_a_dispatch_and_both_agree(kernels, m):
    decode, large = kernels["decode"], kernels["large"]
    assert decode.abi.extents == ("N", "M", "K") and large.abi.extents == ("M", "N", "K")
    n, k = 4096, 4096
    a, w, bias = randn(m, k), randn(n, k, std=k ** -0.5), randn(n)
    ref = torch.relu(matmul(a, w) + bias.double())
    for g in (decode, large):
        d = poisoned(m, n)
        g(a=a, b=w, d=d, bias=bias)
        torch.cuda.synchronize()
        assert not d.isnan().any()
        assert rel_err(d, ref) < 1e-2


def test_a_swapped_build_is_refused_for_the_kernel_that_does_not_swap(kernels):
    from ucutlass.errors import KernelRuntimeError

    with pytest.raises(KernelRuntimeError, match="built from another kernel"):
        CompiledKernel(kernels["decode"].so_path, dataclasses.replace(kernels["decode"].kernel, when=None))


def test_a_swapped_kernel_passes_the_grader_on_a_shipped_problem(kernel_cache):
    """The shipped o_proj problem (residual c) with swap_ab = true, split-K 4: bound, built, loaded by the grader's
    worker through ucutlass.runtime:load_solution (the .so's digest, the extents order) and graded on decode and
    prefill workloads."""
    from ucutlass.bind import bind
    from ucutlass.build import build_kernels
    from ucutlass.grader import Grader
    from ucutlass.problem import find_problem
    from ucutlass.solution import solution_for

    problem = find_problem("o_proj_residual_llama3_1_8b")
    picks = {"tile": "128x32x128", "cluster": "2x1x1", "schedule": "cooperative", "scheduler": "stream_k",
             "split_k": "4", "swap_ab": "true"}
    program = parse_file(problem.spec_path).resolve({f"o_proj.{k}": v for k, v in picks.items()})
    kernel = program.kernel()
    binding = bind(kernel, problem)
    assert binding.kernel == kernel  # swap_ab is written: the binding changes nothing
    result = build_kernels([kernel], root=kernel_cache, timeout_s=900)[0]
    assert result.ok, result.log[-2000:]
    ref = solution_for(result.so_path, program.source, "kernel.ucut", kernel.name, kernel.config_name())
    workloads = [w for w in problem.workloads if binding.extents(w)["M"] <= 64][:4]
    workloads += [w for w in problem.workloads if binding.extents(w)["M"] > 64][:1]
    with Grader(problem) as grader:
        records = grader.grade(ref, workloads)
    assert len(records) == len(workloads) >= 2
    assert all(r.passed for r in records), [(r.label, r.status, r.reason) for r in records]
