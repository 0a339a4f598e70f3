"""A dispatch on the GPU: two kernels of the o_proj problem (a decode kernel for M ≤ 64, a fallback for the rest),
compiled, loaded through the grader's loader as one solution, and called at M = 1 and M = 300: each M runs its
kernel and matches torch.

Run on the H200 (device machine): ``pytest -m gpu tests/test_dispatch_gpu.py``.
"""

from __future__ import annotations

import pytest

from gpu_build import poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.bind import bind
from ucutlass.build import build_kernels
from ucutlass.lang import parse
from ucutlass.problem import find_problem
from ucutlass.runtime import load_solution
from ucutlass.solution import dispatch_solution

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
PROBLEM = "o_proj_residual_llama3_1_8b"  # output = attn_output · o_proj_weightᵀ + residual; N = K = 4096
OPERANDS = """a : bf16[M, K] row <- attn_output   b : bf16[N, K] row <- o_proj_weight
  c : bf16[M, N] row <- residual   d : bf16[M, N] row -> output
  epilogue { d = acc + c }"""
SOURCE = f"""\
kernel decode : gemm when M <= 64 {{
  {OPERANDS}
  tile = 64x128x64   schedule = pingpong
}}
kernel large : gemm {{
  {OPERANDS}
  tile = 128x128x64   schedule = cooperative
}}
"""


@pytest.fixture(scope="module")
def solution(kernel_cache):
    """The dispatch as the grader's worker builds it: ``load_solution`` of :func:`dispatch_solution`'s payload."""
    problem = find_problem(PROBLEM)
    kernels = [bind(k, problem).kernel for k in parse(SOURCE, "dispatch.ucut").dispatch()]
    results = build_kernels(kernels, source_file="dispatch.ucut", sources=[SOURCE] * len(kernels), root=kernel_cache,
                            timeout_s=900)
    failed = [f"{r.name}: {r.error}\n{r.log[-2000:]}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    ref = dispatch_solution({k.name: r.so_path for k, r in zip(kernels, results)}, SOURCE, "dispatch.ucut", "o_proj")
    return load_solution(ref.payload, problem)


@pytest.mark.parametrize("m,expected", [(1, "decode"), (300, "large")])
def test_each_m_runs_its_kernel_and_matches_torch(solution, monkeypatch, m, expected):
    ran = []
    for run in solution.runs:  # spy on each kernel's launch
        compiled = run.kernel
        monkeypatch.setattr(compiled, "call", lambda values, c=compiled, call=compiled.call: (
            ran.append(c.kernel.name), call(values)))
    k = n = 4096
    a, w, residual = randn(1, m, k), randn(n, k, std=k ** -0.5), randn(1, m, n)
    ref = a.double() @ w.double().T + residual.double()
    for _ in range(2):  # the first call picks and plans; the second takes the cached choice and plan
        out = poisoned(1, m, n)
        solution(a, w, residual, out)
        torch.cuda.synchronize()
        assert not out.isnan().any()
        assert rel_err(out, ref) < 1e-2
    assert ran == [expected, expected]
    assert [r.kernel.kernel.name for r in solution.runs][solution.choose(a, w, residual, out)] == expected
