"""Several workers on one study: processes pinned to GPUs, coordinated through Optuna's storage.

``ucutlass tune PROBLEM --workers N``: the command's process is the coordinator. It prepares the study
(:meth:`Tuner.prepare`: reference timing, budget, sampler, the queue of an exhaustive search), then
starts N worker processes (``multiprocessing``'s spawn), each pinned to one GPU with
``CUDA_VISIBLE_DEVICES`` (round-robin: with more workers than GPUs, several share one) and running
:meth:`Tuner.work` on the shared study with ``cores // N`` parallel nvcc jobs; compiled kernels are shared
through the content-addressed kernel cache. Every decision of the loop is read from the storage, so the
budget and the stop rules hold for the study as a whole (:mod:`search.tuner`).

The coordinator waits, with a progress bar fed from the storage. When a worker exits, the trials it still
held are failed and queued again once (:func:`search.storage.fail_dead_workers`); the worker is not
restarted: one that died for a reason of its own would die again, the others finish the study, and
running the same command again resumes it. When every worker has exited, the coordinator verifies the
best configuration on every workload, once, and the report is written once.

Many hosts: run the same command on each, with one ``--storage`` URL of a database server
(``postgresql+psycopg://…``). Each host's coordinator starts workers on its own GPUs; all share the study;
Optuna's heartbeat fails the trials of a host that is lost; each coordinator reports the whole study when
its workers stop.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import optuna

from ucutlass.problem import Problem

from .storage import fail_dead_workers, worker_id
from .study import TuneConfig, TuneResult, is_interrupted, is_measured
from .tuner import Tuner

#: A worker: called as ``worker(index, count)`` in its own process, runs :meth:`Tuner.work` to the end.
#: It must be picklable (a module-level function, a ``functools.partial`` of one, or a dataclass such as
#: :class:`GpuWorker`).
WorkerFn = Callable[[int, int], object]


def visible_gpus() -> list[str]:
    """The GPUs workers are pinned to: the entries of ``CUDA_VISIBLE_DEVICES`` when set, else
    ``0 … n-1`` (as many as torch sees)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()][:count]
    return [str(i) for i in range(count)]


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` for the duration (a spawned child inherits the environment)."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def _worker_main(worker: WorkerFn, index: int, count: int, gpu: str | None, log_path: str | None) -> None:
    """Entry point of a worker process: pin the GPU, send output to the log, run the worker."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    worker(index, count)


def _log_tail(path: Path | None, lines: int = 12) -> str:
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class _Watcher:
    """Turns the storage's newly finished trials into the progress events of a single-process run."""

    def __init__(self, tuner: Tuner):
        self.tuner = tuner
        trials = tuner.study.get_trials(deepcopy=False)
        self.seen = {t.number for t in trials if t.state.is_finished()}
        self.best = min((t.value for t in trials if is_measured(t) and t.value is not None), default=float("inf"))

    def poll(self) -> None:
        for t in sorted(self.tuner.study.get_trials(deepcopy=False), key=lambda t: t.number):
            if not t.state.is_finished() or t.number in self.seen:
                continue
            self.seen.add(t.number)
            ev = {"number": t.number, "params": t.params, "worker": t.user_attrs.get("worker")}
            if is_measured(t):
                if t.value is not None:
                    self.best = min(self.best, t.value)
                self.tuner.progress({"event": "trial", "state": t.state.name, "value": t.value, "best": self.best,
                                     "reason": t.user_attrs.get("reason", ""), **ev})
            elif is_interrupted(t):
                self.tuner.progress({"event": "interrupted", **ev})
            elif t.user_attrs.get("status") == "ILLEGAL":
                self.tuner.progress({"event": "pruned", "reason": t.user_attrs.get("reason", ""), **ev})


def run_workers(tuner: Tuner, worker: WorkerFn, count: int, *, gpus: Sequence[str] | None = None,
                log_dir: Path | None = None, poll_s: float = 0.5) -> str:
    """Start ``count`` worker processes on the study that ``tuner`` prepared and wait for them.

    Args:
        tuner: the coordinator's tuner, after :meth:`Tuner.prepare`; its ``progress`` gets the events.
        worker: what each process runs (see :data:`WorkerFn`).
        gpus: GPU ids for ``CUDA_VISIBLE_DEVICES``, assigned round-robin (None: not pinned).
        log_dir: each worker's stdout and stderr go to ``log_dir/worker-I.log`` (None: inherited).
        poll_s: how often the storage and the processes are looked at.

    Returns:
        Why the study stopped (:meth:`Tuner.stop_reason`).
    """
    study = tuner.study
    ctx = mp.get_context("spawn")
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    procs: dict[int, tuple[mp.Process, Path | None]] = {}
    watcher = _Watcher(tuner)
    began = time.monotonic()
    try:
        for i in range(count):
            gpu = gpus[i % len(gpus)] if gpus else None
            log = log_dir / f"worker-{i}.log" if log_dir is not None else None
            p = ctx.Process(target=_worker_main, args=(worker, i, count, gpu, str(log) if log else None),
                            name=f"ucutlass-tune-worker-{i}")
            with _env("CUDA_VISIBLE_DEVICES", gpu):
                p.start()
            procs[i] = (p, log)
            tuner.progress({"event": "worker-start", "index": i, "pid": p.pid, "gpu": gpu, "log": log})
        live = dict(procs)
        while live:
            time.sleep(poll_s)
            for i, (p, log) in list(live.items()):
                if p.is_alive():
                    continue
                p.join()
                del live[i]
                failed = fail_dead_workers(study, workers=[worker_id(p.pid)])
                tuner.progress({"event": "worker-exit", "index": i, "pid": p.pid, "code": p.exitcode,
                                "failed": failed, "log": log, "tail": _log_tail(log) if p.exitcode else ""})
            watcher.poll()
    finally:
        for p, _ in procs.values():  # interrupted (Ctrl-C) or failed: stop the workers that still run
            if p.is_alive():
                p.terminate()
        for p, _ in procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        # every worker of this run has exited: the trials they still hold will not be told
        fail_dead_workers(study, workers=[worker_id(p.pid) for p, _ in procs.values()])
    watcher.poll()
    tuner.search_seconds = time.monotonic() - began
    return tuner.stop_reason()


def tune_in_workers(tuner: Tuner, worker: WorkerFn, count: int, **kwargs) -> TuneResult:
    """Prepare the study with ``tuner``, run ``count`` workers on it (:func:`run_workers`, same keyword
    arguments), then verify and collect with ``tuner`` (:meth:`Tuner.finish`)."""
    tuner.prepare()
    return tuner.finish(run_workers(tuner, worker, count, **kwargs))


def _print_event(ev: dict) -> None:
    """A worker's log line per trial (its own progress goes to the coordinator through the storage)."""
    if ev["event"] in ("trial", "lost"):
        print(f"trial {ev['number']} {ev.get('state', 'LOST')} {ev.get('value', '')} {ev.get('reason', '')}"
              f" {ev.get('params', '')}", flush=True)


@dataclass(frozen=True)
class GpuWorker:
    """The worker of ``ucutlass tune --workers N`` (picklable: the spawned process parses the program again,
    opens its own Grader on the GPU it is pinned to, and builds with ``jobs // count`` nvcc processes)."""

    problem: Problem
    source: str
    source_file: str
    kernel: str | None
    config: TuneConfig
    storage: str
    study_name: str
    jobs: int | None
    hardware: str

    def __call__(self, index: int, count: int) -> str:
        from ucutlass.lang import parse
        from ucutlass.grader import Grader
        from ucutlass.sol import analyze, load_hardware, prefetch_counts

        from .planning import plan
        from .measure import GraderMeasurer, NvccBuilder

        p = plan(self.problem, parse(self.source, self.source_file), kernel=self.kernel,
                 source_file=self.source_file, max_workloads=self.config.max_workloads)
        hw = load_hardware(self.hardware)
        jobs = max(1, (self.jobs or os.cpu_count() or 1) // count)
        print(f"worker {index}/{count} pid {os.getpid()} CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
              f"nvcc jobs {jobs}", flush=True)
        timeout_s = self.config.sol_timeout_s
        prefetch_counts(self.problem, p.tuned, timeout_s=timeout_s)  # the tuned workloads in one counting process

        def t_sol_ms(w):
            return analyze(self.problem, w, hw, timeout_s=timeout_s).t_sol_ms

        with Grader(self.problem, t_sol_ms=t_sol_ms) as grader:
            tuner = Tuner(self.problem, p.binding, p.space, build=NvccBuilder(self.source_file, jobs=jobs),
                          measure=GraderMeasurer(grader, self.source_file), t_sol_ms=t_sol_ms, config=self.config,
                          storage=self.storage, study_name=self.study_name, progress=_print_event,
                          worker_index=index, workers=count)
            reason = tuner.work()
        print(f"worker {index} stopped: {reason}", flush=True)
        return reason
