"""``ucutlass grade``: a solution file (.ucut compiled or emulated here, .py, FlashInfer-Bench .json) checked and
timed on a problem's workloads, with T_SOL counted here and the grading in a child process."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..errors import UcutError
from .common import apply_picks, count_steps, load_program, print_json_error


def cmd_grade(args) -> int:
    """``ucutlass grade FILE PROBLEM``: check and time a solution on the problem's workloads."""
    from ..grader import format_table, summarize
    from ..grader.supervised import grade_in_child
    from ..problem import find_problem
    from ..sol import SolError, analyze, load_hardware, prefetch_counts

    problem = find_problem(args.problem, args.problems)
    if getattr(args, "emulate", False) and not args.file.endswith(".ucut"):
        raise UcutError(f"--emulate grades a .ucut program as torch ops; {args.file} is not one (grade it without "
                        "--emulate: Python and FlashInfer-Bench solutions run as they are, on the CPU or a GPU)")
    if args.file.endswith(".ucut") and not getattr(args, "emulate", False):
        import torch

        if not torch.cuda.is_available():
            message = ("a compiled .ucut kernel runs on a CUDA GPU, and torch sees none here; without one, "
                       "`ucutlass grade FILE PROBLEM --emulate` grades what the program means (torch ops, no nvcc), "
                       "`ucutlass check` and `ucutlass compile` still work, and Python solutions are graded on "
                       "the CPU")
            print_json_error(args, UcutError(message))
            print(f"error: {message}", file=sys.stderr)
            return 2
    # The workloads first: a bad --workload is an error before the program's steps are listed and bound.
    workloads = None
    if args.workloads is not None and args.workloads < 1:
        raise UcutError(f"--workloads {args.workloads}: grade at least 1 workload (the first N of "
                        f"{len(problem.workloads)}; leave it out to grade all)")
    if args.workloads:
        workloads = [problem.workloads[i] for i in range(min(args.workloads, len(problem.workloads)))]
    if getattr(args, "workload", None):
        workloads = list(workloads or [])
        for which in args.workload:  # each once (`--workload smallest --workload 5` may name one workload twice)
            w = pick_workload(problem, which)
            if w not in workloads:
                workloads.append(w)
    solution = solution_for_file(args.file, problem, args)
    if args.file.endswith(".ucut") and not args.json:
        print(_precision_line(args.file))
    import torch

    t_sol = None
    timed = not getattr(args, "no_timing", False)
    if not timed:
        print("note: --no-timing: correctness only (no latency, speedup or SOL score; the errors are the correctness "
              "trials', where a timed grade also compares its timed calls' outputs)", file=sys.stderr)
    elif getattr(args, "emulate", False):
        print("note: emulated: correctness is the program's meaning; times are of torch ops, so no speedup, "
              "T_SOL or SOL score is given", file=sys.stderr)
    elif not torch.cuda.is_available():
        print("note: grading on the CPU (no CUDA GPU): times are CPU wall-clock, so no T_SOL or SOL score "
              "is given", file=sys.stderr)
    else:
        try:
            hw = load_hardware(args.gpu)
            graded = workloads if workloads is not None else list(problem.workloads)
            prefetch_counts(problem, graded)  # one counting process; a failure is the grader's note per workload
            table = {}
            for w in graded:
                try:
                    table[w.uuid] = analyze(problem, w, hw).t_sol_ms
                except SolError as e:
                    print(f"note: no T_SOL for {w.label()} ({e})", file=sys.stderr)
            t_sol = _TSolTable(table)
        except UcutError as e:
            print(f"note: no T_SOL ({e}); SOL scores are left out", file=sys.stderr)
    # In a child process: a candidate that kills the process grading it (where the OS cannot stop it) leaves
    # CRASHED verdicts, not a silent exit 137.
    graded_so_far: list = []
    total = len(workloads) if workloads is not None else len(problem.workloads)
    started = time.monotonic()
    emulated = bool(getattr(args, "emulate", False))

    def progress(r) -> None:  # one line per workload as it finishes (a large problem grades for minutes)
        graded_so_far.append(r)
        speed = f" {r.speedup:.3g}x" if getattr(r, "speedup", None) and not emulated else ""
        print(f"graded {len(graded_so_far)}/{total}: {r.label} {r.status.value}{speed} "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

    try:
        results = grade_in_child(problem, solution, workloads, t_sol_ms=t_sol, timeout_s=args.timeout,
                                 on_result=progress, timed=timed)
    except KeyboardInterrupt:  # Ctrl-C or a time limit's SIGINT: the workloads graded so far are kept
        if graded_so_far:
            if args.output:
                Path(args.output).write_text(json.dumps([r.to_json() for r in graded_so_far], indent=2))
            if not args.json:
                print(format_table(graded_so_far, emulated=emulated))
                print(json.dumps(_summary(graded_so_far, emulated)))
            print(f"note: interrupted after {len(graded_so_far)} of {total} workload(s)"
                  + (f"; their records are in {args.output}" if args.output else ""), file=sys.stderr)
        raise
    except UcutError as e:  # the grader stopped (a reference out of memory): what it graded before is kept
        done = getattr(e, "results", None)
        if done and args.output:
            Path(args.output).write_text(json.dumps([r.to_json() for r in done], indent=2))
        if done and not args.json:
            print(format_table(done, emulated=emulated))
            print(f"note: the grader stopped after {len(done)} workload(s); "
                  + (f"their records are in {args.output}" if args.output else "pass -o FILE to keep their records"),
                  file=sys.stderr)
        raise
    records = [r.to_json() for r in results]
    if args.output:
        Path(args.output).write_text(json.dumps(records, indent=2))
    if args.json:
        from ..agents.feedback import document

        print(json.dumps(document("grade", all(r.passed for r in results), file=args.file, problem=problem.id,
                                  emulated=bool(getattr(args, "emulate", False)), summary=summarize(results),
                                  records=records), indent=2))
    else:
        print(format_table(results, emulated=emulated))
        print(json.dumps(_summary(results, emulated)))
        if not all(r.passed for r in results) and not args.output:
            print("note: the full log of each workload (traceback, what the candidate printed) is in the JSON "
                  "records: --json, or -o FILE", file=sys.stderr)
    return 0 if all(r.passed for r in results) else 1


def solution_for_file(path: str, problem, args):
    """A SolutionRef for a .ucut (compiled here) or any file the grader reads itself."""
    from ..grader import solution_from_file

    if not path.endswith(".ucut"):
        return solution_from_file(path, problem)
    from ..bind import bind
    from ..build import build_kernels, raise_for

    program = apply_picks(load_program(path), getattr(args, "pick", None) or [], getattr(args, "kernel", None))
    if program.pipelines and not args.kernel:  # a pipeline is the solution, unless --kernel names one kernel
        return _pipeline_solution(program, path, problem, args)
    # a dispatch (kernels with `when`) is graded as one solution, unless --kernel names one of its kernels
    dispatch = program.dispatch() if not args.kernel else ()
    try:
        kernels = dispatch or (program.kernel(args.kernel),)
    except KeyError as e:  # several kernels and no --kernel, or no such kernel
        raise UcutError(f"{e.args[0]} (--kernel NAME)") from None
    if getattr(args, "emulate", False) and any(k.choices() for k in kernels):
        from ..emulate.choices import describe_picks, emulation_picks

        picks = emulation_picks(program, problem, kernels=[k.name for k in kernels])
        print(f"emulating, for the open choices: {describe_picks(program, picks)}", file=sys.stderr)
        program = program.resolve(picks)
        dispatch = program.dispatch() if not args.kernel else ()
        kernels = dispatch or (program.kernel(args.kernel),)
    bound = []
    for kernel in kernels:
        if kernel.choices():
            raise UcutError(f"{path}: kernel {kernel.name} still has open choices ({', '.join(kernel.choices())}); "
                            "grade a concrete program (e.g. the best.ucut that tune writes) or use --pick")
        bound.append(getattr(bind(kernel, problem), "kernel", kernel))  # alignment = auto lowered for the workloads
    if getattr(args, "emulate", False):
        from ..solution import emulated_solution

        names = ", ".join(k.name for k in bound)
        print(f"emulating {names} as torch ops (no nvcc; times are torch's, not a kernel's)", file=sys.stderr)
        return emulated_solution(program.source, path, bound[0].name, f"{Path(path).stem} ({names}, emulated)",
                                 dispatch=bool(dispatch))
    import torch

    if torch.cuda.is_available():
        from ..runtime import check_device

        for kernel in bound:
            check_device(kernel.target)  # an sm100 kernel on an H200: refuse before a minute of nvcc
    print(f"compiling {', '.join(k.config_name() for k in bound)} …", file=sys.stderr)
    results = [raise_for(r) for r in build_kernels(bound, source_file=path, sources=[program.source] * len(bound))]
    if dispatch:
        from ..runtime import describe
        from ..solution import dispatch_solution

        print(describe(bound), file=sys.stderr)
        return dispatch_solution({k.name: r.so_path for k, r in zip(bound, results)}, program.source, path,
                                 f"{Path(path).stem} ({', '.join(k.name for k in bound)})")
    from ..solution import solution_for

    return solution_for(results[0].so_path, program.source, path, bound[0].name, bound[0].config_name())


def _pipeline_solution(program, path: str, problem, args):
    """A SolutionRef for a file's pipeline: emulated (torch ops) or its bound kernels compiled here."""
    from ..bind import bind_pipeline

    try:
        pipeline = program.pipeline()
    except KeyError as e:
        raise UcutError(f"{e.args[0]}: grade one pipeline per file") from None
    called = [k for k in program.kernels if k.name in pipeline.kernel_names()]
    if getattr(args, "emulate", False) and any(k.choices() for k in called):
        from ..emulate.choices import describe_picks, emulation_picks

        picks = emulation_picks(program, problem, pipeline=pipeline.name)
        print(f"emulating, for the open choices: {describe_picks(program, picks)}", file=sys.stderr)
        program = program.resolve(picks)
    open_kernels = [k.name for k in program.kernels if k.name in pipeline.kernel_names() and k.choices()]
    if open_kernels:
        raise UcutError(f"{path}: kernel(s) {', '.join(open_kernels)} of pipeline {pipeline.name} still have open "
                        "choices; grade a concrete program, use --pick, or tune them (`ucutlass tune "
                        f"{problem.id} --spec {path}`: one study per kernel)")
    binding = bind_pipeline(program, problem, pipeline.name)
    emulate = getattr(args, "emulate", False)
    lines = binding.describe_short(emulated=emulate, full=f"`ucutlass check {path} --problem {problem.id}`")
    print(f"pipeline {pipeline.name} ({count_steps(pipeline)}):\n" + "\n".join(lines), file=sys.stderr)
    if emulate:
        from ..solution import emulated_solution

        print(f"emulating pipeline {pipeline.name} as torch ops (kernels emulated; torch steps as they are)",
              file=sys.stderr)
        return emulated_solution(program.source, path, None, f"{Path(path).stem} ({pipeline.name}, emulated)",
                                 pipeline=pipeline.name)
    import torch

    from ..build import build_kernels, raise_for

    bound = {}
    for kc in binding.kernel_calls():
        bound.setdefault(kc.bound_kernel.build_digest(), kc.bound_kernel)
    if torch.cuda.is_available():
        from ..runtime import check_device

        for kernel in bound.values():
            check_device(kernel.target)
    kernels = list(bound.values())
    print(f"compiling {', '.join(k.config_name() for k in kernels)} …", file=sys.stderr)
    results = [raise_for(r) for r in build_kernels(kernels, source_file=path, sources=[program.source] * len(kernels))]
    from ..solution import pipeline_solution

    return pipeline_solution({d: r.so_path for d, r in zip(bound, results)}, program.source, path,
                             f"{Path(path).stem} ({pipeline.name})", pipeline.name)


class _TSolTable:
    """T_SOL per workload uuid, computed here (the counting runs in a child process of its own, with a
    deadline) and sent to the process that grades: a picklable ``t_sol_ms``."""

    def __init__(self, table):
        self.table = dict(table)

    def __call__(self, workload) -> float | None:
        return self.table.get(workload.uuid)


def _precision_line(path: str) -> str:
    """``precision: up f32 via 3xtf32, down bf16``: what each kernel of a .ucut file multiplies in (``math``)."""
    from ..ir import precision

    return "precision: " + ", ".join(f"{k.name} {precision(k)}" for k in load_program(path).kernels)


def pick_workload(problem, which: str):
    """``--workload WHICH``: an index from 0, a uuid or a unique prefix of one, or ``smallest``.

    Raises:
        UcutError: none or several match (the message lists the valid forms and the count).
    """
    wls = list(problem.workloads)
    if which == "smallest":
        from ..init.capture import smallest_workload

        return smallest_workload(problem)
    if which.isdigit():
        if int(which) < len(wls):
            return wls[int(which)]
        raise UcutError(f"--workload {which}: {problem.id} has {len(wls)} workloads (indices 0-{len(wls) - 1})")
    hits = [w for w in wls if w.uuid == which] or [w for w in wls if w.uuid.startswith(which)]
    if len(hits) == 1:
        return hits[0]
    raise UcutError(f"--workload {which!r}: {'several' if hits else 'no'} workload uuids of {problem.id} "
                    f"{'start with it' if hits else 'match'}; give an index (0-{len(wls) - 1}), a uuid or `smallest`")


def _summary(results, emulated: bool) -> dict:
    """The grade's summary line; an emulated grade's geomean speedup is left out (None): its times are of torch ops
    on this machine (the --json document keeps the records' numbers, marked ``emulated``)."""
    from ..grader import summarize

    s = summarize(results)
    if emulated:
        s["geomean_speedup"] = None
    return s
