"""``ucutlass tune`` and ``ucutlass init``: a program's choices searched with Optuna (a problem without a spec
tunes the program init writes), and a program written from a problem's reference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UcutError
from ..ir import Choice
from .common import load_program, require_kernel, sol_timeout


# --- tune ----------------------------------------------------------------------------------------------

def _tune_no_gpu(args, e, problem, spec) -> int:
    """``tune`` without a GPU: the message (and with --json the error document); exit status 2."""
    if args.json:
        from ..agents.feedback import error_document

        print(json.dumps(error_document("tune", e, problem=problem.id, spec=str(spec)), indent=2))
    print(str(e), file=sys.stderr)
    return 2


def cmd_tune(args) -> int:
    """``ucutlass tune PROBLEM``: search the spec's choices with Optuna (or ``--dry-run``: the plan)."""
    from ..problem import find_problem
    from ..search import NoGpuError, TuneConfig, plan, tune
    from ..search.report import format_table

    problem = find_problem(args.problem, args.problems)
    spec = Path(args.spec) if args.spec else problem.spec_path
    if spec is None:
        if args.out:
            out_dir = Path(args.out)
        elif args.dry_run:  # a dry run leaves nothing behind in the working folder (a temporary copy to plan from)
            import tempfile

            import atexit
            import shutil

            out_dir = Path(tempfile.mkdtemp(prefix="ucutlass-init-"))
            atexit.register(shutil.rmtree, out_dir, True)  # removed when the command ends
        else:
            out_dir = Path("ucutlass-tune") / problem.id
        spec = _init_spec(problem, out_dir)
        if args.dry_run and not args.out:
            where = "".join(f" --problems {d}" for d in args.problems)
            print(f"(a dry run: that copy is removed when the command ends; `ucutlass init {problem.id}{where} -o "
                  "FILE` keeps one, and a tune without --dry-run keeps it in its output folder)", file=sys.stderr)
    program = load_program(str(spec))
    if program.pipelines:  # one study per kernel it calls, the whole pipeline graded (search/pipeline_cli.py)
        from ..agents.feedback import pipeline_tune_document
        from ..search.pipeline_cli import tune_command

        try:
            return tune_command(args, problem, program, spec, pipeline_tune_document)
        except NoGpuError as e:
            return _tune_no_gpu(args, e, problem, spec)
    require_kernel(program, args.kernel, "tune")
    config = TuneConfig(trials=args.trials, epsilon=args.epsilon, patience=args.patience, batch=args.batch,
                        max_workloads=args.max_workloads, sampler=args.sampler, seed=args.seed,
                        time_limit_s=args.time_limit, dispatch=args.dispatch, sol_timeout_s=sol_timeout(args))
    if args.dispatch < 1:
        raise UcutError(f"--dispatch must be at least 1, got {args.dispatch}")
    if args.dry_run and args.json:
        raise UcutError("--json reports a finished tune; --dry-run prints the plan as text (leave out one of them)")
    if args.dry_run:
        p = plan(problem, program, kernel=args.kernel, source_file=str(spec), max_workloads=args.max_workloads)
        t_sol = None
        try:
            from ..sol import analyze, load_hardware, prefetch_counts

            hw = load_hardware(args.gpu if args.gpu != "local" else "h200")
            t_sol = lambda w: analyze(problem, w, hw, timeout_s=config.sol_timeout_s).t_sol_ms  # noqa: E731
            print(f"T_SOL from {hw.name} ({hw.method})")
        except UcutError:
            pass
        if t_sol is not None:
            prefetch_counts(problem, p.tuned, timeout_s=config.sol_timeout_s)  # one counting process for all
        print(p.describe(t_sol))
        return 0
    target = program.kernel(args.kernel).target
    import torch

    if torch.cuda.is_available() and not isinstance(target, Choice):
        from ..runtime import check_device

        check_device(target)  # an sm100 spec on an H200: say so before compiling anything
    out_dir = Path(args.out) if args.out else Path("ucutlass-tune") / problem.id
    try:
        result, paths = tune(problem, program, kernel=args.kernel, source_file=str(spec), out_dir=out_dir,
                             storage=args.storage, study_name=args.study, config=config, jobs=args.jobs,
                             hardware=args.gpu, workers=args.workers)
    except NoGpuError as e:
        return _tune_no_gpu(args, e, problem, spec)
    if args.json:
        from ..agents.feedback import tune_document

        print(json.dumps(tune_document(result, paths, problem=problem.id, spec=str(spec)), indent=2))
        return 0 if result.best is not None else 1
    measured = sum(1 for t in result.trials if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")
                   and t.get("status") != "INTERRUPTED")
    pruned = sum(1 for t in result.trials if t["state"] == "PRUNED")
    print(f"\nstopped: {result.stop_reason} ({measured} configurations measured, {pruned} proposals pruned "
          f"before compiling, {result.seconds:.0f} s)")
    if result.best is None:
        print("no configuration passed on every workload; see trials.csv for why", file=sys.stderr)
        print(f"results: {paths['json']}")
        return 1
    print(f"best: trial {result.best.number}: {result.best.kernel.config_name()} "
          f"({result.best_value:.3f}× T_SOL on the tuned workloads)\n")
    print(format_table(result))
    print()
    for name, path in paths.items():
        print(f"{name:>6}: {path}")
    return 0


# --- init ----------------------------------------------------------------------------------------------

def cmd_init(args) -> int:
    """``ucutlass init PROBLEM``: write a .ucut program from the problem's reference and check it."""
    from ..init import run_init
    from ..problem import find_problem

    problem = find_problem(args.problem, args.problems)
    return run_init(problem, args.output, check=not args.no_check)


def _init_spec(problem, out_dir: Path) -> Path:
    """``tune PROBLEM`` without a kernel.ucut or --spec: the program ``ucutlass init`` writes, saved as
    OUT/init.ucut (issue 17); says so."""
    from ..init import InitError, init_program

    try:
        result = init_program(problem)
    except InitError as e:
        raise UcutError(f"problem {problem.id} ships no kernel.ucut and init cannot write one ({e}); write a spec "
                        "and pass --spec FILE (see docs/DSL.md)") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "init.ucut"
    path.write_text(result.text)
    print(f"no kernel.ucut and no --spec: tuning the program `ucutlass init` wrote ({result.summary()}): {path}",
          file=sys.stderr)
    return path
