"""Batched GEMM (mode L), every row/col pair of a and b, and the alignment fallback on the GPU, against fp64 torch.

Run on the H200: ``pytest -m gpu tests/test_batched_gpu.py``. Six kernels are compiled first, in parallel in
a fresh cache: the five tests/kernels files below and the ``alignment = auto`` kernel a problem binding lowers
to 2 elements. The layout pairs: K-major a and b (batched_scores, align_bf16, align_f32), MN-major a and b
(batched_bias, align_mn_major); the mixed pairs run in tests/test_runtime_gpu.py (src_colmajor_f16,
plain_kmajor_b).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse, parse_file
from ucutlass.errors import KernelRuntimeError

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ["batched_scores", "batched_bias", "align_bf16", "align_f32", "align_mn_major"]

# A problem whose workloads have N % 4 != 0 for an f32 output: binding lowers alignment = auto to 2.
SCORES_BOUND = """
kernel scores_auto : gemm {
  a : bf16[B, H, M, K] row <- q
  b : bf16[B, H, N, K] row <- k
  d : f32[B, H, M, N] row -> s
  epilogue { d = acc * 0.125 }
}
"""


def _scores_problem(folder: Path):
    from ucutlass.problem import load_problem

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "scores", "description": "attention scores, ragged key length",
        "axes": {"B": {"type": "var"}, "H": {"type": "const", "value": 4}, "S": {"type": "var"},
                 "T": {"type": "var"}, "D": {"type": "const", "value": 64}},
        "inputs": {"q": {"shape": ["B", "H", "S", "D"], "dtype": "bfloat16"},
                   "k": {"shape": ["B", "H", "T", "D"], "dtype": "bfloat16"}},
        "outputs": {"s": {"shape": ["B", "H", "S", "T"], "dtype": "float32"}},
        "reference": "import torch\ndef run(q, k):\n    return (q.float() @ k.float().transpose(-1, -2)) * 0.125\n"}))
    rows = [{"B": 2, "S": 1, "T": 1002}, {"B": 3, "S": 1000, "T": 130}]
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"w{i}", "axes": a, "inputs": {"q": {"type": "random"}, "k": {"type": "random"}}}) + "\n"
        for i, a in enumerate(rows)))
    return load_problem(folder)


@pytest.fixture(scope="module")
def built(kernel_cache, tmp_path_factory):
    from ucutlass.bind import bind

    problem = _scores_problem(tmp_path_factory.mktemp("problem") / "scores")
    binding = bind(parse(SCORES_BOUND).kernel(), problem)
    assert binding.kernel.alignment == 2
    kernels = [parse_file(KERNELS / f"{name}.ucut").kernel() for name in FILES] + [binding.kernel]
    return build_and_load(kernels, kernel_cache), binding


@pytest.fixture(scope="module")
def kernels(built):
    return built[0]


@pytest.mark.parametrize("b, h, sq, sk, dh", [
    (2, 4, 1000, 256, 128),  # L = 8, M = 1000 (ragged against the 128-row tile)
    (1, 3, 1, 64, 64),  # M = 1
    (2, 2, 130, 136, 72),  # K = 72: not a multiple of the 64-wide K tile
])
def test_batched_scores_4d(kernels, b, h, sq, sk, dh):
    q, k = randn(b, h, sq, dh), randn(b, h, sk, dh)
    s = poisoned(b, h, sq, sk, dtype=torch.float32)
    kernels["batched_scores"](a=q, b=k, d=s)
    ref = (q.double() @ k.double().transpose(-1, -2)) * 0.08838834764
    assert not s.isnan().any()
    assert rel_err(s, ref) < 1e-4  # bf16 products are exact in f32; only the f32 sums round


def test_batched_scores_refuses_what_it_cannot_serve(kernels):
    g = kernels["batched_scores"]
    q, k = randn(2, 4, 64, 64), randn(2, 4, 128, 64)
    with pytest.raises(KernelRuntimeError, match="batch dim B = 3, but another operand gives B = 2"):
        g(a=q, b=randn(3, 4, 128, 64), d=poisoned(2, 4, 64, 128, dtype=torch.float32))
    with pytest.raises(KernelRuntimeError, match=r"batch strides \(32768, 4096\) of batch dims \(2, 4\) do not fold into one batch mode"):
        g(a=randn(2, 8, 64, 64)[:, :4], b=k, d=poisoned(2, 4, 64, 128, dtype=torch.float32))
    with pytest.raises(KernelRuntimeError, match="expected a 4-D tensor"):
        g(a=q.reshape(8, 64, 64), b=k, d=poisoned(2, 4, 64, 128, dtype=torch.float32))
    # N = 102 f32 elements is 408 bytes: the 16-byte (TMA) build refuses and names the alignment that would serve
    d = poisoned(2, 4, 64, 102, dtype=torch.float32)
    with pytest.raises(KernelRuntimeError, match=r"N = 102 × 4 bytes is not a multiple of 16.*alignment = 2"):
        g(a=q, b=randn(2, 4, 102, 64), d=d)
    assert d.isnan().all()


@pytest.mark.parametrize("l, m, n, k", [(3, 1000, 384, 200), (4, 64, 128, 64), (1, 8, 256, 40)])
def test_batched_mn_major_with_per_batch_bias_and_shared_residual(kernels, l, m, n, k):
    a = randn(l, k, m).transpose(-1, -2)  # [L, M, K], M contiguous
    b = randn(l, k, n, std=k ** -0.5).transpose(-1, -2)  # [L, N, K], N contiguous
    bias, residual = randn(l, n), randn(m, n)
    d = poisoned(l, m, n)
    kernels["batched_bias"](a=a, b=b, d=d, bias=bias, residual=residual)
    ref = a.double() @ b.double().transpose(-1, -2) + bias.double()[:, None, :] + residual.double()
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


@pytest.mark.parametrize("m, n, k", [
    (1, 1002, 1002),  # M = 1; N and K even but not multiples of 8
    (1000, 130, 66),  # K = 66: neither a multiple of 8 nor of the 64-wide tile
    (333, 4096, 4096),  # aligned extents run too
])
def test_alignment_2_bf16_cp_async_and_no_smem_epilogue(kernels, m, n, k):
    a, w, c = randn(m, k), randn(n, k, std=k ** -0.5), randn(m, n)
    d = poisoned(m, n)
    kernels["align_bf16"](a=a, b=w, c=c, d=d)
    ref = 2 * (a.double() @ w.double().T) - 0.5 * c.double()
    assert not d.isnan().any()
    assert rel_err(d, ref) < 1e-2


def test_alignment_2_refuses_odd_extents(kernels):
    g = kernels["align_bf16"]
    m, n, k = 64, 1001, 128
    d = poisoned(m, n)
    with pytest.raises(KernelRuntimeError, match=r"N = 1001 is not a multiple of 2 elements.*alignment = 1"):
        g(a=randn(m, k), b=randn(n, k), c=randn(m, n), d=d)
    with pytest.raises(KernelRuntimeError, match=r"K = 127 is not a multiple of 2 elements"):
        g(a=randn(m, 127), b=randn(1002, 127), c=randn(m, 1002), d=poisoned(m, 1002))
    assert d.isnan().all()


@pytest.mark.parametrize("m, n, k", [(1, 1001, 333), (1000, 77, 1001), (129, 4095, 17)])
def test_alignment_1_f32_any_extent(kernels, m, n, k):
    a = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") * k ** -0.5
    d = poisoned(m, n, dtype=torch.float32)
    kernels["align_f32"](a=a, b=w, d=d)
    assert not d.isnan().any()
    assert rel_err(d, a.double() @ w.double().T) < 5e-3  # tf32: 10-bit mantissa products


@pytest.mark.parametrize("m, n, k", [(1000, 1004, 260), (4, 12, 4096)])
def test_alignment_4_mn_major(kernels, m, n, k):
    a = randn(k, m).t()  # [M, K], M contiguous
    b = randn(k, n, std=k ** -0.5)  # [K, N] row-major
    d = poisoned(m, n, dtype=torch.float32)
    kernels["align_mn_major"](a=a, b=b, d=d)
    assert not d.isnan().any()
    assert rel_err(d, a.double() @ b.double()) < 1e-4


def test_auto_alignment_bound_to_a_problem_runs_every_workload(built):
    kernels, binding = built
    g = kernels["scores_auto"]
    fn = binding.callable(g)
    for w in binding.problem.workloads:
        e = binding.extents(w)
        q = randn(e["B"], e["H"], e["M"], e["K"])
        k = randn(e["B"], e["H"], e["N"], e["K"])
        s = poisoned(e["B"], e["H"], e["M"], e["N"], dtype=torch.float32)
        fn(q, k, s)
        assert not s.isnan().any()
        assert rel_err(s, (q.double() @ k.double().transpose(-1, -2)) * 0.125) < 1e-4, w.label()
