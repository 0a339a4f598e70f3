"""Grouped GEMMs (``grouped_gemm``) on the GPU: correct against fp64 torch per group, ragged groups (0, 1 and 1000
rows, empty first and last groups, more groups than the setup kernel's block), group vectors that do not cover M,
argument errors, a CUDA graph replay and a problem binding.

Run on the H200: ``pytest -m gpu tests/test_grouped_gpu.py``. Two kernels (tests/kernels/grouped_plain.ucut,
grouped_epilogue.ucut) are compiled first, in parallel, in a fresh cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse, parse_file
from ucutlass.errors import KernelRuntimeError

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ("grouped_plain.ucut", "grouped_epilogue.ucut")


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse_file(KERNELS / name).kernel() for name in FILES], kernel_cache)


def grouped_acc(a, b, sizes, b_is_nk=True):
    """fp64 A_g · B_gᵀ per group, stacked like ``a``; rows past sum(sizes) are NaN."""
    out = torch.full((a.shape[0], b.shape[1] if b_is_nk else b.shape[2]), float("nan"), device=a.device,
                     dtype=torch.float64)
    start = 0
    for g, m in enumerate(sizes):
        w = b[g].double()
        out[start:start + m] = a[start:start + m].double() @ (w.T if b_is_nk else w)
        start += m
    return out


def run_plain(kernels, sizes, n=768, k=1024, m=None):
    sizes = [int(s) for s in sizes]
    m = sum(sizes) if m is None else m
    a, b = randn(m, k), randn(len(sizes), n, k, std=k ** -0.5)
    d = poisoned(m, n)
    m_sizes = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    kernels["grouped_plain"](a=a, b=b, d=d, m_sizes=m_sizes)
    return a, b, d, grouped_acc(a, b, [min(s, max(0, m - sum(sizes[:g]))) for g, s in enumerate(sizes)])


@pytest.mark.parametrize("sizes", [
    [0, 1, 1000, 0, 37, 256, 0, 5],      # empty groups in the middle and first, 1 and 1000 rows
    [1000],                              # one group: a plain GEMM
    [0, 0, 0, 3, 0],                     # one small group among empty ones, an empty last group
    [129, 1, 0, 0, 1000, 128, 127, 0],   # tile edges (128) and ragged tails
])
def test_plain_ragged_groups(kernels, sizes):
    a, b, d, ref = run_plain(kernels, sizes)
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2
    start = 0
    for m in sizes:  # every non-empty group on its own (a wrong group pointer would not hide in the total)
        if m:
            assert rel_err(d[start:start + m], ref[start:start + m]) < 1e-2
        start += m


def test_plain_many_groups_moe_like(kernels):
    """300 experts (> the setup kernel's 256 threads: two scan chunks), top-8 routing of 500 tokens, some empty."""
    g = 300
    expert_ids = torch.randint(0, g, (500 * 8,), device="cuda")
    sizes = torch.bincount(expert_ids, minlength=g)
    sizes[::7] = 0
    a, b, d, ref = run_plain(kernels, sizes.tolist(), n=256, k=512)
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


def test_groups_short_of_m_leave_rows_unwritten(kernels):
    sizes = [5, 0, 300]
    a, b, d, ref = run_plain(kernels, sizes, m=400)  # rows 305..399 belong to no group
    assert not d[:305].isnan().any() and d[305:].isnan().all()
    assert rel_err(d[:305], ref[:305]) < 1e-2


def test_groups_past_m_are_clamped(kernels):
    """sum(m_sizes) > M: the last groups are cut at M (no read or write outside a and d)."""
    sizes = [200, 300, 500]
    a, b, d, ref = run_plain(kernels, sizes, m=600)
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


def test_no_rows_launches_nothing(kernels):
    k, n = 1024, 768
    d = poisoned(0, n)
    kernels["grouped_plain"](a=randn(0, k), b=randn(4, n, k), d=d, m_sizes=torch.zeros(4, dtype=torch.int32,
                                                                                           device="cuda"))
    torch.cuda.synchronize()


def test_epilogue_offsets_per_group_bias_per_row_scale(kernels):
    """grouped_epilogue: m_offsets (i64, cumulative ends), b [G, K, N],
    d = silu(acc + bias[g]) * w[m] * alpha + shift."""
    sizes = [3, 0, 1000, 1, 0, 64, 129, 0]
    g, n, k = len(sizes), 512, 1024
    m = sum(sizes)
    a, b = randn(m, k), randn(g, k, n, std=k ** -0.5)
    bias, shift = randn(g, n), randn(n)
    w = torch.rand(m, device="cuda") + 0.5
    offsets = torch.tensor(sizes, device="cuda").cumsum(0)
    d = poisoned(m, n)
    kernels["grouped_epilogue"](a=a, b=b, d=d, m_offsets=offsets, bias=bias, shift=shift, w=w, alpha=0.75)
    acc = grouped_acc(a, b, sizes, b_is_nk=False)
    group_of_row = torch.repeat_interleave(torch.arange(g, device="cuda"), torch.tensor(sizes, device="cuda"))
    ref = F.silu(acc + bias.double()[group_of_row]) * w.double()[:, None] * 0.75 + shift.double()
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2
    for gi in (0, 2, 3, 6):  # each group reads its own bias row and its own rows of w
        lo, hi = sum(sizes[:gi]), sum(sizes[:gi + 1])
        assert rel_err(d[lo:hi], ref[lo:hi]) < 1e-2


def test_argument_errors(kernels):
    gemm = kernels["grouped_plain"]
    m, n, k, g = 64, 256, 512, 4
    a, b, d = randn(m, k), randn(g, n, k), poisoned(m, n)
    sizes = torch.full((g,), m // g, dtype=torch.int32, device="cuda")
    with pytest.raises(KernelRuntimeError, match=r"m_sizes: expected i32 \(torch.int32\)"):
        gemm(a=a, b=b, d=d, m_sizes=sizes.long())
    with pytest.raises(KernelRuntimeError, match=r"m_sizes: 3 values, but b has G = 4 groups"):
        gemm(a=a, b=b, d=d, m_sizes=sizes[:3].contiguous())
    with pytest.raises(KernelRuntimeError, match=r"b: expected a 3-D tensor \[G, N, K\]"):
        gemm(a=a, b=b[0], d=d, m_sizes=sizes)
    with pytest.raises(KernelRuntimeError, match=r"b: must be contiguous"):
        gemm(a=a, b=b.transpose(1, 2).contiguous().transpose(1, 2), d=d, m_sizes=sizes)
    with pytest.raises(KernelRuntimeError, match=r"d: N = 128"):
        gemm(a=a, b=b, d=poisoned(m, 128), m_sizes=sizes)
    with pytest.raises(KernelRuntimeError, match=r"multiple of 16"):
        gemm(a=randn(m, 100), b=randn(g, n, 100), d=d, m_sizes=sizes)
    with pytest.raises(KernelRuntimeError, match=r"arguments are a, b, d, m_sizes"):
        gemm(a=a, b=b, d=d)
    assert d.isnan().all()  # nothing ran


def test_check_groups_on_the_host(kernels):
    gemm = kernels["grouped_plain"]
    gemm.check_groups(torch.tensor([0, 3, 5], dtype=torch.int32, device="cuda"), 8)
    with pytest.raises(KernelRuntimeError, match="covers 7 rows, but a has M = 8"):
        gemm.check_groups(torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda"), 8)
    with pytest.raises(KernelRuntimeError, match=r"m_sizes\[1\] = -1 < 0"):
        gemm.check_groups(torch.tensor([9, -1], dtype=torch.int32, device="cuda"), 8)
    with pytest.raises(KernelRuntimeError, match=r"m_offsets\[1\] = 2 < m_offsets\[0\] = 5"):
        kernels["grouped_epilogue"].check_groups(torch.tensor([5, 2, 8], device="cuda"), 8)


def test_cuda_graph_replay_reads_new_group_sizes(kernels):
    """A launch never synchronises with the host, so it can be captured; a replay reads the sizes' new values."""
    gemm = kernels["grouped_plain"]
    g, n, k, m = 6, 256, 512, 600
    a, b, d = randn(m, k), randn(g, n, k, std=k ** -0.5), poisoned(m, n)
    sizes = torch.tensor([100] * 6, dtype=torch.int32, device="cuda")
    gemm(a=a, b=b, d=d, m_sizes=sizes)  # warm-up: workspace and the kernel's smem attribute
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemm(a=a, b=b, d=d, m_sizes=sizes)
    new = [0, 599, 0, 1, 0, 0]
    sizes.copy_(torch.tensor(new, dtype=torch.int32))
    d.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert not d.isnan().any()
    assert rel_err(d, grouped_acc(a, b, new)) < 1e-2


def test_bound_to_a_problem(kernels, tmp_path):
    """The kernel bound to a problem's tensors (tests/test_grouped.py's synthetic MoE up-projection) runs in the
    problem's argument order."""
    from test_grouped import BOUND, _moe_problem

    from ucutlass.bind import bind
    from ucutlass.problem import load_problem

    problem = load_problem(_moe_problem(tmp_path))
    binding = bind(parse(BOUND % "i32").kernel(), problem)
    run = binding.callable(kernels["grouped_plain"])  # same ABI: a, b, d, m_sizes
    sizes = [10, 0, 20, 0, 0, 30, 4, 0]
    x, w = randn(64, 256), randn(8, 512, 256, std=256 ** -0.5)
    y = poisoned(64, 512)
    run(x, w, torch.tensor(sizes, dtype=torch.int32, device="cuda"), y)
    assert rel_err(y, grouped_acc(x, w, sizes)) < 1e-2
