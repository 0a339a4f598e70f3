"""Fakes for the tuner's tests (no nvcc, no GPU), shared by test_search.py and test_distributed.py.

Worker processes of test_distributed.py import this module by name (spawned processes inherit the
parent's ``sys.path``, which holds tests/), so everything a worker needs is at module level here.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ucutlass.build import BuildResult
from ucutlass.lang import parse
from ucutlass.problem import find_problem
from ucutlass.search import TuneConfig, Tuner, plan
from ucutlass.search.study import Outcome

SPEC = """
kernel qkv_proj : gemm {
  a : bf16[M, K] row <- hidden_states
  b : bf16[N, K] row <- qkv_weight
  d : bf16[M, N] row -> qkv
  tile      = {64x128x64, 128x128x64, 128x192x64, 256x128x64}
  cluster   = {1x1x1, 2x1x1}
  schedule  = {cooperative, pingpong}
  epilogue {
    bias : bf16[N] <- qkv_bias
    d = acc + bias
  }
}
"""

PROBLEM = "qkv_proj_bias_qwen2_5_7b"


def make_plan():
    """The plan of SPEC on PROBLEM: 16 combinations, 12 legal; tile M = 256 "fails to compile"."""
    return plan(find_problem(PROBLEM), parse(SPEC, "spec.ucut"), source_file="spec.ucut", max_workloads=3)


class FakeBuild:
    """Builds nothing; fails tile M = 256 (as if nvcc rejected it)."""

    def __init__(self):
        self.calls = []

    def __call__(self, candidates):
        out = []
        for c in candidates:
            self.calls.append(c.params)
            ok = not c.params["tile"].startswith("256")
            out.append(BuildResult(key=c.kernel.digest(), name=c.kernel.config_name(), entry=Path("/nonexistent"),
                                   so_path=Path("/nonexistent/kernel.so") if ok else None,
                                   source_path=Path("/nonexistent/kernel.cu"), cached=False, seconds=0.0,
                                   error="" if ok else "error: static assertion failed (fake)"))
        return out


class FakeMeasure:
    """Deterministic times: a config's speed depends on its tile and cluster; optionally crashes one.

    Args:
        crash_tile: configurations with this tile "crash".
        log: append one JSON line per measurement (pid, params, workloads) to this file.
        delay_s: seconds each measurement takes.
        sleep_on: params measured slowly (``sleep_s``), once: the first measurement of them writes this
            process's pid into ``marker_dir/sleeping`` and sleeps, so that a test can kill the worker.
    """

    SPEED = {"64x128x64": 3.0, "128x128x64": 1.6, "128x192x64": 1.2, "256x128x64": 1.1}
    #: with ``by_m``: below M = 1000 (decode) small tiles win, as on a GPU
    SPEED_SMALL_M = {"64x128x64": 0.5, "128x128x64": 1.0, "128x192x64": 1.5, "256x128x64": 2.0}

    def __init__(self, crash_tile: str | None = None, sol_ms: float = 1.0, log: str | None = None,
                 delay_s: float = 0.0, sleep_on: dict | None = None, sleep_s: float = 0.0,
                 marker_dir: str | None = None, by_m: bool = False, dispatch_status: str = "PASSED"):
        self.crash_tile = crash_tile
        self.by_m, self.dispatch_status = by_m, dispatch_status
        self.dispatches = []
        self.sol_ms = sol_ms
        self.log, self.delay_s = log, delay_s
        self.sleep_on, self.sleep_s, self.marker_dir = sleep_on, sleep_s, marker_dir
        self.measured = []
        self.reference_calls = 0

    def reference_ms(self, workload):
        self.reference_calls += 1
        return 3.0 * self.sol_ms

    def _maybe_sleep(self, params) -> None:
        if self.sleep_on is None or params != self.sleep_on:
            return
        try:
            fd = os.open(Path(self.marker_dir) / "slept", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # slept once already: the retry goes through
        os.close(fd)
        tmp = Path(self.marker_dir) / f".sleeping-{os.getpid()}"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, Path(self.marker_dir) / "sleeping")
        time.sleep(self.sleep_s)

    def __call__(self, cand, workloads):
        self.measured.append(dict(cand.params))
        if self.log:
            line = json.dumps({"pid": os.getpid(), "params": cand.params, "workloads": len(workloads)}) + "\n"
            with open(self.log, "a") as f:
                f.write(line)
        self._maybe_sleep(dict(cand.params))
        if self.delay_s:
            time.sleep(self.delay_s)
        if cand.params["tile"] == self.crash_tile:
            return [Outcome(w, "CRASHED", message="illegal memory access (fake)") for w in workloads]
        return [self._outcome(cand.params, w) for w in workloads]

    def _outcome(self, params, w, status="PASSED"):
        m = w.axes["batch_size"] * w.axes["seq_len"]
        speed = self.SPEED_SMALL_M if self.by_m and m < 1000 else self.SPEED
        t = speed[params["tile"]] * (0.9 if params["cluster"] == "2x1x1" else 1.0)
        if params["schedule"] == "pingpong":
            t *= 1.05
        return Outcome(w, status, latency_ms=t * self.sol_ms, reference_ms=3.0 * self.sol_ms, t_sol_ms=self.sol_ms)

    def dispatch(self, program, builds, workloads):
        """Each workload timed with the kernel of the dispatch that serves its M."""
        from ucutlass.runtime import pick

        kernels = program.dispatch()
        self.dispatches.append([k.name for k in kernels])
        out = []
        for w in workloads:
            k = kernels[pick([k.when for k in kernels], {"M": w.axes["batch_size"] * w.axes["seq_len"]})]
            params = {"tile": "x".join(map(str, k.tile)), "cluster": "x".join(map(str, k.cluster)),
                      "schedule": k.schedule.value}
            out.append(self._outcome(params, w, self.dispatch_status))
        return out


def make_tuner(p, build, measure, **kw):
    return Tuner(p.problem, p.binding, p.space, build=build, measure=measure, t_sol_ms=lambda w: measure.sol_ms,
                 config=kw.pop("config", TuneConfig(batch=4, seed=1)), **kw)


@dataclass(frozen=True)
class FakeWorker:
    """A worker process of the distributed tests: the fake builder and measurer on a shared study."""

    storage: str
    study_name: str
    config: TuneConfig
    log: str | None = None
    delay_s: float = 0.0
    sleep_on: dict | None = None
    sleep_s: float = 0.0
    marker_dir: str | None = None
    storage_kwargs: dict = field(default_factory=dict)
    barrier_dir: str | None = None  # when set, the workers start working together (not one after another)

    def _barrier(self, index: int, count: int, timeout_s: float = 60.0) -> None:
        folder = Path(self.barrier_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"ready-{index}").touch()
        deadline = time.monotonic() + timeout_s
        while len(list(folder.glob("ready-*"))) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    def __call__(self, index: int, count: int) -> str:
        from ucutlass.search.storage import open_storage

        if self.barrier_dir:
            self._barrier(index, count)
        storage = open_storage(self.storage, **self.storage_kwargs)
        measure = FakeMeasure(log=self.log, delay_s=self.delay_s, sleep_on=self.sleep_on, sleep_s=self.sleep_s,
                              marker_dir=self.marker_dir)
        tuner = make_tuner(make_plan(), FakeBuild(), measure, config=self.config, storage=storage,
                           study_name=self.study_name, worker_index=index, workers=count, poll_s=0.1)
        reason = tuner.work()
        print(f"worker {index} stopped: {reason}", flush=True)
        return reason


def run_fake_study(storage: str, study_name: str, workers: int, config: TuneConfig, out: str,
                   coordinator_log: str | None = None, **worker_kw):
    """Coordinator: prepare the study, run ``workers`` FakeWorker processes, verify and collect."""
    from ucutlass.search.distributed import tune_in_workers

    measure = FakeMeasure(log=coordinator_log)
    tuner = make_tuner(make_plan(), FakeBuild(), measure, config=config, storage=storage, study_name=study_name,
                       workers=workers)
    worker = FakeWorker(storage, study_name, config, **worker_kw)
    return tuner, tune_in_workers(tuner, worker, workers, log_dir=Path(out) / "workers", poll_s=0.1)


def pop_queue(storage: str, study_name: str, out: str, barrier_dir: str, parties: int) -> None:
    """Once all ``parties`` processes have loaded the study (each announces itself in ``barrier_dir``, so
    that they start together however slow one's imports are), ask trials of a study until the queue is
    empty; write the numbers of the queued trials this process got, one a line (a worker process of the
    queue test)."""
    import optuna
    from optuna.distributions import IntDistribution

    from ucutlass.search.storage import open_storage

    study = optuna.load_study(study_name=study_name, storage=open_storage(storage, heartbeat_s=None))
    barrier = Path(barrier_dir)
    (barrier / str(os.getpid())).write_text("")
    deadline = time.monotonic() + 90.0
    while len(list(barrier.iterdir())) < parties and time.monotonic() < deadline:
        time.sleep(0.01)
    got = []
    while True:
        trial = study.ask({"x": IntDistribution(0, 10_000)})
        queued = "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id)
        study.tell(trial, float(trial.params["x"]))
        if not queued:
            break
        got.append(trial.number)
        time.sleep(0.02)  # leave the others a turn: a queue drained by one process shows no sharing
    Path(out).write_text("".join(f"{n}\n" for n in got))
