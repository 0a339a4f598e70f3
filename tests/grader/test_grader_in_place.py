"""Correctness trials without a private copy of the inputs (grader/digest.py): inputs too large to copy beside
the candidate's work are handed to it as they are and checked by keyed checksums. On the CPU the mode is forced
(``private_inputs=False``); on a GPU it is chosen by size (IN_PLACE_SHARE)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from ucutlass.grader import Grader, GraderError, Status, solution_from_file
from ucutlass.grader.digest import CHUNK_WORDS, InputDigest, changed
from ucutlass.problem import load_problem

ADV = Path(__file__).resolve().parents[1] / "adversarial"
sys.path.insert(0, str(ADV))
FAST = dict(warmup_ms=2.0, rep=5.0, timeout_s=120.0)


def test_one_changed_element_changes_the_checksum():
    d = InputDigest()
    for dtype in (torch.bfloat16, torch.float32, torch.int64, torch.uint8, torch.bool):
        t = (torch.randn(3, 7) * 5).to(dtype)
        before = d.of(t)
        assert d.of(t.clone()) == before, dtype
        u = t.clone()
        u.view(-1)[5] = (u.view(-1)[5] == 0) if dtype is torch.bool else u.view(-1)[5] + 1
        assert d.of(u) != before, dtype


def test_checksums_span_chunks_and_keys_differ():
    t = torch.zeros(CHUNK_WORDS + 3, dtype=torch.int32)
    d = InputDigest()
    before = d.of(t)
    t[-1] = 1  # a word of the second chunk
    assert d.of(t) != before
    assert changed({"a": 1, "b": 2}, {"a": 1, "b": 3}) == ["b"]
    # a fresh grader draws a fresh key: weights one candidate could learn do not carry over
    assert InputDigest().of(t) != d.of(t)


@pytest.fixture(scope="module")
def in_place_grader():
    with Grader(load_problem(ADV / "data" / "adv_gemm"), device="cpu", private_inputs=False, **FAST) as g:
        yield g


def test_honest_candidate_passes_in_place(in_place_grader):
    g = in_place_grader
    (r,) = g.grade(solution_from_file(ADV / "solutions" / "gemm_honest.py", g.problem), [1], timed=False)
    assert r.status is Status.PASSED, r.log
    assert r.checks["private_inputs"] is False
    assert r.checks["unlisted_shape"].get("checked"), r.checks


def test_a_candidate_that_zeroes_its_inputs_is_caught_in_place(in_place_grader):
    g = in_place_grader
    (r,) = g.grade(solution_from_file(ADV / "solutions" / "cheat_zero_inputs.py", g.problem), [1], timed=False)
    assert r.status is Status.INPUT_MODIFIED, r.reason
    assert "keyed checksums" in r.reason and "A" in r.reason


def test_a_candidate_failing_only_on_the_unlisted_shape_fails_in_place(in_place_grader):
    """The unlisted shape's failure is checked against a reference run on the same inputs, after the candidate's
    worker is stopped (it mapped them): the failure stands."""
    g = in_place_grader
    (r,) = g.grade(solution_from_file(ADV / "solutions" / "cheat_hardcoded_shapes.py", g.problem), [1], timed=False)
    assert r.status is Status.INCORRECT_NUMERICAL and "unlisted shape" in r.reason, (r.status, r.reason)


def test_a_reference_that_changes_its_inputs_is_named(tmp_path):
    """In place, the reference runs on the grader's own inputs: one that writes them is a broken problem."""
    folder = tmp_path / "writes_inputs"
    shutil.copytree(ADV / "data" / "adv_gemm", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["reference"] = d["reference"].replace("def run(A, B):\n    return torch.matmul(A, B.T)",
                                            "def run(A, B):\n    C = torch.matmul(A, B.T)\n    A.mul_(2)\n    return C")
    (folder / "definition.json").write_text(json.dumps(d))
    with Grader(load_problem(folder), device="cpu", private_inputs=False, unlisted_shapes=False, **FAST) as g:
        with pytest.raises(GraderError, match="reference changes its input"):
            g.grade(solution_from_file(ADV / "solutions" / "gemm_honest.py", g.problem), [0], timed=False)


def test_timing_in_place_passes_an_honest_candidate_and_catches_inputs_changed_in_timed_calls(in_place_grader,
                                                                                                 tmp_path):
    """The timing keeps no private copies either: the bases' checksums and the working copies recomputed from the
    bases. A candidate honest in its first calls (each correctness trial in place gets a fresh process) that
    zeroes its inputs from its third call on is caught in the timing."""
    g = in_place_grader
    (r,) = g.grade(solution_from_file(ADV / "solutions" / "gemm_honest.py", g.problem), [1])
    assert r.status is Status.PASSED and r.performance.latency_ms > 0, r.log
    assert r.checks["private_inputs"] is False and r.correctness.checked_timed_sets >= 1
    late = tmp_path / "zero_later.py"
    late.write_text("import torch\n\nCALLS = [0]\n\n\ndef run(A, B):\n    C = torch.matmul(A, B.T)\n"
                    "    CALLS[0] += 1\n    if CALLS[0] >= 3:\n        A.zero_()\n    return C\n")
    (r,) = g.grade(solution_from_file(late, g.problem), [1])
    assert r.status is Status.INPUT_MODIFIED and r.reason.startswith("timing"), (r.status, r.reason)


@pytest.mark.gpu
def test_in_place_trials_on_cuda_pass_an_honest_candidate_and_catch_one_that_zeroes_its_inputs():
    """On the GPU the candidate maps the grader's own input allocations (CUDA IPC) and its worker is stopped
    before the reference reads them."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    with Grader(load_problem(ADV / "data" / "adv_gemm"), device="cuda", private_inputs=False, **FAST) as g:
        honest, cheat = (solution_from_file(ADV / "solutions" / f, g.problem)
                         for f in ("gemm_honest.py", "cheat_zero_inputs.py"))
        (r,) = g.grade(honest, [2])
        assert r.status is Status.PASSED and r.checks["private_inputs"] is False, r.log
        assert r.performance.latency_ms > 0 and r.correctness.checked_timed_sets >= 1
        (r,) = g.grade(cheat, [2], timed=False)
        assert r.status is Status.INPUT_MODIFIED and "keyed checksums" in r.reason, r.reason
