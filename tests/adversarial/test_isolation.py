"""The grader holds against hostile candidates and broken problems (issue 14): processes a candidate
starts are gone when its verdict is written, forged descriptors cannot jam it, it cannot be signalled or
have files written outside the candidate's scratch folder, a killed grading process still leaves a
verdict, a reference that hangs or exits is a broken problem, and a candidate's output is read bounded.

Each test here failed on the grader before the supervisor, the channel and the confinement
(main at 2b4805b): the forking, detaching and daemon candidates PASSED and lived on, the descriptor writer
hung the grader, the killer ended it with exit 137, the writer wrote, the rewritten definition stayed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from adversarial_helpers import DATA, SOLUTIONS, problem, solution

from ucutlass.grader import Grader, GraderError, Status, solution_from_file
from ucutlass.grader.sandbox import descendants, landlock_abi
from ucutlass.grader.worker_handle import LOG_HEAD, LOG_TAIL
from ucutlass.problem import load_problem

FAST = dict(warmup_ms=2.0, rep=5.0, timeout_s=120.0)
REPO = Path(__file__).resolve().parents[2]
needs_landlock = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel offers no Landlock")
needs_signal_scope = pytest.mark.skipif(landlock_abi() < 6, reason="Landlock scopes signals from ABI 6 (Linux 6.12)")


@pytest.fixture(scope="module")
def gemm():
    with Grader(problem("adv_gemm"), device="cpu", **FAST) as g:
        yield g


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _pids(log: str, key: str = "CHILD_PID") -> list[int]:
    return [int(m) for m in re.findall(rf"{key}=(\d+)", log)]


@pytest.mark.parametrize("cheat", ["cheat_fork_worker.py", "cheat_detached_process.py", "cheat_daemon.py"])
def test_processes_a_candidate_starts_are_killed_before_its_verdict(gemm, cheat):
    before = set(descendants(os.getpid()))
    (r,) = gemm.grade(solution(cheat), [1])
    assert r.status is Status.PROCESS_SPAWNED, f"{r.status}: {r.reason}\n{r.log[-2000:]}"
    children = _pids(r.log)
    assert children, r.log
    for pid in children:
        assert not _running(pid), f"{cheat}: process {pid} outlived the verdict"
    (ok,) = gemm.grade(solution("gemm_honest.py"), [1])
    assert ok.status is Status.PASSED, ok.log
    left = [p for p in set(descendants(os.getpid())) - before if _running(p)]
    supervisors = {gemm._workers[role].supervisor_pid for role in ("candidate", "reference") if gemm._workers[role]}
    stray = [p for p in left if p not in supervisors and not any(p in descendants(s) for s in supervisors)]
    assert not stray, f"processes left over: {stray}"


def test_forged_descriptor_writes_get_a_verdict_in_bounded_time(gemm):
    t0 = time.monotonic()
    (r,) = gemm.grade(solution("cheat_forge_descriptors.py"), [1])
    assert time.monotonic() - t0 < 90
    assert r.status is Status.TAMPERED and "malformed" in r.reason, f"{r.status}: {r.reason}"
    (ok,) = gemm.grade(solution("gemm_honest.py"), [1])
    assert ok.status is Status.PASSED, ok.log


@needs_landlock
def test_a_candidate_cannot_write_outside_its_scratch_folder(gemm, tmp_path):
    prob_dir = tmp_path / "adv_gemm"
    shutil.copytree(DATA / "adv_gemm", prob_dir)
    definition = (prob_dir / "definition.json").read_bytes()
    outside = tmp_path / "outside.txt"
    cheat = tmp_path / "cheat_write.py"
    cheat.write_text(textwrap.dedent(f"""
        import os, torch
        def run(A, B):
            print("SCRATCH=" + os.getcwd(), flush=True)
            with open(os.path.join(os.getcwd(), "tmp", "mine.txt"), "w") as f:  # its own folder: allowed
                f.write("ok")
            with open({str(outside)!r}, "w") as f:
                f.write("escaped")
            return torch.matmul(A, B.T)
        """))
    with Grader(load_problem(prob_dir), device="cpu", **FAST) as g:
        info = g.worker_info()
        assert info["confinement"]["filesystem"], info
        (r,) = g.grade(solution_from_file(cheat), [1])
        rewrite = tmp_path / "cheat_rewrite.py"
        rewrite.write_text(textwrap.dedent(f"""
            import torch
            def run(A, B):
                with open({str(prob_dir / 'definition.json')!r}, "w") as f:
                    f.write("{{}}")
                return torch.matmul(A, B.T)
            """))
        (r2,) = g.grade(solution_from_file(rewrite), [1])
    assert r.status is Status.RUNTIME_ERROR and "Permission denied" in r.log, f"{r.status}: {r.reason}"
    assert not outside.exists()
    assert r2.status is Status.RUNTIME_ERROR and "Permission denied" in r2.log, f"{r2.status}: {r2.reason}"
    assert (prob_dir / "definition.json").read_bytes() == definition

    targets = (SOLUTIONS / "escaped.txt", Path("/tmp/ucutlass-escaped.txt"))  # the suite's escape_write cheat
    for path in targets:
        path.unlink(missing_ok=True)  # left by another grader (an old one, without the confinement)
    (r3,) = gemm.grade(solution("cheat_escape_write.py"), [1])
    assert r3.status is Status.RUNTIME_ERROR, f"{r3.status}: {r3.reason}"
    for path in targets:
        assert not path.exists(), path


def test_without_confinement_a_rewritten_definition_is_caught_and_restored(tmp_path):
    """What holds where the OS offers no confinement: the parent's digest of the problem's files."""
    prob_dir = tmp_path / "adv_gemm"
    shutil.copytree(DATA / "adv_gemm", prob_dir)
    original = (prob_dir / "definition.json").read_bytes()
    forged = json.loads(original)
    forged["reference"] = forged["reference"].replace("return torch.matmul(A, B.T)", "return torch.zeros(A.shape[0], B.shape[0])")
    cheat = tmp_path / "cheat_rewrite.py"
    cheat.write_text(textwrap.dedent(f"""
        import torch
        FORGED = {json.dumps(forged)!r}
        def run(A, B):
            with open({str(prob_dir / 'definition.json')!r}, "w") as f:
                f.write(FORGED)
            return torch.matmul(A, B.T)
        """))
    with Grader(load_problem(prob_dir), device="cpu", confine=False, **FAST) as g:
        assert g.worker_info()["confinement"] is None
        (r,) = g.grade(solution_from_file(cheat), [1])
    assert r.status is Status.TAMPERED and "definition.json" in r.reason, f"{r.status}: {r.reason}"
    assert (prob_dir / "definition.json").read_bytes() == original
    assert list(prob_dir.glob("definition.json.changed-*")), "the rewritten content is kept beside it"
    zeros = tmp_path / "zeros.py"
    zeros.write_text("import torch\ndef run(A, B):\n    return torch.zeros(A.shape[0], B.shape[0])\n")
    with Grader(load_problem(prob_dir), device="cpu", **FAST) as g:  # a later run sees the real problem
        (z,) = g.grade(solution_from_file(zeros), [1], timed=False)
    assert z.status is Status.INCORRECT_NUMERICAL, z.reason


_GRADE_SCRIPT = """
import json, sys
from ucutlass.grader import Grader, solution_from_file
from ucutlass.problem import load_problem
if __name__ == "__main__":
    with Grader(load_problem(sys.argv[1]), device="cpu", warmup_ms=2.0, rep=5.0, timeout_s=120.0) as g:
        (r,) = g.grade(solution_from_file(sys.argv[2]), [1])
        info = g.worker_info()
    print("VERDICT " + json.dumps({"status": r.status.value, "reason": r.reason, "log": r.log,
                                    "signals": info["confinement"]["signals"]}))
"""


@needs_signal_scope
def test_a_candidate_cannot_signal_the_grader_or_its_supervisor(tmp_path):
    script = tmp_path / "grade.py"
    script.write_text(_GRADE_SCRIPT)
    p = subprocess.run([sys.executable, str(script), str(DATA / "adv_gemm"), str(SOLUTIONS / "cheat_kill_grader.py")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"the grading process ended with {p.returncode}\n{p.stderr[-3000:]}"
    line = next(x for x in p.stdout.splitlines() if x.startswith("VERDICT "))
    v = json.loads(line[8:])
    assert v["signals"] is True
    assert v["status"] == "RUNTIME_ERROR" and "Operation not permitted" in v["log"], v


def _cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ucutlass.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=REPO)


def test_grade_cli_ends_promptly_and_leaves_no_process_behind(tmp_path):
    """`ucutlass grade … | cat` once stayed open 218 s after the verdict: a forked child of the candidate
    held the resource tracker's pipe and with it the command's stdout."""
    out = tmp_path / "records.json"
    t0 = time.monotonic()
    p = _cli("grade", str(SOLUTIONS / "cheat_daemon.py"), "adv_gemm", "--problems", str(DATA), "--workloads", "1",
             "-o", str(out))
    assert time.monotonic() - t0 < 240
    records = json.loads(out.read_text())
    assert [r["evaluation"]["status"] for r in records] == ["PROCESS_SPAWNED"], p.stdout + p.stderr
    for pid in _pids(records[0]["evaluation"]["log"]):
        assert not _running(pid)


def test_a_killed_grading_process_still_leaves_a_verdict(tmp_path):
    """Without confinement the candidate can SIGKILL the process that grades it; `ucutlass grade` grades in a
    child process and writes a CRASHED verdict for every workload it did not finish."""
    out = tmp_path / "records.json"
    p = _cli("grade", str(SOLUTIONS / "cheat_kill_grader.py"), "adv_gemm", "--problems", str(DATA), "--workloads", "2",
             "-o", str(out), env={"UCUTLASS_GRADER_CONFINE": "0"})
    assert p.returncode == 1, p.stdout + p.stderr
    records = json.loads(out.read_text())
    assert len(records) == 2, records
    assert {r["evaluation"]["status"] for r in records} == {"CRASHED"}, records
    assert "killed" in records[0]["evaluation"]["reason"], records[0]["evaluation"]["reason"]
    assert "CRASHED" in p.stdout


def _broken_problem(tmp_path: Path, name: str, reference: str, custom: bool = False) -> Path:
    folder = tmp_path / name
    shutil.copytree(DATA / "adv_gemm", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["name"] = name
    d["reference"] = reference
    if not custom:
        d.pop("custom_inputs_entrypoint", None)
        lines = [json.loads(x) for x in (folder / "workload.jsonl").read_text().splitlines() if x.strip()]
        for w in lines:
            w["inputs"] = {"A": {"type": "random"}, "B": {"type": "random"}}
        (folder / "workload.jsonl").write_text("\n".join(json.dumps(w) for w in lines) + "\n")
    (folder / "definition.json").write_text(json.dumps(d))
    return folder


_REFS = {
    "sleeps_in_run": ("import time, torch\ndef run(A, B):\n    time.sleep(3600)\n    return A @ B.T\n", False,
                      "did not finish"),
    "exits_in_run": ("import os, torch\ndef run(A, B):\n    os._exit(3)\n", False, "exited with code 3"),
    "sleeps_at_import": ("import time, torch\ntime.sleep(3600)\ndef run(A, B):\n    return A @ B.T\n", False,
                         "did not finish"),
    "inputs_hang": ("import time, torch\ndef get_inputs(axes, device):\n    time.sleep(3600)\n"
                    "def run(A, B):\n    return A @ B.T\n", True, "did not finish"),
}


@pytest.mark.parametrize("case", sorted(_REFS))
def test_a_reference_that_hangs_or_exits_is_a_broken_problem(tmp_path, case):
    source, custom, words = _REFS[case]
    folder = _broken_problem(tmp_path, case, source, custom)
    t0 = time.monotonic()
    with Grader(load_problem(folder), device="cpu", warmup_ms=2.0, rep=5.0, timeout_s=4.0) as g:
        with pytest.raises(GraderError, match="broken problem") as e:
            g.grade(solution("gemm_honest.py"), [0])
    assert words in str(e.value), str(e.value)
    assert time.monotonic() - t0 < 60


def test_grade_cli_reports_a_broken_problem(tmp_path):
    folder = _broken_problem(tmp_path, "exits_in_run", _REFS["exits_in_run"][0])
    p = _cli("grade", str(SOLUTIONS / "gemm_honest.py"), str(folder), "--workloads", "1", "--timeout", "5")
    assert p.returncode == 1 and "broken problem" in p.stderr and "exited with code 3" in p.stderr, p.stderr


_FLOOD = """
import sys, torch
CHUNK = "x" * (1 << 20) + "\\n"
def run(A, B):
    for _ in range({mb}):
        sys.stdout.write(CHUNK)
    sys.stdout.flush()
    return torch.matmul(A, B.T)
"""

_PEAK_SCRIPT = """
import json, resource, sys
from ucutlass.grader import Grader, solution_from_file
from ucutlass.problem import load_problem
if __name__ == "__main__":
    with Grader(load_problem(sys.argv[1]), device="cpu", warmup_ms=2.0, rep=5.0, timeout_s=120.0) as g:
        (r,) = g.grade(solution_from_file(sys.argv[2]), [1])
    print("RESULT " + json.dumps({"status": r.status.value, "log_chars": len(r.log), "printed": r.checks.get("output_bytes", 0),
                                   "left_out": "bytes of output left out" in r.log,
                                   "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def test_a_candidate_that_prints_without_end_is_read_bounded(tmp_path):
    """Once, a candidate printing 100 MB per call took the grading process to 2.6 GB: the parent read all of
    it. Now it reads the start and the end of what each request printed, and notes how much it left out."""
    script = tmp_path / "peak.py"
    script.write_text(_PEAK_SCRIPT)
    results = {}
    for mb in (0, 16):
        sol = tmp_path / f"flood_{mb}.py"
        sol.write_text(_FLOOD.format(mb=mb))
        p = subprocess.run([sys.executable, str(script), str(DATA / "adv_gemm"), str(sol)], capture_output=True,
                           text=True, timeout=600)
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        assert line, p.stderr[-3000:]
        results[mb] = json.loads(line[7:])
    quiet, loud = results[0], results[16]
    assert loud["status"] == "PASSED" and loud["left_out"], loud
    assert loud["printed"] >= 16 << 20  # every call printed 16 MB
    assert loud["log_chars"] <= 16000 + LOG_HEAD + LOG_TAIL
    assert loud["peak_mb"] < quiet["peak_mb"] + 150, results
