"""The adversarial suite on the GPU: the CUDA-only cheats (side streams, IPC snooping, persisting L2),
every CPU cheat again on CUDA, the honest kernels (torch, Triton, a ctypes-loaded CUDA kernel), and the
timing of an honest GEMM against plain event timing, all with the host loaded by 2 × its cores of
spinning processes. Run on the GPU machine with ``pytest -q -m gpu tests/grader tests/adversarial``."""

from __future__ import annotations

import importlib.util
import statistics

import pytest
from adversarial_helpers import HONEST, WORKLOAD, kinds, solution
from adversarial_helpers import cpu_load, gpu_graders  # noqa: F401  (fixtures)

from ucutlass.grader import Status

# Under 2 × the cores of spinning processes, as a tune that compiles while it grades loads the host
# (issue 14: an honest torch GEMM was flagged UNTIMED_WORK while 12 cores compiled).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cpu_load")]


def _honest_params():
    out = []
    for name, files in HONEST.items():
        for f, _ in files:
            marks = []
            if "triton" in f:
                marks.append(pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"))
            if "ctypes_cuda" in f:
                marks.append(pytest.mark.nvcc)
            out.append(pytest.param(name, f, marks=marks, id=f))
    return out


@pytest.mark.parametrize("name, file", _honest_params())
def test_honest_solutions_pass_on_the_gpu(gpu_graders, name, file):
    g = gpu_graders(name)
    (r,) = g.grade(solution(file, g.problem), [gpu_graders.workload(name)])
    assert r.status is Status.PASSED, r.log
    acc = r.correctness.accuracy
    assert acc["checked"] >= 1 and acc["ratio"] <= 4.0, acc
    wall = r.checks["wall"]
    # The events stand, or the wall check charged what it saw beyond them (the charge zone: under this test's load
    # an honest torch bf16 GEMM of 23 µs "escaped" 29 µs on an H100, docs/benchmarks/2026-12-06-h100-wall-charge.md)
    # and the latency includes it.
    if wall["escaped_ms"] > wall["allowed_ms"]:
        assert wall["charged_ms"] == wall["escaped_ms"], wall
        assert abs(r.latency_ms - (wall["event_median_ms"] + wall["escaped_ms"])) < 1e-9, (r.latency_ms, wall)
    assert r.environment["hardware"] and r.environment["libs"]["torch"]


def test_guards_are_armed_on_the_gpu(gpu_graders):
    info = gpu_graders("adv_gemm").worker_info()
    assert info["thread_guard"] and info["l2_persisting_guard"], info
    assert info["flush_bytes"] >= 2 * info["l2_bytes"] > 0


@pytest.mark.parametrize("kind", kinds("gpu"), ids=lambda k: k.name)
def test_cheat_is_rejected_or_gains_nothing_on_the_gpu(gpu_graders, kind):
    r = gpu_graders.grade_cheat(kind, kind.gpu, min_ratio=0.85)
    if kind.name == "l2_persist":
        assert r.checks["l2_persisting_resets"] > 0, r.checks  # the window was asked for, and undone


def _plain_event_ms(m: int, n: int, k: int, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> float:
    """triton.testing.do_bench's loop (zero a 256 MB buffer, events around one call), median in ms."""
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def fn():
        torch.matmul(a, b.T, out=c)

    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(5):
        cache.zero_()
        fn()
    e.record()
    torch.cuda.synchronize()
    est = s.elapsed_time(e) / 5
    n_warm = max(1, int(warmup_ms / est))
    n_rep = max(10, int(rep_ms / est))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for _ in range(n_warm):
        fn()
    for i in range(n_rep):
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(st.elapsed_time(en) for st, en in zip(starts, ends))


@pytest.mark.parametrize("index, m", [(0, 16), (1, 4096)], ids=["decode_m16", "prefill_m4096"])
def test_honest_gemm_latency_matches_plain_event_timing(gpu_graders, index, m):
    """Fresh inputs per call, re-poisoned outputs and the persisting-L2 reset all sit outside the timed
    region: the grader's median is plain do_bench-style event timing, within 10%."""
    g = gpu_graders("adv_gemm_bf16")
    (r,) = g.grade(solution("bf16_honest_dps.py"), [index])
    assert r.status is Status.PASSED, r.log
    plain = _plain_event_ms(m, 4096, 4096)
    assert abs(r.latency_ms - plain) <= 0.10 * plain, (r.latency_ms, plain)
    assert 0.8 < r.performance.speedup_factor < 1.25, r.performance  # the reference is the same cuBLAS call


def test_a_slow_host_path_is_not_untimed_work(gpu_graders):
    """120 µs of host work before a small GEMM (adv_gemm M = 128): the wall check's spin covers the call's measured
    host path (grader/timing.py wall_spin_cycles), so only GPU work outside the events counts as escaped."""
    g = gpu_graders("adv_gemm")
    (r,) = g.grade(solution("gemm_honest_slow_host.py", g.problem), [WORKLOAD["cpu"]["adv_gemm"]])
    assert r.status is Status.PASSED, r.log
    wall = r.checks["wall"]
    assert wall["host_ms"] >= 0.1 and wall["escaped_ms"] <= wall["allowed_ms"], wall
