"""ucutlass.sol.isolation: a problem's reference is counted in a child process, with a deadline.

Broken references (sleeping, spinning, exiting, crashing) end ``ucutlass sol`` and ``analyze`` with a clear
error in bounded time; a working one gives the same counts as in this process. Tiny problem folders, 3 s
deadlines: each broken case costs a child start (~2 s) plus at most the deadline.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

import ucutlass.sol.analysis as analysis
from ucutlass.cli import main
from ucutlass.errors import ProblemError, UcutError
from ucutlass.problem import load_problem
from ucutlass.sol import (BrokenReferenceError, Counts, OpCount, SolError, analyze, clear_cache, count_workload,
                          counts_for, prefetch_counts, shared_counting_process)
from ucutlass.sol import isolation

TIMEOUT = 3
#: Starting the child (an interpreter, torch) is not under the deadline; on a loaded CI machine it can take this.
START_ALLOWANCE = 12

GEMM = "import torch\ndef run(a, b):\n    return a @ b.t()\n"
#: a grandchild the reference starts: the group kill must take it too (the odd number marks it in /proc)
GRANDCHILD = "917.25"

BROKEN = {
    "sleep_import": ("import time\ntime.sleep(1000)\n" + GEMM,
                     "its reference did not finish loading (executing its source) within 3 s"),
    "sleep_run": (f"import subprocess, time\ndef run(a, b):\n    subprocess.Popen(['sleep', '{GRANDCHILD}'])\n"
                  "    time.sleep(1000)\n",
                  "its reference did not finish counting workload M=64 within 3 s"),
    "spin": ("def run(a, b):\n    while a.shape[0] > 64:\n        pass\n    return a @ b.t()\n",  # M=64 counts
             "its reference did not finish counting workload M=128 within 3 s"),
    "exit_import": ("import os\nos._exit(3)\n" + GEMM,
                    "the counting process exited with code 3 while its reference was loading"),
    "exit_run": ("import os\ndef run(a, b):\n    for i in range(50000):\n        print('x' * 100)\n"
                 "    print('last words', flush=True)\n    os._exit(3)\n",
                 "the counting process exited with code 3 while counting workload M=64"),
    "sys_exit": ("import sys\ndef run(a, b):\n    sys.exit(4)\n",
                 "the counting process exited with code 4 while counting workload M=64"),
    "segfault": ("import ctypes\ndef run(a, b):\n    ctypes.string_at(0)\n",
                 "the counting process was killed by signal SIGSEGV (11) while counting workload M=64"),
}


def gemm_problem(root: Path, name: str, reference: str, ms=(64, 128)):
    """A problem folder c = a·bᵀ (a [M, 64], b [64, 64] bf16) with one workload per M, loaded."""
    folder = root / name
    folder.mkdir()
    d = {"name": name, "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64},
                                "K": {"type": "const", "value": 64}},
         "inputs": {"a": {"shape": ["M", "K"], "dtype": "bfloat16"}, "b": {"shape": ["N", "K"], "dtype": "bfloat16"}},
         "outputs": {"c": {"shape": ["M", "N"], "dtype": "bfloat16"}}, "reference": reference}
    (folder / "definition.json").write_text(json.dumps(d))
    (folder / "workload.jsonl").write_text("\n".join(
        json.dumps({"uuid": f"{name}-{m}", "axes": {"M": m}, "inputs": {}}) for m in ms))
    return load_problem(folder)


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_cache()
    yield
    clear_cache()


def grandchildren_alive() -> list[str]:
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if GRANDCHILD.encode() in cmd:
            alive.append(pid)
    return alive


# --- counts cross the process boundary as JSON, exactly -------------------------------------------------

def test_counts_round_trip_through_json():
    c = Counts(flops_by_precision={"bf16": 2 ** 70, "tf32": 3}, input_bytes={"x": 10, "w": 0}, output_bytes={"y": 4},
               per_op=(OpCount("aten.mm", "bf16", 2 ** 70, 2, "causal: lower triangle"),
                       OpCount("elementwise and reductions", "simt", 5, 1, "CUDA cores; not part of T_SOL")),
               other_flops=5, notes=("a note", "another"), data_dependent=True, seed=123)
    assert Counts.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert Counts.from_json(json.loads(json.dumps(Counts({}, (), {}, {}).to_json()))) == Counts({}, (), {}, {})
    good = c.to_json()
    for bad in ({**good, "seed": "1"}, {**good, "other_flops": True}, {k: v for k, v in good.items() if k != "notes"},
                {**good, "per_op": [{"op": "aten.mm"}]}, {**good, "input_bytes": {"x": "10"}}, [1, 2]):
        with pytest.raises(ValueError):
            Counts.from_json(bad)


def test_child_counts_equal_in_process_counts_in_one_process(tmp_path, monkeypatch, capsys):
    """A causal attention and a routed MoE (notes, simt work, data-dependent, seeded): the same Counts both ways.
    The reference also prints 5 MB at import: none of it reaches the caller."""
    ref = """
import torch
import torch.nn.functional as F
print("chatty reference " * 300000)
def make(axes, device):
    t, e, h = axes["T"], 16, 64
    return {"x": torch.randn(t, h, device=device), "ids": torch.randint(0, e, (t, 2), device=device),
            "w": torch.randn(e, h, h, device=device)}
def run(x, ids, w):
    out = torch.zeros_like(x)
    for e in range(w.shape[0]):
        rows = torch.where((ids == e).any(dim=1))[0]
        if rows.numel():
            out[rows] += x[rows] @ w[e].t()
    q = x.reshape(1, 1, x.shape[0], 64)
    return out + F.scaled_dot_product_attention(q, q, q, is_causal=True).reshape(x.shape)
"""
    folder = tmp_path / "routed"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({
        "axes": {"T": {"type": "var"}},
        "inputs": {"x": {"shape": ["T", 64], "dtype": "float32"}, "ids": {"shape": ["T", 2], "dtype": "int64"},
                   "w": {"shape": [16, 64, 64], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["T", 64], "dtype": "float32"}}, "reference": ref,
        "custom_inputs_entrypoint": "make"}))
    (folder / "workload.jsonl").write_text("\n".join(json.dumps({"uuid": f"t{t}", "axes": {"T": t}, "inputs": {}})
                                                     for t in (3, 40)))
    p = load_problem(folder)
    in_process = [count_workload(p, w) for w in p.workloads]
    capsys.readouterr()
    starts = []
    real = analysis.count_in_child
    monkeypatch.setattr(analysis, "count_in_child", lambda *a, **k: starts.append(a[1]) or real(*a, **k))
    prefetch_counts(p)
    reports = [analyze(p, w, "h200") for w in p.workloads]
    assert [counts_for(p, w) for w in p.workloads] == in_process
    assert len(starts) == 1 and len(starts[0]) == 2  # one child counted both workloads; the rest came from the cache
    assert in_process[0].data_dependent and any(o.precision == "simt" for o in in_process[0].per_op)
    assert any("causal" in o.note for o in in_process[1].per_op)
    assert [r.flops for r in reports] == [c.flops for c in in_process]
    assert capsys.readouterr() == ("", "")


# --- broken references: a clear error in bounded time, never a hang or a silent exit -------------------

@pytest.mark.parametrize("kind", list(BROKEN))
def test_broken_reference_ends_sol_with_a_clear_error(kind, tmp_path, capsys):
    reference, expected = BROKEN[kind]
    p = gemm_problem(tmp_path, kind, reference)
    start = time.monotonic()
    rc = main(["sol", str(p.path), "--timeout", str(TIMEOUT)])
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.startswith(f"error: broken problem {kind}: {expected}"), err
    assert elapsed < TIMEOUT + START_ALLOWANCE, elapsed
    if kind == "exit_run":  # the last output is quoted, capped
        assert "its last output:" in err and err.rstrip().endswith("last words") and len(err) < 3000
    if kind in ("segfault", "sleep_run", "spin"):  # faulthandler's traceback says where, in the reference
        assert re.search(f'File "<{kind} reference>", line \\d+ in run', err), err
    if kind == "sleep_run":
        assert grandchildren_alive() == []  # the whole process group was killed
    # the API raises the project's error (the problem is known to be broken now: at once, for any workload)
    if kind == "spin":  # what was counted before the hang stays counted
        assert analyze(p, 0, "h200").flops == 2 * 64 * 64 * 64
    for w in p.workloads[1 if kind == "spin" else 0:]:
        start = time.monotonic()
        with pytest.raises(BrokenReferenceError, match=f"broken problem {kind}") as e:
            analyze(p, w, "h200", timeout_s=TIMEOUT)
        assert isinstance(e.value, SolError) and isinstance(e.value, UcutError)
        assert time.monotonic() - start < 1
    hung = kind.startswith(("sleep", "spin"))
    assert e.value.problem_id == kind and e.value.workload == ("M=128" if kind == "spin" else "M=64")
    assert (e.value.timeout_s, e.value.status is None) == ((TIMEOUT, True) if hung else (None, False))
    with pytest.raises(ValueError, match="positive"):
        analyze(p, 0, "h200", timeout_s=0)


def test_errors_the_reference_raises_keep_their_type_and_message(tmp_path):
    with shared_counting_process():  # errors the reference raises leave the process in service: one for both
        p = gemm_problem(tmp_path, "picky", "def run(a, b):\n    if a.shape[0] == 128:\n"
                         "        raise ValueError('too big')\n"
                         "    return (a @ b.t(), a) if a.shape[0] > 128 else a @ b.t()\n", ms=(64, 128, 256))
        prefetch_counts(p)  # one child: each workload's outcome is cached
        assert analyze(p, 0, "h200").flops == 2 * 64 * 64 * 64
        with pytest.raises(SolError, match=r"picky: counting workload M=128 failed: ValueError: too big "
                                           r"\(reference line 3, in run\)") as e:
            analyze(p, 1, "h200")
        assert not isinstance(e.value, BrokenReferenceError)
        with pytest.raises(ProblemError, match=r"picky: run returned 2 values, definition has 1 outputs \['c'\]"):
            analyze(p, 2, "h200")
        # a reference that does not load: a ProblemError, with its message, for every workload
        p = gemm_problem(tmp_path, "no_run", "import torch\ndef walk(a, b):\n    return a\n")
        for w in p.workloads:
            with pytest.raises(ProblemError, match=r"no_run: reference source defines no run\(\.\.\.\)"):
                analyze(p, w, "h200")


def test_a_shared_process_serves_problems_in_turn_and_is_replaced_after_an_exit(tmp_path):
    def child_pid():
        return isolation._LOCAL.child.proc.pid

    good = [gemm_problem(tmp_path, f"good{i}", GEMM, ms=(64 * (i + 1),)) for i in range(3)]
    with shared_counting_process():
        assert analyze(good[0], 0, "h200").flops == 2 * 64 * 64 * 64
        first = child_pid()
        with pytest.raises(ProblemError, match="defines no run"):  # the reference's own error: the process stays
            analyze(gemm_problem(tmp_path, "no_run", "def walk(a, b):\n    return a\n"), 0, "h200")
        assert analyze(good[1], 0, "h200").flops == 2 * 128 * 64 * 64 and child_pid() == first
        with shared_counting_process():  # nested: the same process
            with pytest.raises(BrokenReferenceError, match="exited with code 3"):
                analyze(gemm_problem(tmp_path, "exits", BROKEN["exit_import"][0]), 0, "h200")
            assert isolation._LOCAL.child is None  # it is gone
        assert counts_for(good[2], good[2].workloads[0]) == count_workload(good[2], good[2].workloads[0])
        second = child_pid()
        assert second != first
    assert isolation._LOCAL.child is None and not Path(f"/proc/{second}").exists()  # killed with the block


def test_tune_dry_run_timeout_bounds_its_t_sol(tmp_path, capsys):
    p = gemm_problem(tmp_path, "sleepy_gemm", "import time\ndef run(a, b):\n    time.sleep(1000)\n", ms=(128,))
    spec = tmp_path / "gemm.ucut"
    spec.write_text("kernel g : gemm {\n  target = sm90\n  a : bf16[M, K] row <- a\n  b : bf16[N, K] row <- b\n"
                    "  d : bf16[M, N] row -> c\n  tile = {128x64x64, 128x128x64}\n}\n")
    start = time.monotonic()
    rc = main(["tune", str(p.path), "--spec", str(spec), "--dry-run", "--timeout", str(TIMEOUT)])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    assert "error: broken problem sleepy_gemm: its reference did not finish counting workload M=128 within 3 s" in err
    assert time.monotonic() - start < TIMEOUT + START_ALLOWANCE
    with pytest.raises(SystemExit) as usage:  # a usage error (exit 2) before anything is counted
        main(["sol", str(p.path), "--timeout", "-1"])
    assert usage.value.code == 2
    assert "--timeout: expected a number of seconds > 0, got -1" in capsys.readouterr().err
