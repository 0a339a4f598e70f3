"""The adversarial suite on the CPU (what CI runs): real cheating solutions against adv_gemm and adv_moe,
each rejected with its named status or scoring no better than the honest kernel; the honest kernels
pass. Worker processes, shared memory and the guards are the real ones, and the machine is loaded with
2 × its cores of spinning processes throughout (:class:`adversarial_helpers.CpuLoad`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from adversarial_helpers import HONEST, KINDS, kinds, markdown_table, solution
from adversarial_helpers import cpu_graders, cpu_load  # noqa: F401  (fixtures)

from ucutlass.grader import Status

DOCS = Path(__file__).resolve().parents[2] / "docs" / "grader.md"

# The whole module runs under an artificial load of 2 × the cores (issue 14: honest solutions were flagged
# UNTIMED_WORK on a loaded machine; the wall-clock check now subtracts the worker's preempted time).
pytestmark = pytest.mark.usefixtures("cpu_load")


@pytest.mark.parametrize("name, file", [(p, f) for p, files in HONEST.items() for f, where in files
                                        if where == "both"])
def test_honest_solutions_pass(cpu_graders, name, file):
    g = cpu_graders(name)
    (r,) = g.grade(solution(file, g.problem), [cpu_graders.workload(name)])
    assert r.status is Status.PASSED, r.log
    acc = r.correctness.accuracy
    assert acc["checked"] >= 1 and acc["ratio"] <= 4.0, acc
    wall = r.checks["wall"]
    assert wall["escaped_ms"] <= wall["allowed_ms"], wall
    # the call's time to return inside the wall loops is recorded (a host path the spin did not cover shows there);
    # it is raw host time, the batches are less the worker's preempted time: a busy CI machine preempts it (a
    # fastest batch with calls of 0 ms once the preemption was subtracted), so the bound adds that back
    assert 0.0 <= wall["call_host_ms"] <= wall["with_calls_ms"] + wall["preempted_ms"], wall
    assert r.checks["unlisted_shape"].get("checked"), r.checks


@pytest.mark.parametrize("kind", kinds("cpu"), ids=lambda k: k.name)
def test_cheat_is_rejected_or_gains_nothing(cpu_graders, kind):
    cpu_graders.grade_cheat(kind, kind.cpu, min_ratio=0.7)


def test_uninitialised_output_fails_even_after_an_honest_run_in_the_same_worker(cpu_graders):
    """The worker's freed memory holds the honest solution's outputs; they are for other inputs."""
    g = cpu_graders("adv_gemm")
    w = cpu_graders.workload("adv_gemm")
    pid = g.worker_info()["pid"]
    (ok,) = g.grade(solution("gemm_honest.py"), [w])
    (r,) = g.grade(solution("cheat_uninitialized.py"), [w])
    assert ok.status is Status.PASSED and r.status is Status.INCORRECT_NUMERICAL, r.log
    assert g.worker_info()["pid"] == pid  # a wrong answer needs no new worker


@pytest.mark.parametrize("cheat", ["cheat_patch_perf_counter.py", "cheat_background_thread.py",
                                   "cheat_forged_reply.py"])
def test_a_caught_cheat_leaves_nothing_behind(cpu_graders, cheat):
    """Guards that fire replace the worker, so the next solution runs in a clean process."""
    g = cpu_graders("adv_gemm")
    w = cpu_graders.workload("adv_gemm")
    pid = g.worker_info()["pid"]
    (bad,) = g.grade(solution(cheat), [w])
    assert bad.status in (Status.TAMPERED, Status.THREAD_SPAWNED), bad.log
    (ok,) = g.grade(solution("gemm_honest.py"), [w])
    assert ok.status is Status.PASSED, ok.log
    assert g.worker_info()["pid"] != pid


def test_routed_problem_trials_cover_skewed_and_adversarial_routing(cpu_graders):
    g = cpu_graders("adv_moe")
    (r,) = g.grade(solution("moe_honest.py"), [0], timed=False)
    assert r.status is Status.PASSED, r.log
    assert r.checks["variants"] == ["normal", "skewed_routing", "heavy_tailed", "adversarial_routing", "structured"]
    assert r.correctness.trials == 5


def test_suite_has_at_least_15_kinds_and_the_docs_list_them():
    assert len({k.name for k in KINDS}) == len(KINDS) >= 15
    text = DOCS.read_text()
    for line in markdown_table().splitlines()[2:]:
        assert line in text, f"docs/grader.md lacks the row: {line}"


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("ninja") and (shutil.which("c++") or shutil.which("g++"))),
                    reason="needs ninja and a C++ compiler")
def test_flashinfer_bench_cpp_solution_builds_and_passes(cpu_graders):
    """A FlashInfer-Bench solution in C++ (torch extension, ~40 s to build the first time)."""
    g = cpu_graders("adv_gemm")
    old = g.timeout_s
    g.timeout_s = 600.0
    try:
        (r,) = g.grade(solution("gemm_honest_cpp.json", g.problem), [0])
    finally:
        g.timeout_s = old
    assert r.status is Status.PASSED, r.log
