"""The grader's pieces without worker processes: checks, timing statistics, solution files, records."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from grader_helpers import SOLUTIONS, solution
from grader_helpers import gemm_problem, rowstats_problem  # noqa: F401  (fixtures)

from ucutlass.grader import (
    Correctness,
    GraderError,
    Performance,
    SolutionRef,
    Status,
    WorkloadResult,
    compare,
    format_table,
    poison_value,
    solution_from_file,
    summarize,
)
from ucutlass.grader.grader import Grader
from ucutlass.grader.timing import BenchParams, bench, latency_stats, quantile, reps_for
from ucutlass.grader.worker import _Failure, write_returned
from ucutlass.problem import Tolerance

# --- compare: SOL-ExecBench tolerance semantics --------------------------------------------------------

@pytest.mark.parametrize("shape", [(37, 53), (3, 5, 40), (10,), (1, 200)])
def test_chunked_comparisons_equal_whole_ones(monkeypatch, shape):
    """compare and check_accuracy work CHUNK_ELEMENTS at a time (the grader's memory stays bounded on a 614 M-element
    output); with chunks of 7 elements they give what one chunk gives, NaN/Inf and row scales included."""
    import ucutlass.grader.check as check
    from ucutlass.grader.accuracy import check_accuracy, normalized_errors

    g = torch.Generator().manual_seed(0)
    truth = torch.randn(shape, generator=g, dtype=torch.float64) * torch.rand(shape, generator=g, dtype=torch.float64)
    ref = truth.to(torch.bfloat16)
    out = (truth + 3e-3 * torch.randn(shape, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    flat = out.view(-1)
    flat[3] = float("nan")
    flat[5] = float("inf")
    ref.view(-1)[5] = float("inf")
    tol = Tolerance(max_atol=1e-3, max_rtol=1e-2, required_matched_ratio=0.9)
    clean = (truth + 3e-3 * torch.randn(shape, generator=g, dtype=torch.float64)).to(torch.bfloat16)

    def results():
        return compare(out, ref, tol), check_accuracy(clean, ref, truth), normalized_errors(out, truth)

    whole = results()
    monkeypatch.setattr(check, "CHUNK_ELEMENTS", 7)
    parts = results()
    assert parts[0] == whole[0]
    assert parts[1].ok == whole[1].ok and parts[1].reason == whole[1].reason
    assert parts[1].candidate_error == pytest.approx(whole[1].candidate_error, rel=1e-12)
    assert parts[1].reference_error == pytest.approx(whole[1].reference_error, rel=1e-12)
    assert parts[1].sparse_fraction == whole[1].sparse_fraction
    assert torch.allclose(parts[2], whole[2], rtol=1e-12, atol=0, equal_nan=True) and whole[1].candidate_error > 0
    assert whole[0].nonfinite == 1 and not whole[0].ok


def test_tolerance_against_truth_allows_the_tolerances_own_share_of_misses():
    """Against the truth a candidate may miss at most 1 − required_matched_ratio more elements than the reference
    (L1_047: 62.7459% against the reference's 62.7528%); more than that fails, as does any NaN."""
    from ucutlass.grader.check import tolerance_against_truth

    truth = torch.zeros(10000, dtype=torch.float64)
    tol = Tolerance(max_atol=0.1, max_rtol=0.0, required_matched_ratio=0.99)
    ref = truth.clone()
    ref[:4000] = 1.0                                      # the reference: 60% within of the truth
    near = ref.clone()
    near[4000:4090] = 1.0                                 # 0.9% more misses: inside the slack
    far = ref.clone()
    far[4000:4200] = 1.0                                  # 2% more: outside
    assert tolerance_against_truth(near, ref, truth, tol)[0]
    assert not tolerance_against_truth(far, ref, truth, tol)[0]
    nan = near.clone()
    nan[-1] = float("nan")
    assert not tolerance_against_truth(nan, ref, truth, tol)[0]
    assert not tolerance_against_truth(near, ref, None, tol)[0]


def test_compare_atol_rtol_boundary_and_ratio():
    tol = Tolerance(max_atol=0.1, max_rtol=0.1, required_matched_ratio=0.75)
    ref = torch.tensor([1.0, 10.0, 0.0, 5.0])
    out = torch.tensor([1.19, 11.05, -0.09, 9.0])  # |x−y| ≤ atol + rtol·|y|: .19 ≤ .2, 1.05 ≤ 1.1, .09 ≤ .1, 4 > .6
    c = compare(out, ref, tol, "C")
    assert c.matched_ratio == pytest.approx(0.75) and c.ok
    assert c.max_absolute_error == pytest.approx(4.0)
    assert not compare(out, ref, Tolerance(0.1, 0.1, 0.76), "C").ok


def test_compare_nan_inf_fail_even_within_ratio():
    tol = Tolerance(max_atol=1e-2, max_rtol=1e-2, required_matched_ratio=0.5)
    ref = torch.zeros(10)
    out = torch.zeros(10)
    out[3] = float("nan")
    c = compare(out, ref, tol, "C")
    assert not c.ok and c.nonfinite == 1 and "NaN" in c.reason
    out[3] = float("inf")
    assert not compare(out, ref, tol).ok
    # the same special value as the reference is a match (e.g. -inf in a masked row)
    ref[3] = out[3] = float("-inf")
    assert compare(out, ref, Tolerance()).ok


def test_compare_low_precision_and_integers():
    ref = torch.randn(64, 64)
    assert compare(ref.to(torch.bfloat16), ref, Tolerance()).ok  # bf16 rounding is within 1e-2 rel
    assert not compare(ref.to(torch.float8_e4m3fn), ref, Tolerance()).ok
    i = torch.arange(10)
    assert compare(i.clone(), i, Tolerance()).ok
    j = i.clone()
    j[0] = poison_value(torch.int64)
    assert not compare(j, i, Tolerance(required_matched_ratio=0.95)).ok


def test_poison_values():
    assert poison_value(torch.float32) != poison_value(torch.float32)  # NaN
    assert poison_value(torch.int32) == torch.iinfo(torch.int32).min
    assert poison_value(torch.uint8) == 255
    assert poison_value(torch.bool) is True
    import math

    assert math.isnan(poison_value(torch.bfloat16)) and math.isnan(poison_value(torch.float8_e4m3fn))


# --- return-style outputs are checked before any copy --------------------------------------------------

def test_write_returned_checks_type_shape_dtype_before_copying():
    bufs = [torch.full((2, 3), float("nan")), torch.full((2,), -1, dtype=torch.int64)]
    names = ["y", "idx"]
    good = (torch.ones(2, 3), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(_Failure) as e:
        write_returned((torch.ones(2, 3), torch.zeros(2, dtype=torch.int32)), bufs, names)
    assert e.value.status == "INCORRECT_DTYPE"
    assert torch.isnan(bufs[0]).all()  # nothing was copied
    with pytest.raises(_Failure) as e:
        write_returned({"y": torch.ones(2, 3)}, bufs, names)
    assert e.value.status == "INCORRECT_SHAPE"

    class Sub(torch.Tensor):
        pass

    with pytest.raises(_Failure) as e:
        write_returned((torch.ones(2, 3).as_subclass(Sub), good[1]), bufs, names)
    assert e.value.status == "INCORRECT_DTYPE" and "exactly torch.Tensor" in e.value.reason
    write_returned(good, bufs, names)
    assert (bufs[0] == 1).all() and (bufs[1] == 0).all()


# --- timing --------------------------------------------------------------------------------------------

def test_quantiles_and_stats():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantile(sorted(xs), 0.5) == 3.0 and quantile(sorted(xs), 0.2) == pytest.approx(1.8)
    s = latency_stats(xs)
    assert (s.median_ms, s.n) == (3.0, 5) and s.p20_ms <= s.median_ms <= s.p80_ms
    with pytest.raises(ValueError):
        latency_stats([])
    with pytest.raises(ValueError):
        latency_stats([1.0, float("nan")])


def test_reps_follow_the_warmup_estimate():
    p = BenchParams(rep_ms=100.0, min_reps=10, max_reps=1000)
    assert reps_for(1.0, p) == 100
    assert reps_for(50.0, p) == 10      # at least min_reps
    assert reps_for(1e-6, p) == 1000    # at most max_reps


def test_bench_on_cpu_rotates_sets_and_times_each_call():
    seen = []
    flush = torch.empty(1024, dtype=torch.int32)
    out = bench(seen.append, 3, torch.device("cpu"), flush, BenchParams(warmup_ms=1.0, rep_ms=2.0, min_reps=10))
    n = len(out["times_ms"])
    assert n >= 10 and all(t >= 0 for t in out["times_ms"])
    assert len(seen) == out["warmup_calls"] + n and set(seen) == {0, 1, 2}
    assert seen[-n:][:6] == [0, 1, 2, 0, 1, 2]
    prepared = []
    out = bench(seen.append, 2, torch.device("cpu"), flush, BenchParams(warmup_ms=0.0, rep_ms=0.0, min_reps=10),
                before=prepared.append)
    assert len(prepared) == out["warmup_calls"] + len(out["times_ms"]) == out["warmup_calls"] + 10


# --- solution files ------------------------------------------------------------------------------------

def test_solution_from_file_py_and_json(gemm_problem):
    ref = solution("gemm_honest")
    assert ref.loader == "ucutlass.grader.solutions:load_python_file" and ref.name == "gemm_honest"
    assert ref.payload["path"] == str(SOLUTIONS / "gemm_honest.py") and len(ref.payload["sha256"]) == 64
    assert ref.key() == solution("gemm_honest").key() and len({ref, solution("gemm_honest")}) == 1
    j = solution("fib_gemm.json", gemm_problem)
    assert j.loader.endswith(":load_sources") and j.payload["entry_point"] == "main.py::gemm"
    import pickle

    assert pickle.loads(pickle.dumps(j)) == j


def test_solution_from_file_errors(tmp_path, rowstats_problem):
    (tmp_path / "k.ucut").write_text("kernel k : gemm {}")
    (tmp_path / "k.cu").write_text("")
    with pytest.raises(GraderError, match="compiled first"):
        solution_from_file(tmp_path / "k.ucut")
    with pytest.raises(GraderError, match=r"\.cu file .*supported: \.py"):
        solution_from_file(tmp_path / "k.cu")
    with pytest.raises(GraderError, match="does not exist"):
        solution_from_file(tmp_path / "missing.py")
    with pytest.raises(GraderError, match="not 'rowstats'"):
        solution_from_file(SOLUTIONS / "fib_gemm.json", rowstats_problem)
    bad = dict(json.loads((SOLUTIONS / "fib_gemm.json").read_text()))
    bad["spec"] = {**bad["spec"], "entry_point": "main.py"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(GraderError, match="entry_point"):
        solution_from_file(tmp_path / "bad.json")
    bad["spec"] = {**bad["spec"], "entry_point": "main.py::gemm", "language": "rust"}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(GraderError, match="not supported"):
        solution_from_file(tmp_path / "bad.json")
    bad["spec"] = {**bad["spec"], "language": "cuda"}  # a CUDA solution's entry file is C++/CUDA
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(GraderError, match=r"<file\.cu>::<function>"):
        solution_from_file(tmp_path / "bad.json")


def test_grade_takes_a_solution_ref(gemm_problem):
    g = Grader(gemm_problem, device="cpu")  # no worker starts until something is graded
    try:
        with pytest.raises(GraderError, match="SolutionRef"):
            g.grade(str(SOLUTIONS / "gemm_honest.py"))  # type: ignore[arg-type]
        with pytest.raises(GraderError, match="no workload"):
            g.grade(solution("gemm_honest"), ["nope"])
    finally:
        g.close()
    with pytest.raises(GraderError):
        Grader(gemm_problem, device="cpu", trials=0)


def test_seeds_are_stable_distinct_and_inputs_fresh(gemm_problem):
    g = Grader(gemm_problem, device="cpu")
    try:
        w = gemm_problem.workloads[1]
        seeds = [g.seed_of(t, w) for t in range(3)]
        assert len(set(seeds)) == 3 and seeds == [g.seed_of(t, w) for t in range(3)]
        assert g.seed_of(0, w, "timing") != seeds[0] and g.seed_of(0, gemm_problem.workloads[0]) != seeds[0]
        a, _ = g._inputs(w, seeds[0])
        b, shared = g._inputs(w, seeds[1])
        assert not torch.equal(a["A"], b["A"]) and a["A"].abs().sum() > 0
        assert torch.equal(shared[0], b["A"]) and shared[0].is_shared()
        assert shared[0].data_ptr() != b["A"].data_ptr()  # the reference never reads the shared copy
        outs = g._outputs(w)
        assert outs[0].shape == (17, 48) and torch.isnan(outs[0]).all() and outs[0].is_shared()
    finally:
        g.close()


# --- records -------------------------------------------------------------------------------------------

def _result(status, latency=None, ref=2.0, t_sol=None, score=None, label="M=1"):
    perf = None if latency is None else Performance(latency, latency, latency, ref, ref / latency, t_sol, score)
    corr = Correctness(0.0, 0.0, 1.0, Tolerance().to_json(), 3)
    return WorkloadResult("p", "u", {"M": 1}, label, "s", status, reason="" if status is Status.PASSED else "why",
                          correctness=corr, performance=perf)


def test_summarize():
    rs = [_result(Status.PASSED, 1.0, score=0.8), _result(Status.PASSED, 0.5, score=0.9),
          _result(Status.INCORRECT_NUMERICAL)]
    s = summarize(rs)
    assert (s["workloads"], s["passed"], s["failed"], s["all_passed"]) == (3, 2, 1, False)
    assert s["geomean_speedup"] == pytest.approx((2.0 * 4.0) ** 0.5)
    assert s["mean_sol_score"] == pytest.approx((0.8 + 0.9) / 3)
    assert s["statuses"] == {"PASSED": 2, "INCORRECT_NUMERICAL": 1}
    assert summarize([_result(Status.PASSED, 1.0)])["mean_sol_score"] is None  # no T_SOL known
    assert summarize([])["geomean_speedup"] is None


def test_format_table():
    text = format_table([_result(Status.PASSED, 1.0, t_sol=0.5, score=0.75, label="M=1"),
                         _result(Status.CRASHED, label="M=64")])
    lines = text.splitlines()
    assert lines[0].split() == ["workload", "status", "latency", "ms", "reference", "ms", "speedup", "T_SOL", "ms",
                                "SOL", "score"]
    assert "PASSED" in lines[2] and "2x" in lines[2] and "0.750" in lines[2]
    assert "CRASHED" in lines[3] and lines[-1].strip() == "M=64: why"


def test_solution_ref_is_json_able():
    ref = SolutionRef("x", "m:f", {"a": 1}, True)
    assert json.loads(json.dumps(ref.to_json()))["destination_passing"] is True


def test_a_killed_graders_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    """A grader killed with SIGKILL leaves its temporary folder; the next Grader removes the folders whose
    ``owner`` names a process that no longer runs, and leaves a live grader's and unowned ones alone."""
    import subprocess
    import tempfile

    from ucutlass.grader import grader as grader_module

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / (grader_module.TMP_PREFIX + "dead")
    dead.mkdir()
    (dead / "owner").write_text(f"{gone.pid} 1")  # a start time no live process with this pid has
    alive = tmp_path / (grader_module.TMP_PREFIX + "alive")
    alive.mkdir()
    (alive / "owner").write_text(f"{os.getpid()} {grader_module.process_start_time(os.getpid())}")
    unowned = tmp_path / (grader_module.TMP_PREFIX + "unowned")
    unowned.mkdir()
    grader_module.remove_stale_folders()
    assert not dead.exists() and alive.exists() and unowned.exists()


# --- the wall-clock check's own run delay --------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="needs Linux schedstat")
def test_the_waiting_threads_run_delay_grows_on_a_loaded_host():
    """A thread woken by a reply waits for a CPU on a loaded host: the kernel's count of that wait (which
    the wall-clock check subtracts, as it does the worker's) grows."""
    import socket
    import subprocess
    import sys

    from ucutlass.grader.sandbox import own_run_delay_seconds

    before = own_run_delay_seconds()
    assert before is not None and before >= 0.0
    cores = len(os.sched_getaffinity(0))
    spin = "print(flush=True)\nwhile True:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE) for _ in range(2 * cores)]
    for p in procs:
        p.stdout.readline()  # each spins from now on
    a, b = socket.socketpair()
    echo = ("import socket, sys\ns = socket.socket(fileno=int(sys.argv[1]))\n"
            "while (m := s.recv(8)):\n    s.send(m)\n")
    child = subprocess.Popen([sys.executable, "-c", echo, str(b.fileno())], pass_fds=[b.fileno()])
    try:
        start = own_run_delay_seconds()
        deadline = time.monotonic() + 10.0
        while own_run_delay_seconds() == start and time.monotonic() < deadline:
            for _ in range(100):  # each reply wakes this thread, which then competes with the spinners
                a.send(b"x")
                a.recv(8)
        assert own_run_delay_seconds() > start
    finally:
        a.close()
        child.wait(timeout=30)
        for p in procs:
            p.kill()
            p.wait()
