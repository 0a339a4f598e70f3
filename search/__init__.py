"""ucutlass.search: the Optuna tuner behind ``ucutlass tune PROBLEM``.

Modules: :mod:`.space` (choices → Optuna distributions, arch-rule pruning), :mod:`.budget` (SOL-driven
trial budget and stop rules), :mod:`.tuner` (the ask-and-tell loop), :mod:`.storage` (Optuna storages,
failing the trials of dead workers), :mod:`.distributed` (worker processes on several GPUs),
:mod:`.measure` (nvcc builder and grader measurer), :mod:`.report` (best.ucut, table, JSON, plot).
:func:`tune` wires them together.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ucutlass.errors import UcutError

from .budget import StopRule, geomean, headroom, trial_budget
from .space import SearchSpace
from .planning import TunePlan, plan
from .study import Candidate, Outcome, Setup, TuneConfig, TuneResult, representative_workloads
from .tuner import Tuner

__all__ = ["tune", "plan", "TunePlan", "NoGpuError", "SearchSpace", "Tuner", "TuneConfig", "TuneResult",
           "Setup", "Candidate", "Outcome", "StopRule", "trial_budget", "headroom", "geomean",
           "representative_workloads"]

NO_GPU_MESSAGE = """\
error: ucutlass tune needs a CUDA GPU to measure candidates, and torch sees none here
(torch.cuda.is_available() is False).
What works without a GPU:
  ucutlass check FILE [--problem ID]   language errors, arch rules (sm90, sm100), binding to the problem
  ucutlass compile FILE                generate CUTLASS C++ and compile it with nvcc (cached)
  ucutlass sol PROBLEM                 T_SOL per workload (FLOPs, bytes, bound)
  ucutlass tune PROBLEM --dry-run      the search space, legal configurations and tuned workloads
  ucutlass grade SOLUTION.py PROBLEM   check a Python solution against the reference (CPU timing)
  ucutlass grade FILE.ucut PROBLEM --emulate   what a program means, as torch ops (no nvcc, no GPU)
  ucutlass init PROBLEM                a program written from the reference, checked emulated
  ucutlass import kernelbench FILE.py  a KernelBench problem as a problem folder
  ucutlass campaign --replay RECORDS   stop rules and budgets compared on recorded trials"""


class NoGpuError(UcutError):
    """Raised by :func:`tune` when no CUDA GPU is visible; the message lists what still works."""

    def __init__(self):
        super().__init__(NO_GPU_MESSAGE)


def _progress_printer(total_hint: int | None):
    from tqdm import tqdm

    state: dict = {"bar": None}

    def write(text: str) -> None:
        if state["bar"] is not None:
            state["bar"].write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def on_event(ev: dict) -> None:
        bar = state["bar"]
        kind = ev["event"]
        if kind == "reference":
            print(f"timing the reference on {ev['workload']}", file=sys.stderr)
        elif kind == "start":
            workers = ev.get("workers", 1)
            print(f"budget {ev['budget']} trials (headroom torch/T_SOL = {ev['headroom']:.2f}×), "
                  f"{ev['legal']} legal of {ev['space']} configs, sampler {ev['sampler']}"
                  + (f", {workers} workers" if workers > 1 else "")
                  + (f", resuming after {ev['resumed']} finished trials" if ev["resumed"] else ""), file=sys.stderr)
            state["bar"] = tqdm(total=ev["budget"], initial=min(ev["resumed"], ev["budget"]), unit="trial",
                                file=sys.stderr, dynamic_ncols=True)
        elif kind == "pruned":
            state["pruned"] = state.get("pruned", 0) + 1
        elif kind == "trial" and bar is not None:
            bar.update(1)
            if ev["state"] == "COMPLETE":
                bar.set_postfix_str(f"last {ev['value']:.3f} best {ev['best']:.3f} ×T_SOL, "
                                    f"{state.get('pruned', 0)} illegal proposals pruned")
            else:
                bar.write(f"trial {ev['number']} {ev['state']}: {ev.get('reason', '')[:240]}")
        elif kind == "worker-start":
            write(f"worker {ev['index']} started (pid {ev['pid']}"
                  + (f", GPU {ev['gpu']}" if ev["gpu"] is not None else "")
                  + (f", log {ev['log']}" if ev["log"] else "") + ")")
        elif kind == "worker-exit":
            if ev["code"]:
                write(f"worker {ev['index']} (pid {ev['pid']}) exited with code {ev['code']}"
                      + (f"; its trials {', '.join(map(str, ev['failed']))} failed and were queued again"
                         if ev["failed"] else "") + (f"\n{ev['tail']}" if ev["tail"] else ""))
        elif kind == "interrupted":
            write(f"trial {ev['number']} interrupted: worker {ev.get('worker')} stopped; its configuration "
                  "was queued again")
        elif kind == "cut":
            write(f"{ev['reason']}: {ev['unmeasured']} built trial(s) of the batch left unmeasured")
        elif kind == "lost":
            write(f"trial {ev['number']} was failed by another process meanwhile: {ev['reason'][:160]}")
        elif kind == "verify":
            if bar is not None:
                bar.close()
                state["bar"] = None
            print(f"verifying trial {ev['number']} on every workload", file=sys.stderr)
        elif kind == "verify-failed":
            print(f"  trial {ev['number']} failed verification: {ev['reason']}", file=sys.stderr)
        elif kind == "dispatch-measure":
            print(f"timing trial {ev['number']} on {ev['workloads']} workloads (fastest on some tuned workload: a "
                  "dispatch candidate)", file=sys.stderr)
        elif kind == "dispatch-verify":
            print(f"grading the dispatch {' → '.join(ev['kernels'])} on every workload", file=sys.stderr)
        elif kind == "dispatch-failed":
            print(f"  the dispatch failed ({ev['reason']}); keeping the single best kernel", file=sys.stderr)

    return on_event


def tune(problem, program, *, kernel: str | None = None, source_file: str = "<spec>",
         out_dir: Path, storage: str | None = None, study_name: str | None = None,
         config: TuneConfig = TuneConfig(), jobs: int | None = None, hardware: str = "local",
         workers: int | None = None, progress: bool = True) -> tuple[TuneResult, dict]:
    """Tune ``program`` on ``problem``; write the results into ``out_dir``.

    Args:
        storage: Optuna storage URL (:mod:`search.storage`); default ``<out_dir>/study.db`` (SQLite) with
            one worker, ``<out_dir>/study.log`` (Optuna's journal file) with several; resumable.
        hardware: spec for T_SOL (``local`` = calibrated or datasheet of this GPU, or a name from
            ``ucutlass sol --list-gpus``).
        workers: worker processes, each pinned to one GPU, round-robin (:mod:`search.distributed`);
            default one per visible GPU. With one, the study runs in this process.
        jobs: parallel nvcc processes in all (default: one per core), shared among the workers.

    Returns:
        ``(TuneResult, {name: path of each file written})``.

    Raises:
        NoGpuError: no CUDA GPU visible.
        CheckError / UcutError: the program does not bind or has no legal configuration.
    """
    import torch

    from ucutlass.grader import Grader
    from ucutlass.sol import analyze, load_hardware, prefetch_counts

    from .distributed import GpuWorker, run_workers, visible_gpus
    from .measure import GraderMeasurer, NvccBuilder
    from .report import write_outputs
    from .storage import default_url, normalize_url

    p = plan(problem, program, kernel=kernel, source_file=source_file, max_workloads=config.max_workloads)
    if not torch.cuda.is_available():
        raise NoGpuError()
    gpus = visible_gpus()
    workers = max(1, len(gpus)) if workers is None else workers
    if workers < 1:
        raise UcutError(f"--workers must be at least 1, got {workers}")
    hw = load_hardware(hardware)
    sol_cache: dict[str, float] = {}
    prefetch_counts(problem, timeout_s=config.sol_timeout_s)  # every workload in one counting process

    def t_sol_ms(w):
        if w.uuid not in sol_cache:
            sol_cache[w.uuid] = analyze(problem, w, hw, timeout_s=config.sol_timeout_s).t_sol_ms
        return sol_cache[w.uuid]

    out_dir.mkdir(parents=True, exist_ok=True)
    storage = normalize_url(storage) if storage else default_url(out_dir, workers)
    on_event = _progress_printer(None) if progress else None
    with Grader(problem, t_sol_ms=t_sol_ms) as grader:
        tuner = Tuner(problem, p.binding, p.space, build=NvccBuilder(source_file, jobs=jobs),
                      measure=GraderMeasurer(grader, source_file), t_sol_ms=t_sol_ms, config=config,
                      storage=storage, study_name=study_name, progress=on_event, workers=workers)
        if workers == 1:
            result = tuner.run()
            env = grader.environment()
        else:
            tuner.prepare()
    if workers > 1:
        # The coordinator's grader timed the reference; it is closed while the workers hold the GPUs,
        # and a fresh one verifies the best once they have stopped.
        worker = GpuWorker(problem, p.program.source, source_file, kernel, config, storage, tuner.study_name,
                           jobs, hardware)
        reason = run_workers(tuner, worker, workers, gpus=gpus, log_dir=out_dir / "workers")
        with Grader(problem, t_sol_ms=t_sol_ms) as grader:
            tuner.measure = GraderMeasurer(grader, source_file)
            result = tuner.finish(reason)
            env = grader.environment()
    extra = {"problem": problem.id, "hardware": {"name": hw.name, "method": hw.method},
             "storage": storage, "workers": workers, "environment": env}
    return result, write_outputs(result, out_dir, extra)
