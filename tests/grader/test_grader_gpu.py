"""The grader's CUDA path: IPC-shared buffers, CUDA-event timing, the L2 flush, and sticky CUDA errors
that must take down only the worker. Skipped without CUDA; run on the GPU machine with
``pytest -q -m gpu tests/grader``."""

from __future__ import annotations

import importlib.util

import pytest
from grader_helpers import DATA, solution
from grader_helpers import gemm_problem  # noqa: F401  (fixtures)

from ucutlass.grader import Grader, Status, summarize
from ucutlass.problem import load_problem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_grader(gemm_problem):
    with Grader(gemm_problem, device="cuda", warmup_ms=10, rep=50, timeout_s=120) as g:
        yield g


def _cuda_still_works() -> bool:
    import torch

    return torch.ones(1024, device="cuda").sum().item() == 1024


@pytest.mark.parametrize("name", ["gemm_honest", "gemm_honest_dps", "fib_gemm.json"])
def test_cuda_honest_solutions_pass_with_event_timing(cuda_grader, gemm_problem, name):
    results = cuda_grader.grade(solution(name, gemm_problem))
    assert [r.status for r in results] == [Status.PASSED] * 3, [r.log for r in results]
    for r in results:
        p = r.performance
        assert 0 < p.latency_p20_ms <= p.latency_ms <= p.latency_p80_ms < 100
        assert p.reference_latency_ms > 0 and p.timed_calls >= 10
        assert r.environment["hardware"] and r.environment["device"].startswith("cuda")


def test_cuda_flush_buffer_is_larger_than_l2(cuda_grader):
    info = cuda_grader.worker_info()
    assert info["l2_bytes"] > 0 and info["flush_bytes"] >= 2 * info["l2_bytes"]
    assert info["device"].startswith("cuda")


@pytest.mark.parametrize("name, status, words", [
    ("gemm_dps_noop", Status.INCORRECT_NUMERICAL, "NaN"),      # IPC output buffers are poisoned
    ("gemm_dps_partial", Status.INCORRECT_NUMERICAL, "NaN"),
    ("gemm_wrong_bias", Status.INCORRECT_NUMERICAL, "within atol"),
    ("gpu_returns_cpu", Status.INCORRECT_DTYPE, "on cpu"),
    ("gemm_timed_cheat", Status.INCORRECT_NUMERICAL, "timed call"),
    ("gemm_raises", Status.RUNTIME_ERROR, "boom"),            # a Python error leaves the context usable
])
def test_cuda_wrong_solutions(cuda_grader, name, status, words):
    pid = cuda_grader.worker_info()["pid"]
    (r,) = cuda_grader.grade(solution(name), [2])
    assert r.status is status, r.log
    assert words in r.reason
    assert cuda_grader.worker_info()["pid"] == pid  # no restart needed


@pytest.mark.parametrize("name", ["gpu_illegal_address", "gpu_device_assert", "gemm_segfault"])
def test_sticky_cuda_errors_and_crashes_kill_only_the_worker(cuda_grader, name):
    if name == "gpu_illegal_address" and importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton")
    pid = cuda_grader.worker_info()["pid"]
    (r,) = cuda_grader.grade(solution(name), [1])
    assert r.status is Status.CRASHED, r.log
    assert _cuda_still_works()  # the grader's own context is untouched
    (ok,) = cuda_grader.grade(solution("gemm_honest"), [1])
    assert ok.status is Status.PASSED, ok.log
    assert cuda_grader.worker_info()["pid"] != pid


def test_cuda_hang_times_out(cuda_grader):
    old = cuda_grader.timeout_s
    cuda_grader.timeout_s = 3.0
    try:
        (r,) = cuda_grader.grade(solution("gemm_hang"), [0])
    finally:
        cuda_grader.timeout_s = old
    assert r.status is Status.TIMEOUT
    (ok,) = cuda_grader.grade(solution("gemm_honest"), [0])
    assert ok.status is Status.PASSED, ok.log


def test_cuda_timing_is_sane_on_a_large_bf16_gemm():
    """The reference's own code as the candidate: speedup ≈ 1; the time sits above a datasheet T_SOL."""
    problem = load_problem(DATA / "gemm_bf16_large")
    flops = 2 * 4096 ** 3
    t_sol_ms = flops / 989e12 * 1e3  # H100/H200 dense bf16 peak; slower GPUs are further above it
    with Grader(problem, device="cuda", warmup_ms=25, rep=100, t_sol_ms=lambda w: t_sol_ms) as g:
        results = g.grade(solution("gemm_bf16_same_as_reference"))
    (r,) = results
    assert r.status is Status.PASSED, r.log
    p = r.performance
    assert t_sol_ms < p.latency_ms < 20.0
    assert 0.67 < p.speedup_factor < 1.5, p
    assert (p.latency_p80_ms - p.latency_p20_ms) < 0.5 * p.latency_ms  # a tight spread
    s = summarize(results)
    assert s["passed"] == 1
    if r.sol_score is not None:
        assert 0.0 < r.sol_score < 1.0
