"""The adversarial suite's table: every kind of cheat, its solution file, and the verdict the grader must
give on the CPU (CI) and on the GPU (docs/grader.md prints the same table); and its fixtures: one grader
per (problem, device) for a whole module, and the honest baseline a no-gain cheat is compared with.

The fixtures live here rather than in a conftest.py, and the test modules import them: a second module
named ``conftest`` would shadow tests/conftest.py for tests that import from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ucutlass.grader import Grader, Status, solution_from_file
from ucutlass.grader.sandbox import landlock_abi
from ucutlass.problem import load_problem

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SOLUTIONS = HERE / "solutions"

#: Small timing settings keep CI fast; timeout_s is generous for a loaded CI machine.
FAST = dict(warmup_ms=2.0, rep=5.0, timeout_s=120.0)
GPU = dict(warmup_ms=10.0, rep=40.0, timeout_s=120.0)

#: Workload index graded per problem on each device (adv_gemm: M=128 on the CPU, M=4096 on the GPU).
WORKLOAD = {"cpu": {"adv_gemm": 1, "adv_moe": 0, "adv_gemm_bf16": 0},
            "gpu": {"adv_gemm": 2, "adv_moe": 1, "adv_gemm_bf16": 0}}

S = Status
NUMERIC = frozenset({S.INCORRECT_NUMERICAL, S.INCORRECT_ACCURACY})


@dataclass(frozen=True)
class Kind:
    """One kind of cheat.

    Attributes:
        name: short id (test ids, the docs table).
        trick: what the cheat does.
        file: its solution under solutions/.
        problem: adv_gemm, adv_moe or adv_gemm_bf16 (data/).
        cpu / gpu: the statuses the grader may give; None where the cheat cannot run on that device.
        words: must appear in the reason.
        no_gain: the cheat is neutralised rather than caught: PASSED is allowed, but never faster than the
            honest kernel (and its log must not say ``cache hit``).
    """

    name: str
    trick: str
    file: str
    problem: str
    cpu: frozenset | None
    gpu: frozenset | None
    words: str = ""
    no_gain: bool = False
    needs_signal_scope: bool = False  # only safe to run where Landlock scopes signals (else it kills pytest)


def _s(*statuses: Status) -> frozenset:
    return frozenset(statuses)


KINDS: tuple[Kind, ...] = (
    Kind("side_stream", "work on a side stream, never joined", "cheat_side_stream.py", "adv_gemm",
         None, _s(S.UNTIMED_WORK), "wall clock"),
    # Half the work hidden: failed, or charged at the wall clock's time (grader/guards.py wall_chargeable).
    Kind("side_stream_part", "half the rows on a side stream, never joined", "cheat_side_stream_part.py",
         "adv_gemm", None, _s(S.PASSED, S.UNTIMED_WORK), no_gain=True),
    Kind("background_thread", "work finished by a background thread", "cheat_background_thread.py", "adv_gemm",
         _s(S.THREAD_SPAWNED), _s(S.THREAD_SPAWNED), "thread"),
    Kind("lazy_subclass", "lazily evaluated tensor subclass", "cheat_lazy_subclass.py", "adv_gemm",
         _s(S.INCORRECT_DTYPE), _s(S.INCORRECT_DTYPE), "exactly torch.Tensor"),
    Kind("patch_elapsed_time", "patched torch.cuda.Event.elapsed_time", "cheat_patch_elapsed_time.py", "adv_gemm",
         _s(S.TAMPERED), _s(S.TAMPERED), "torch.cuda.Event.elapsed_time"),
    Kind("patch_perf_counter", "patched time.perf_counter", "cheat_patch_perf_counter.py", "adv_gemm",
         _s(S.TAMPERED), _s(S.TAMPERED), "time.perf_counter"),
    Kind("patch_grader", "patched grader timing loop (ucutlass.grader.timing.bench)", "cheat_patch_grader.py",
         "adv_gemm", _s(S.TAMPERED), _s(S.TAMPERED), "ucutlass.grader.timing.bench"),
    Kind("settrace", "trace hook rewriting the grader's locals", "cheat_settrace.py", "adv_gemm",
         _s(S.TAMPERED), _s(S.TAMPERED), "sys.settrace"),
    Kind("forged_reply", "fake timing reply sent on the worker's pipe", "cheat_forged_reply.py", "adv_gemm",
         _s(S.TAMPERED), _s(S.TAMPERED), "inconsistent"),
    Kind("cache_pointer", "outputs cached by input pointer", "cheat_cache_pointer.py", "adv_gemm",
         _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL)),
    Kind("cache_fingerprint", "outputs cached by a fingerprint of the inputs", "cheat_cache_fingerprint.py",
         "adv_gemm", _s(S.PASSED), _s(S.PASSED), no_gain=True),
    Kind("first_calls", "correct only for the first calls", "cheat_first_calls.py", "adv_gemm",
         _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL), "timed call"),
    Kind("uninitialized", "uninitialised output hoping for a freed reference output", "cheat_uninitialized.py",
         "adv_gemm", _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL)),
    Kind("zero_inputs", "zeroes the inputs after computing", "cheat_zero_inputs.py", "adv_gemm",
         _s(S.INPUT_MODIFIED), _s(S.INPUT_MODIFIED), "changed input"),
    Kind("gc_scan", "expected outputs looked up through gc", "cheat_gc_scan.py", "adv_gemm",
         _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL)),
    Kind("ipc_snoop", "expected outputs read from IPC-mapped memory around the buffers", "cheat_ipc_snoop.py",
         "adv_gemm", None, _s(S.INCORRECT_NUMERICAL)),
    Kind("lower_precision", "bf16 arithmetic for an fp32 problem, inside the 1e-2 tolerance",
         "cheat_lower_precision.py", "adv_gemm", _s(S.INCORRECT_ACCURACY), _s(S.INCORRECT_ACCURACY),
         "ground truth"),
    Kind("zeros_tiny", "zeros where outputs are below the absolute tolerance", "cheat_zeros_tiny.py", "adv_gemm",
         _s(S.INCORRECT_ACCURACY), _s(S.INCORRECT_ACCURACY)),
    Kind("partial_dps", "writes only part of the output (destination passing)", "cheat_partial_dps.py",
         "adv_gemm", _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL), "NaN"),
    Kind("partial_within_ratio", "skips one row, inside the 99% matched ratio", "cheat_partial_within_ratio.py",
         "adv_gemm", _s(S.INCORRECT_ACCURACY), _s(S.INCORRECT_ACCURACY)),
    Kind("skip_experts", "skips experts with few tokens (unbalanced routing)", "cheat_skip_experts.py", "adv_moe",
         NUMERIC, NUMERIC, "routing"),
    Kind("hardcoded_shapes", "handles only the listed shapes", "cheat_hardcoded_shapes.py", "adv_gemm",
         _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL), "unlisted shape"),
    Kind("nan", "NaN outputs", "cheat_nan.py", "adv_gemm", _s(S.INCORRECT_NUMERICAL), _s(S.INCORRECT_NUMERICAL),
         "NaN"),
    Kind("alias_input", "returns an input's memory as the output", "cheat_alias_input.py", "adv_gemm",
         _s(S.OUTPUT_ALIASED), _s(S.OUTPUT_ALIASED), "shares memory"),
    Kind("fork_worker", "forks the worker; the child outlives the call", "cheat_fork_worker.py", "adv_gemm",
         _s(S.PROCESS_SPAWNED), _s(S.PROCESS_SPAWNED), "process"),
    Kind("detached_process", "a helper process in a session of its own (start_new_session)",
         "cheat_detached_process.py", "adv_gemm", _s(S.PROCESS_SPAWNED), _s(S.PROCESS_SPAWNED), "process"),
    Kind("daemon", "double fork and setsid: the helper is re-parented away", "cheat_daemon.py", "adv_gemm",
         _s(S.PROCESS_SPAWNED), _s(S.PROCESS_SPAWNED), "process"),
    Kind("forge_descriptors", "forged text written to every inherited descriptor", "cheat_forge_descriptors.py",
         "adv_gemm", _s(S.TAMPERED), _s(S.TAMPERED), "malformed"),
    Kind("escape_write", "writes files outside its scratch folder", "cheat_escape_write.py", "adv_gemm",
         _s(S.RUNTIME_ERROR), _s(S.RUNTIME_ERROR), "Permission denied"),
    Kind("kill_grader", "SIGKILLs its supervisor and the grader", "cheat_kill_grader.py", "adv_gemm",
         _s(S.RUNTIME_ERROR), _s(S.RUNTIME_ERROR), "Operation not permitted", needs_signal_scope=True),
    # Either verdict is right: the grader's reset of the persisting lines the cheat marked is GPU work the
    # cheat causes outside its events (UNTIMED_WORK on the H200 at times), and when it passes it is slower.
    Kind("l2_persist", "persisting-L2 window keeps the weights in L2 across the flush", "cheat_l2_persist.py",
         "adv_gemm_bf16", None, _s(S.PASSED, S.UNTIMED_WORK), no_gain=True),
)

#: Honest solutions per problem (device: which may run where) and the honest baseline a no-gain cheat is
#: compared with.
HONEST = {
    "adv_gemm": [("gemm_honest.py", "both"), ("gemm_honest_dps.py", "both"), ("gemm_honest_fib.json", "both"),
                 ("gemm_honest_triton.py", "gpu"), ("gemm_honest_ctypes_cuda.py", "gpu")],
    "adv_moe": [("moe_honest.py", "both")],
    "adv_gemm_bf16": [("bf16_honest_dps.py", "gpu")],
}
BASELINE = {"adv_gemm": "gemm_honest.py", "adv_moe": "moe_honest.py", "adv_gemm_bf16": "bf16_honest_dps.py"}


def problem(name: str):
    return load_problem(DATA / name)


def solution(file: str, prob=None):
    return solution_from_file(SOLUTIONS / file, prob)


def kinds(device: str) -> list[Kind]:
    """The kinds that run on ``device`` ("cpu" or "gpu")."""
    return [k for k in KINDS if (k.cpu if device == "cpu" else k.gpu) is not None]


def markdown_table() -> str:
    """The table of kinds × verdict, as in docs/grader.md."""
    def verdict(statuses, no_gain: bool) -> str:
        if statuses is None:
            return "—"
        text = " / ".join(sorted(s.value for s in statuses))
        return text + (", no faster than honest" if no_gain else "")

    rows = ["| kind | trick | CPU (CI) | GPU |", "| --- | --- | --- | --- |"]
    for k in KINDS:
        rows.append(f"| `{k.name}` | {k.trick} | {verdict(k.cpu, k.no_gain)} | {verdict(k.gpu, k.no_gain)} |")
    return "\n".join(rows)


def assert_verdict(kind: Kind, r, expected, baseline=None, min_ratio: float = 0.8) -> None:
    """``r`` has one of the ``expected`` statuses, names the trick in its reason, and (no-gain kinds)
    is no faster than ``baseline`` (``latency ≥ min_ratio × baseline latency``)."""
    assert r.status in expected, f"{kind.name}: {r.status.value}: {r.reason}\n{r.log[-3000:]}"
    if kind.words and r.status is not Status.PASSED:
        assert kind.words in r.reason or kind.words in r.log, f"{kind.name}: {r.reason}"
    if r.status is not Status.PASSED:
        assert r.reason, kind.name
        return
    assert kind.no_gain, f"{kind.name} passed"
    assert "cache hit" not in r.log, f"{kind.name}: a cached output was used in a timed call\n{r.log[-2000:]}"
    assert baseline is not None and baseline.status is Status.PASSED, baseline and baseline.log
    assert r.latency_ms >= min_ratio * baseline.latency_ms, (
        f"{kind.name}: {r.latency_ms:.4g} ms vs honest {baseline.latency_ms:.4g} ms")


# --- fixtures ------------------------------------------------------------------------------------------

class Graders:
    """Graders and honest baselines, per problem, for one device."""

    def __init__(self, device: str):
        self.device = device
        self._graders: dict[str, Grader] = {}
        self._baselines: dict[str, object] = {}

    def __call__(self, name: str) -> Grader:
        if name not in self._graders:
            settings = FAST if self.device == "cpu" else GPU
            self._graders[name] = Grader(problem(name), device="cuda" if self.device == "gpu" else "cpu", **settings)
        return self._graders[name]

    def workload(self, name: str) -> int:
        return WORKLOAD[self.device][name]

    def baseline(self, name: str, above_ms: float | None = None):
        """The honest kernel's result on the graded workload, graded once; graded again (up to twice, the
        fastest kept) while its latency is above ``above_ms``: a no-gain cheat is compared with the honest
        kernel's best time, not with one time that another process's load happened to slow down."""
        if name not in self._baselines:
            g = self(name)
            (r,) = g.grade(solution(BASELINE[name], g.problem), [self.workload(name)])
            self._baselines[name] = r
        for _ in range(2):
            best = self._baselines[name]
            if above_ms is None or best.status is not Status.PASSED or best.latency_ms <= above_ms:
                break
            g = self(name)
            (r,) = g.grade(solution(BASELINE[name], g.problem), [self.workload(name)])
            if r.status is Status.PASSED and r.latency_ms < best.latency_ms:
                self._baselines[name] = r
        return self._baselines[name]

    def grade_cheat(self, kind: Kind, expected, min_ratio: float):
        """Grade ``kind``'s cheat on its workload and assert its verdict (:func:`assert_verdict`); a no-gain
        kind is compared with the honest kernel's best time (:meth:`baseline`). Returns the result."""
        if kind.needs_signal_scope and landlock_abi() < 6:
            pytest.skip("Landlock cannot scope signals on this kernel (ABI < 6, Linux < 6.12): the cheat would "
                        "kill the test process (tests/adversarial/test_isolation.py covers it in a subprocess)")
        g = self(kind.problem)
        (r,) = g.grade(solution(kind.file, g.problem), [self.workload(kind.problem)])
        baseline = None
        if kind.no_gain:
            baseline = self.baseline(kind.problem,
                                     above_ms=r.latency_ms / min_ratio if r.status is Status.PASSED else None)
        assert_verdict(kind, r, expected, baseline, min_ratio=min_ratio)
        return r

    def close(self) -> None:
        for g in self._graders.values():
            g.close()


class CpuLoad:
    """Processes that keep every core busy (``factor`` × the cores), for as long as the context lasts: the
    grader's guards must not flag honest work on a machine that compiles or runs other jobs meanwhile (CI's
    machine is shared; a tune compiles while it grades)."""

    SPIN = "import os, signal\nsignal.signal(signal.SIGTERM, lambda *a: os._exit(0))\nwhile True:\n    pass\n"

    def __init__(self, factor: int = 2):
        import os

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.count = factor * cores  # the cores this process may run on (taskset narrows them)
        self.procs: list = []

    def __enter__(self) -> "CpuLoad":
        import subprocess
        import sys

        self.procs = [subprocess.Popen([sys.executable, "-c", self.SPIN], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for _ in range(self.count)]
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


@pytest.fixture(scope="module")
def cpu_load():
    """The module runs with 2 × cores spinning processes beside it (:class:`CpuLoad`)."""
    with CpuLoad(2) as load:
        yield load


@pytest.fixture(scope="module")
def cpu_graders():
    g = Graders("cpu")
    yield g
    g.close()


@pytest.fixture(scope="module")
def gpu_graders():
    g = Graders("gpu")
    yield g
    g.close()
