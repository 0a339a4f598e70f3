"""``ucutlass tune PROBLEM --spec FILE`` when FILE has a pipeline: plan, search per kernel, grade, time each step.

:func:`tune_pipeline` wires :mod:`search.pipeline_plan`, :mod:`search.pipeline_tune` and :mod:`search.pipeline_report`
to the nvcc builder and the grader (one GPU, one worker); :func:`tune_command` is what ``ucutlass tune`` calls
(``--dry-run`` prints the plan with no GPU; without a GPU the command says so and exits 2, as for one kernel).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from ucutlass.errors import UcutError

from .pipeline_plan import plan_pipeline
from .pipeline_tune import PipelineGraderMeasurer, PipelineTuner, PipelineTuneResult
from .study import TuneConfig


def _printer(event: dict) -> None:
    kind = event["event"]
    if kind == "start":
        print(f"headroom torch/T_SOL = {event['headroom']:.2f}×; studies (budget): "
              + ", ".join(f"{event['studies'][k]} ({b})" for k, b in event["kernels"].items()), file=sys.stderr)
    elif kind == "trial":
        tail = f"{event['value']:.3f}×T_SOL (best {event['best']:.3f})" if event["state"] == "COMPLETE" \
            else event.get("reason", "")[:240]
        print(f"{event['kernel']} trial {event['number']} {event['state']} "
              f"{', '.join(f'{k}={v}' for k, v in event['params'].items())}: {tail}", file=sys.stderr)
    elif kind == "verify":
        print(f"grading the {event['how']} picks on every workload", file=sys.stderr)
    elif kind == "verify-failed":
        print(f"  the {event['how']} picks failed: {event['reason']}", file=sys.stderr)
    elif kind == "prebuild":
        print("compiling every legal combination of " + ", ".join(f"{k} ({n})" for k, n in event["kernels"].items())
              + " in parallel before the first trial (searched exhaustively)", file=sys.stderr)
    elif kind == "steps":
        print(f"timing each step on {event['workloads']} workloads", file=sys.stderr)


def tune_pipeline(problem: Any, program: Any, *, source_file: str, out_dir: Path, storage: str | None = None,
                  study_name: str | None = None, config: TuneConfig = TuneConfig(), jobs: int | None = None,
                  hardware: str = "local", progress: bool = True, step_reps: int = 10
                  ) -> tuple[PipelineTuneResult, dict[str, Path]]:
    """Tune a pipeline program on ``problem`` on this GPU; write best.ucut, results.json and table.txt.

    Args:
        storage: Optuna storage URL; default ``<out_dir>/study.db`` (every kernel's study in it; resumable).
        study_name: the studies' prefix (``<study_name>/<kernel>``; default the problem's id).
        hardware: spec for T_SOL (as ``ucutlass tune --gpu``).
        step_reps: calls timed per workload for the step table (CUDA events around each step).

    Args:
        json_document: ``(result, paths, problem=, spec=) -> dict``, the ``--json`` document (the command line
            passes :func:`ucutlass.agents.feedback.pipeline_tune_document`); None prints results.json.

    Raises:
        NoGpuError: no CUDA GPU visible (after the plan: binding errors come first).
        CheckError / UcutError: the pipeline does not bind, or a kernel has no legal combination.
    """
    import torch

    from ucutlass.grader import Grader
    from ucutlass.runtime import load_solution
    from ucutlass.sol import analyze, load_hardware, prefetch_counts
    from ucutlass.solution import pipeline_solution

    from . import NoGpuError
    from .pipeline_report import step_report, write_pipeline_outputs
    from .storage import normalize_url

    plan = plan_pipeline(problem, program, source_file=source_file, max_workloads=config.max_workloads)
    if not torch.cuda.is_available():
        raise NoGpuError()
    hw = load_hardware(hardware)
    prefetch_counts(problem, timeout_s=config.sol_timeout_s)
    sol_cache: dict[str, float] = {}

    def t_sol_ms(w):
        if w.uuid not in sol_cache:
            sol_cache[w.uuid] = analyze(problem, w, hw, timeout_s=config.sol_timeout_s).t_sol_ms
        return sol_cache[w.uuid]

    out_dir.mkdir(parents=True, exist_ok=True)
    storage = normalize_url(storage) if storage else f"sqlite:///{(out_dir / 'study.db').resolve()}"
    on_event = _printer if progress else None
    with Grader(problem, t_sol_ms=t_sol_ms) as grader:
        measure = PipelineGraderMeasurer(grader, problem, source_file, plan.pipeline, jobs=jobs)
        def prebuild(combos):
            if on_event:
                on_event({"event": "prebuild", "kernels": {k: len(v) for k, v in combos.items()}})
            measure.prebuild(plan, combos)

        result = PipelineTuner(plan, measure, t_sol_ms, config=config, storage=storage, study_prefix=study_name,
                               progress=on_event).run(prebuild=prebuild)
        env = grader.environment()
    steps: list = []
    if result.source is not None and result.source in measure.so_paths:
        if on_event:
            on_event({"event": "steps", "workloads": len(problem.workloads)})
        ref = pipeline_solution(measure.so_paths[result.source], result.source, source_file, "best", plan.pipeline)
        fn = load_solution(ref.payload, problem)
        steps = step_report(fn, problem, problem.workloads, t_sol_ms, device="cuda", reps=step_reps)
    kernels = [{"kernel": k.name, "steps": [i + 1 for i in k.steps], "legal": len(k.legal), "extents": k.extents,
                "space": {key: list(c.spellings) for key, c in k.space.choices.items()}} for k in plan.kernels]
    extra = {"hardware": {"name": hw.name, "method": hw.method}, "storage": storage, "environment": env,
             "kernels": kernels}
    return result, write_pipeline_outputs(result, out_dir, steps, extra)


def tune_command(args: Any, problem: Any, program: Any, spec: Path,
                 json_document: Callable[..., dict] | None = None) -> int:
    """``ucutlass tune`` on a program with a pipeline (``cmd_tune`` routes here); the exit status.

    ``--kernel``, ``--workers`` above 1 and ``--dispatch`` are for one kernel: a pipeline tunes each kernel it calls,
    in one process on one GPU.

    Args:
        json_document: ``(result, paths, problem=, spec=) -> dict``, the ``--json`` document (the command line
            passes :func:`ucutlass.agents.feedback.pipeline_tune_document`); None prints results.json.

    Raises:
        NoGpuError: no CUDA GPU (``cmd_tune`` answers it as for one kernel). UcutError / CheckError: bad input.
    """
    from .pipeline_report import workload_table

    if args.kernel:
        raise UcutError(f"{spec} has a pipeline: tune tunes every kernel it calls (one study each); leave out "
                        f"--kernel {args.kernel}, or tune the kernel in a file of its own")
    if args.workers is not None and args.workers > 1:
        raise UcutError("a pipeline is tuned by one worker on one GPU (its studies are searched in turn); "
                        "leave out --workers")
    if not args.timeout > 0:
        raise UcutError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    config = TuneConfig(trials=args.trials, epsilon=args.epsilon, patience=args.patience, batch=args.batch,
                        max_workloads=args.max_workloads, sampler=args.sampler, seed=args.seed,
                        time_limit_s=args.time_limit, sol_timeout_s=args.timeout)
    if args.dry_run:
        plan = plan_pipeline(problem, program, source_file=str(spec), max_workloads=args.max_workloads)
        print(plan.describe())
        return 0
    out_dir = Path(args.out) if args.out else Path("ucutlass-tune") / problem.id
    result, paths = tune_pipeline(problem, program, source_file=str(spec), out_dir=out_dir, storage=args.storage,
                                  study_name=args.study, config=config, jobs=args.jobs, hardware=args.gpu)
    if args.json:
        if json_document is None:
            print(paths["json"].read_text())
        else:
            print(json.dumps(json_document(result, paths, problem=problem.id, spec=str(spec)), indent=2))
        return 0 if result.source is not None else 1
    print(f"\nstopped: {result.stop_reason} ({len(result.trials)} trials in {len(result.studies)} studies, "
          f"{result.seconds:.0f} s)")
    if result.source is None:
        print("no combination passed on every workload; see results.json (verify_failures) for each one's workloads",
              file=sys.stderr)
        for f in result.verify_failures:
            print(f"  {f['how']}: {f['reason']}", file=sys.stderr)
        print(f"results: {paths['json']}")
        return 1
    print("best: " + "; ".join(f"{k}: {', '.join(f'{s}={v}' for s, v in p.items()) or 'as written'}"
                               for k, p in result.picks.items()) + f" ({result.how})\n")
    print(workload_table(result))
    print()
    for name, path in paths.items():
        print(f"{name:>6}: {path}")
    return 0
