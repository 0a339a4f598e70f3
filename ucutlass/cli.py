"""The ``ucutlass`` command line: check, compile, sol, grade, tune, problems, calibrate.

Each subcommand is a thin shell over a library function; errors of ucutlass (:class:`UcutError`) are
printed without a traceback and give exit status 1 (2 for a missing GPU or toolchain).

Length: one argparse tree and the command functions it calls, each a thin shell over its stage's package.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from . import __version__
from .errors import CheckError, ToolchainError, UcutError, UcutSyntaxError
from .ir import Choice


def _timeout_arg(p: argparse.ArgumentParser) -> None:
    from .sol import DEFAULT_TIMEOUT_S

    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="T_SOL: the problem's reference is counted in a child process; loading it, and counting "
                        "each workload, must each finish within SECONDS or it is killed "
                        f"(default {DEFAULT_TIMEOUT_S:g})")


def _timeout(args) -> float:
    if not args.timeout > 0:
        raise UcutError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    return args.timeout


def _problems_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", action="append", default=[], metavar="DIR",
                   help="extra folder of problems (repeatable; also $UCUTLASS_PROBLEMS)")


def _load_program(path: str):
    from .lang import parse_file

    try:
        return parse_file(path)
    except FileNotFoundError:
        raise UcutError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UcutError(f"{path} is a folder; give a .ucut file") from None
    except UnicodeDecodeError as e:
        raise UcutError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None


def _require_kernel(program, name: str | None, command: str) -> None:
    """Refuse ``--kernel NAME`` for a kernel the file lacks, and (for ``tune``) a file of several kernels without
    one: tune searches one kernel's choices.

    Raises:
        UcutError: naming the file's kernels (and, for a dispatch, that tune writes those).
    """
    names = [k.name for k in program.kernels]
    if name is not None and name not in names:
        from .errors import did_you_mean as _did_you_mean

        raise UcutError(f"--kernel {name}: {program.file} has no such kernel{_did_you_mean(name, names)} "
                        f"(kernels: {', '.join(names)})")
    if command == "tune" and name is None and len(names) > 1:
        what = ("is a dispatch (kernels with when), which tune writes as best.ucut; tune searches the choices of "
                "one kernel" if program.dispatch() else f"has {len(names)} kernels; tune searches one kernel's choices")
        raise UcutError(f"{program.file} {what}: name it with --kernel ({', '.join(names)})")


def _picks(program, pick_args: Sequence[str], kernel: str | None = None):
    """Apply ``--pick KEY=VALUE`` (KEY as ``tile`` or ``kernel.tile``; a plain KEY is of ``kernel`` when given)."""
    if not pick_args:
        return program
    picks = {}
    names = [k.name for k in program.kernels]
    for item in pick_args:
        if "=" not in item:
            raise UcutError(f"--pick {item!r}: expected KEY=VALUE, e.g. tile=128x128x64")
        key, value = item.split("=", 1)
        if "." not in key:
            if kernel:
                names = [kernel]
            elif len(names) != 1:
                raise UcutError(f"--pick {key}: name the kernel ({', '.join(names)}), e.g. {names[0]}.{key}")
            key = f"{names[0]}.{key}"
        picks[key] = value
    try:
        return program.resolve(picks)
    except (KeyError, ValueError) as e:
        raise UcutError(f"--pick: {e.args[0]}") from None


def _copy_builds(results, out: Path) -> list:
    """Copy each successful build's ``.so`` and ``.cu`` into ``out`` as NAME.so / NAME.cu; the builds copied."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    done = [r for r in results if r.ok]
    for r in done:
        shutil.copy2(r.so_path, out / f"{r.name}.so")
        shutil.copy2(r.source_path, out / f"{r.name}.cu")
    return done


def _steps(pipeline) -> str:
    """``1 step`` / ``N steps``."""
    n = len(pipeline.steps)
    return f"{n} step{'' if n == 1 else 's'}"


# --- check ---------------------------------------------------------------------------------------------

def cmd_check(args) -> int:
    from .arch import check, legal_combinations, require_countable

    from .agents.feedback import document, error_document

    try:
        program = _load_program(args.file)
    except UcutSyntaxError as e:
        if args.json:
            print(json.dumps(error_document("check", e, file=args.file, problem=args.problem), indent=2))
        else:
            print(e.format(), file=sys.stderr)
        return 1
    report = document("check", True, file=args.file, problem=args.problem, kernels=[])
    text = []
    bound_extents = {}  # kernel name -> its extents on each workload (with --problem)
    piped = _check_pipelines(program, args, report, text)  # kernel name -> (bound kernel, extents) of its calls
    for kernel in program.kernels:
        extents = None
        if kernel.name in piped:
            kernel, all_ext = piped[kernel.name]
        elif args.problem and not program.pipelines:
            from .bind import bind
            from .problem import find_problem

            problem = find_problem(args.problem, args.problems)
            try:
                binding = bind(kernel, problem)
            except CheckError as e:
                report["ok"] = False
                report["diagnostics"] += [d.to_json() for d in e.diagnostics]
                text += [d.format(program.source) for d in e.diagnostics]
                continue
            all_ext = [binding.extents(w) for w in problem.workloads]
            bound_extents[kernel.name] = all_ext
            bound = getattr(binding, "kernel", kernel)
            if bound is not kernel:  # alignment = auto lowered for the extents, swap_ab = auto decided by their M
                if getattr(bound, "alignment", None) != getattr(kernel, "alignment", None):
                    text.append(f"{args.file}: kernel {kernel.name}: alignment = auto is {bound.alignment} elements "
                                "for these workloads (16 bytes does not divide every contiguous extent)")
                if getattr(bound, "swap_ab", None) != getattr(kernel, "swap_ab", None):
                    text.append(f"{args.file}: kernel {kernel.name}: swap_ab = auto is true for these workloads "
                                "(every M is small: the kernel computes Dᵀ = B·Aᵀ)")
                kernel = bound
            if "M" not in all_ext[0]:  # attention: extents B, Sq, Sk, Hq, Hkv, D
                text.append(f"{args.file}: kernel {kernel.name} binds to {problem.id} ({len(problem.workloads)} "
                            "workloads; " + "; ".join(f"{d} in {sorted({e[d] for e in all_ext})}"
                                                      for d in all_ext[0]) + ")")
            else:
                served = _served_in_dispatch(program, kernel, all_ext)  # a dispatch's kernel serves a range of M
                mine = all_ext if served is None else served
                count = (f"{len(problem.workloads)} workloads" if served is None else
                         f"serves {len(served)} of the {len(problem.workloads)} workloads in the dispatch")
                text.append(f"{args.file}: kernel {kernel.name} binds to {problem.id} ({count}"
                            + (f"; M from {min(e['M'] for e in mine)} to {max(e['M'] for e in mine)}, "
                               f"N = {sorted({e['N'] for e in mine})}, K = {sorted({e['K'] for e in mine})}"
                               if mine else "") + ")")
        else:
            all_ext = [None]
        diags, legal_total, combos = [], 0, 0
        seen = set()
        distinct_ext = list({json.dumps(e, sort_keys=True): e for e in all_ext}.values())  # one check per shape
        try:
            require_countable(kernel)  # counted before any combination is enumerated
        except CheckError as e:
            report["ok"] = False
            report["diagnostics"] += [d.to_json() for d in e.diagnostics]
            text += [d.format(program.source) for d in e.diagnostics]
            continue
        decide = None
        # alignment and swap_ab `auto` per combination, for every workload, as `tune` decides them (not for a kernel
        # that did not bind: a pipeline whose binding failed reports its errors, its kernels get their own rules)
        if args.problem and all_ext != [None]:
            from .bind import resolve_auto

            decide = functools.partial(resolve_auto, extents=all_ext)
        for extents in distinct_ext:
            for d in check(kernel, extents, decide):
                if d.format() not in seen:
                    seen.add(d.format())
                    diags.append(d)
        if kernel.choices():
            legal = None
            for extents in distinct_ext:
                ok, _rejected = legal_combinations(kernel, extents, decide)
                keys = {json.dumps({k: str(v) for k, v in c.items()}, sort_keys=True) for c in ok}
                legal = keys if legal is None else legal & keys
            legal_total = len(legal or ())
            combos = 1
            for c in kernel.choices().values():
                combos *= len(c.options)
        errors = [d for d in diags if d.severity == "error"]
        if not kernel.choices():  # a concrete kernel is one combination, legal unless it breaks a rule
            combos, legal_total = 1, 0 if errors else 1
        report["ok"] = report["ok"] and not errors
        report["diagnostics"] += [d.to_json() for d in diags]
        report["kernels"].append({"name": kernel.name, "config": kernel.config_name(),
                                  "open_choices": {k: list(c.spellings) for k, c in kernel.choices().items()},
                                  "combinations": combos, "legal_combinations": legal_total})
        text += [d.format(program.source if d.severity != "note" else None) for d in diags]
        if not errors and not kernel.choices():
            text.append(f"{args.file}: kernel {kernel.name}: ok ({kernel.config_name()})")
    if program.dispatch():  # one solution: each call runs the first kernel whose `when` holds
        from .runtime import describe

        chain = program.dispatch()
        text.append(f"{args.file}: {describe(chain, bound_extents.get(chain[-1].name))}")
        report["dispatch"] = [{"name": k.name, "when": list(k.when) if k.when else None} for k in chain]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(text))
    return 0 if report["ok"] else 1


def _check_pipelines(program, args, report: dict, text: list) -> dict:
    """Print each pipeline's steps (kernel, torch step, view); with ``--problem``, bind it (shapes flow on every
    workload) and give, per kernel it calls, the bound kernel and the extents of all its calls, for the rules."""
    from .bind import PipelineBinding, bind_pipeline

    piped: dict = {}
    for pipeline in program.pipelines:
        binding = PipelineBinding(program, pipeline, None)
        if args.problem:
            from .problem import find_problem

            problem = find_problem(args.problem, args.problems)
            try:
                binding = bind_pipeline(program, problem, pipeline.name)
            except CheckError as e:
                report["ok"] = False
                report["diagnostics"] += [d.to_json() for d in e.diagnostics]
                text += [d.format(program.source) for d in e.diagnostics]
                continue
            for kc in binding.kernel_calls():
                extents = [kc.binding.extents(w) for w in kc.binding.problem.workloads]
                prev = piped.get(kc.kernel.name)
                piped[kc.kernel.name] = (kc.bound_kernel, (prev[1] if prev else []) + extents)
        where = f" binds to {args.problem}" if args.problem else ""
        text.append(f"{args.file}: pipeline {pipeline.name}{where} ({_steps(pipeline)}):")
        text += binding.describe()
        report.setdefault("pipelines", []).append({"name": pipeline.name, "steps": binding.steps()})
    return piped


def _served_in_dispatch(program, kernel, extents: list[dict]) -> list[dict] | None:
    """The extents (one per workload) that ``kernel`` runs in its program's dispatch, or None when it is not
    part of one."""
    from .runtime import pick

    chain = program.dispatch()
    if not chain or kernel.name not in [k.name for k in chain]:
        return None
    index = [k.name for k in chain].index(kernel.name)
    return [e for e in extents if pick([k.when for k in chain], e) == index]


# --- compile -------------------------------------------------------------------------------------------

def cmd_compile(args) -> int:
    from .build import build_kernels, raise_for
    from .codegen import render
    from .arch import check, distinct_combinations, legal_combinations

    program = _load_program(args.file)
    _require_kernel(program, args.kernel, "compile")
    program = _picks(program, args.pick, args.kernel)
    kernels, sources, rule_errors, open_errors = [], [], [], []
    for kernel in program.kernels:
        if args.kernel and kernel.name != args.kernel:
            continue
        if kernel.choices() and args.all:
            legal, _ = legal_combinations(kernel)
            distinct = distinct_combinations(kernel, legal)
            for picks in distinct:
                kernels.append(kernel.resolve(picks))
                sources.append(program.resolve({f"{kernel.name}.{k}": v for k, v in picks.items()}).source)
            if len(distinct) < len(legal):
                print(f"{kernel.name}: {len(legal)} legal combinations make {len(distinct)} distinct kernels (an "
                      "auto setting makes the others the same kernel as one listed before; they are skipped)",
                      file=sys.stderr)
        elif kernel.choices():
            open_ = "; ".join(f"{k} = {{{', '.join(c.spellings)}}}" for k, c in kernel.choices().items())
            open_errors.append(f"{args.file}: kernel {kernel.name} has open choices ({open_}); pick with --pick "
                               "KEY=VALUE, build every legal one with --all, or let `ucutlass tune` choose")
        else:
            rule_errors += [d for d in check(kernel) if d.severity == "error"]  # every kernel's, as check does
            kernels.append(kernel)
            sources.append(program.source)
    if open_errors:
        for d in rule_errors:
            print(d.format(program.source), file=sys.stderr)
        raise UcutError("\nerror: ".join(open_errors))
    if rule_errors:
        raise CheckError(rule_errors, source=program.source)
    out = Path(args.output) if args.output else None
    if args.emit_only:
        out = out or Path(".")
        out.mkdir(parents=True, exist_ok=True)
        entries = []
        for k in kernels:
            path = out / f"{k.config_name()}.cu"
            path.write_text(render(k, args.file))
            entries.append({"name": k.config_name(), "ok": True, "source_path": str(path), "so_path": None})
            if not args.json:
                print(path)
        if args.json:
            from .agents.feedback import document

            print(json.dumps(document("compile", True, file=args.file, emit_only=True, kernels=entries), indent=2))
        return 0
    done = []

    def on_done(r):
        if args.json:
            return
        status = "cached" if r.cached else f"{r.seconds:.0f} s"
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.name} ({status}) {r.so_path or r.error}", file=sys.stderr)
        done.append(r)

    results = build_kernels(kernels, source_file=args.file, sources=sources, jobs=args.jobs,
                            timeout_s=args.timeout, on_done=on_done)
    failed = [r for r in results if not r.ok]
    if args.json:  # the paths go into the document; copies with -o as without
        from .agents.feedback import build_entry, document

        if out:
            _copy_builds(results, out)
        print(json.dumps(document("compile", not failed, file=args.file, emit_only=False,
                                  kernels=[build_entry(r) for r in results]), indent=2))
        return 1 if failed else 0
    if out:
        for r in _copy_builds(results, out):
            print(out / f"{r.name}.so")
    else:
        for r in results:
            if r.ok:
                print(r.so_path)
    for r in failed:
        print(f"\n{r.name}: nvcc failed: {r.error}\n{r.log[-4000:]}", file=sys.stderr)
    if len(kernels) == 1 and failed:
        raise_for(failed[0])
    return 1 if failed else 0


# --- sol -----------------------------------------------------------------------------------------------

def cmd_sol(args) -> int:
    from .problem import find_problem
    from .sol import sol_command
    from .sol.report import hardware_command

    if args.list_gpus:
        print(hardware_command(as_json=args.json))
        return 0
    if not args.problem:
        raise UcutError("ucutlass sol needs a PROBLEM (or --list-gpus)")
    print(sol_command(find_problem(args.problem, args.problems), gpu=args.gpu, as_json=args.json,
                      timeout_s=_timeout(args)))
    return 0


def cmd_calibrate(args) -> int:
    from .sol import calibrate_command

    print(calibrate_command(save=not args.no_save))
    return 0


# --- problems ------------------------------------------------------------------------------------------

def cmd_problems(args) -> int:
    from .problem import list_problems, load_problem

    for d in args.problems:
        if not Path(d).is_dir():
            raise UcutError(f"--problems {d}: no such folder")
    broken = 0
    for pid, path in list_problems(args.problems):
        try:
            p = load_problem(path)
        except UcutError as e:  # one broken folder does not hide the others
            broken += 1
            print(f"{pid:<55} broken: {e}")
            continue
        spec = "kernel.ucut" if p.spec_path else "no spec"
        print(f"{pid:<55} {len(p.workloads):>3} workloads  {spec:<11} {path}")
    return 1 if broken else 0


# --- grade ---------------------------------------------------------------------------------------------

def _solution_for_file(path: str, problem, args):
    """A SolutionRef for a .ucut (compiled here) or any file the grader reads itself."""
    from .grader import solution_from_file

    if not path.endswith(".ucut"):
        return solution_from_file(path, problem)
    from .bind import bind
    from .build import build_kernels, raise_for

    program = _picks(_load_program(path), getattr(args, "pick", None) or [], getattr(args, "kernel", None))
    if program.pipelines and not args.kernel:  # a pipeline is the solution, unless --kernel names one kernel
        return _pipeline_solution(program, path, problem, args)
    # a dispatch (kernels with `when`) is graded as one solution, unless --kernel names one of its kernels
    dispatch = program.dispatch() if not args.kernel else ()
    try:
        kernels = dispatch or (program.kernel(args.kernel),)
    except KeyError as e:  # several kernels and no --kernel, or no such kernel
        raise UcutError(f"{e.args[0]} (--kernel NAME)") from None
    if getattr(args, "emulate", False) and any(k.choices() for k in kernels):
        from .emulate.choices import describe_picks, emulation_picks

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
        from .solution import emulated_solution

        names = ", ".join(k.name for k in bound)
        print(f"emulating {names} as torch ops (no nvcc; times are torch's, not a kernel's)", file=sys.stderr)
        return emulated_solution(program.source, path, bound[0].name, f"{Path(path).stem} ({names}, emulated)",
                                 dispatch=bool(dispatch))
    import torch

    if torch.cuda.is_available():
        from .runtime import check_device

        for kernel in bound:
            check_device(kernel.target)  # an sm100 kernel on an H200: refuse before a minute of nvcc
    print(f"compiling {', '.join(k.config_name() for k in bound)} …", file=sys.stderr)
    results = [raise_for(r) for r in build_kernels(bound, source_file=path, sources=[program.source] * len(bound))]
    if dispatch:
        from .runtime import describe
        from .solution import dispatch_solution

        print(describe(bound), file=sys.stderr)
        return dispatch_solution({k.name: r.so_path for k, r in zip(bound, results)}, program.source, path,
                                 f"{Path(path).stem} ({', '.join(k.name for k in bound)})")
    from .solution import solution_for

    return solution_for(results[0].so_path, program.source, path, bound[0].name, bound[0].config_name())


def _pipeline_solution(program, path: str, problem, args):
    """A SolutionRef for a file's pipeline: emulated (torch ops) or its bound kernels compiled here."""
    from .bind import bind_pipeline

    try:
        pipeline = program.pipeline()
    except KeyError as e:
        raise UcutError(f"{e.args[0]}: grade one pipeline per file") from None
    called = [k for k in program.kernels if k.name in pipeline.kernel_names()]
    if getattr(args, "emulate", False) and any(k.choices() for k in called):
        from .emulate.choices import describe_picks, emulation_picks

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
    print(f"pipeline {pipeline.name} ({_steps(pipeline)}):\n" + "\n".join(lines), file=sys.stderr)
    if emulate:
        from .solution import emulated_solution

        print(f"emulating pipeline {pipeline.name} as torch ops (kernels emulated; torch steps as they are)",
              file=sys.stderr)
        return emulated_solution(program.source, path, None, f"{Path(path).stem} ({pipeline.name}, emulated)",
                                 pipeline=pipeline.name)
    import torch

    from .build import build_kernels, raise_for

    bound = {}
    for kc in binding.kernel_calls():
        bound.setdefault(kc.bound_kernel.build_digest(), kc.bound_kernel)
    if torch.cuda.is_available():
        from .runtime import check_device

        for kernel in bound.values():
            check_device(kernel.target)
    kernels = list(bound.values())
    print(f"compiling {', '.join(k.config_name() for k in kernels)} …", file=sys.stderr)
    results = [raise_for(r) for r in build_kernels(kernels, source_file=path, sources=[program.source] * len(kernels))]
    from .solution import pipeline_solution

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
    from .ir import precision

    return "precision: " + ", ".join(f"{k.name} {precision(k)}" for k in _load_program(path).kernels)


def cmd_grade(args) -> int:
    from .grader import format_table, summarize
    from .grader.supervised import grade_in_child
    from .problem import find_problem
    from .sol import SolError, analyze, load_hardware, prefetch_counts

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
            _json_error(args, UcutError(message))
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
            w = _pick_workload(problem, which)
            if w not in workloads:
                workloads.append(w)
    solution = _solution_for_file(args.file, problem, args)
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
        from .agents.feedback import document

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


def _missing(e: FileNotFoundError) -> str:
    """``PATH: no such file``, or, where the file's folder is what is missing (``-o /no/dir/x.ucut``), which
    folder."""
    name = e.filename or str(e)
    parent = Path(str(name)).parent if e.filename else None
    if parent is not None and str(parent) not in ("", ".") and not parent.exists():
        return f"{name}: no such folder {parent} (create it first, or write elsewhere)"
    return f"{name}: no such file"


def _pick_workload(problem, which: str):
    """``--workload WHICH``: an index from 0, a uuid or a unique prefix of one, or ``smallest``.

    Raises:
        UcutError: none or several match (the message lists the valid forms and the count).
    """
    wls = list(problem.workloads)
    if which == "smallest":
        from .init.capture import smallest_workload

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
    from .grader import summarize

    s = summarize(results)
    if emulated:
        s["geomean_speedup"] = None
    return s


# --- tune ----------------------------------------------------------------------------------------------

def _tune_no_gpu(args, e, problem, spec) -> int:
    """``tune`` without a GPU: the message (and with --json the error document); exit status 2."""
    if args.json:
        from .agents.feedback import error_document

        print(json.dumps(error_document("tune", e, problem=problem.id, spec=str(spec)), indent=2))
    print(str(e), file=sys.stderr)
    return 2


def cmd_tune(args) -> int:
    from .problem import find_problem
    from .search import NoGpuError, TuneConfig, plan, tune
    from .search.report import format_table

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
    program = _load_program(str(spec))
    if program.pipelines:  # one study per kernel it calls, the whole pipeline graded (search/pipeline_cli.py)
        from .agents.feedback import pipeline_tune_document
        from .search.pipeline_cli import tune_command

        try:
            return tune_command(args, problem, program, spec, pipeline_tune_document)
        except NoGpuError as e:
            return _tune_no_gpu(args, e, problem, spec)
    _require_kernel(program, args.kernel, "tune")
    config = TuneConfig(trials=args.trials, epsilon=args.epsilon, patience=args.patience, batch=args.batch,
                        max_workloads=args.max_workloads, sampler=args.sampler, seed=args.seed,
                        time_limit_s=args.time_limit, dispatch=args.dispatch, sol_timeout_s=_timeout(args))
    if args.dispatch < 1:
        raise UcutError(f"--dispatch must be at least 1, got {args.dispatch}")
    if args.dry_run and args.json:
        raise UcutError("--json reports a finished tune; --dry-run prints the plan as text (leave out one of them)")
    if args.dry_run:
        p = plan(problem, program, kernel=args.kernel, source_file=str(spec), max_workloads=args.max_workloads)
        t_sol = None
        try:
            from .sol import analyze, load_hardware, prefetch_counts

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
        from .runtime import check_device

        check_device(target)  # an sm100 spec on an H200: say so before compiling anything
    out_dir = Path(args.out) if args.out else Path("ucutlass-tune") / problem.id
    try:
        result, paths = tune(problem, program, kernel=args.kernel, source_file=str(spec), out_dir=out_dir,
                             storage=args.storage, study_name=args.study, config=config, jobs=args.jobs,
                             hardware=args.gpu, workers=args.workers)
    except NoGpuError as e:
        return _tune_no_gpu(args, e, problem, spec)
    if args.json:
        from .agents.feedback import tune_document

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
    from .init import run_init
    from .problem import find_problem

    problem = find_problem(args.problem, args.problems)
    return run_init(problem, args.output, check=not args.no_check)


def _init_spec(problem, out_dir: Path) -> Path:
    """``tune PROBLEM`` without a kernel.ucut or --spec: the program ``ucutlass init`` writes, saved as
    OUT/init.ucut (issue 17); says so."""
    from .init import InitError, init_program

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


# --- agents ------------------------------------------------------------------------------------------

def cmd_prompt(args) -> int:
    from .agents.prompt import ENCODING, build_prompt
    from .problem import find_problem

    problem = find_problem(args.problem, args.problems)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UcutError(f"--max-tokens must be a positive number, got {args.max_tokens}")
    study = args.study
    if study is None and (Path("ucutlass-tune") / problem.id / "results.json").is_file():
        study = Path("ucutlass-tune") / problem.id
    prompt = build_prompt(problem, max_tokens=args.max_tokens, gpu=args.gpu, study=study, sol=not args.no_sol,
                          timeout_s=_timeout(args))
    print(prompt.text, end="")
    print(f"prompt: {prompt.tokens} tokens (tiktoken {ENCODING.replace('_offline', '')}, offline)"
          + (f"; dropped to fit --max-tokens {args.max_tokens}: {', '.join(prompt.dropped)}" if prompt.dropped
             else ""), file=sys.stderr)
    return 0


def cmd_mcp(args) -> int:
    from .agents.server import serve

    serve(problems=args.problems, timeout_s=args.timeout)
    return 0


def _off_or(kind):
    """An argparse type: ``kind`` of the text, or None for ``off``."""
    def parse(text: str):
        return None if text.lower() == "off" else kind(text)
    return parse


def cmd_campaign(args) -> int:
    from .agents.campaign import (Campaign, CampaignConfig, format_replay, format_table, load_records,
                                  replay_campaigns)

    if args.replay:
        if args.problems_ids:
            raise UcutError("--replay reads the problems from the records; leave out the problem names")
        rules = []
        for r in args.rule or ([f"{args.epsilon if args.epsilon is not None else 0.25}:{args.window or 12}"]):
            eps, _, w = r.partition(":")
            try:
                rules.append((float(eps), int(w)))
            except ValueError:
                raise UcutError(f"--rule {r!r}: expected EPS:W, e.g. 0.25:12")
        try:
            tunes = load_records(args.replay)
            rows = replay_campaigns(tunes, rules, budget=args.budget, probe=args.probe)
        except (OSError, ValueError) as e:
            raise UcutError(str(e))
        print(f"{len(tunes)} recorded tunes, {sum(len(t.values) for t in tunes)} recorded trials; budget "
              f"{rows[0]['results']['budget']}")
        print(format_replay(rows))
        for r in rows:
            print(f"\n{r['policy']}:\n{format_table(r['results'])}")
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "replay.json").write_text(json.dumps(rows, indent=2))
            print(f"\nreplay: {out / 'replay.json'}")
        return 0
    if not args.problems_ids:
        raise UcutError("name the problems of the campaign (or give --replay RECORDS)")
    if args.budget is None:
        raise UcutError("--budget N is required: the attempts to spend over every problem")
    from .problem import find_problem

    ids = [find_problem(p, args.problems).id for p in args.problems_ids]  # an unknown name fails here, at once
    try:
        config = CampaignConfig(args.budget, epsilon=args.epsilon, window=args.window, spread=args.spread,
                                probe=args.probe)
    except ValueError as e:
        raise UcutError(str(e))
    out = Path(args.out)
    from .agents.campaign_runners import (POLICIES, AgentRunner, TunerRunner, cli_grade, cli_tools,
                                          cli_tune)

    if args.policy == "tuner":
        if args.emulate:
            raise UcutError("--emulate grades an agent's programs as torch ops; the tuner measures on the GPU")
        runner = TunerRunner(out, cli_tune(args.problems, gpu=args.gpu, max_workloads=args.max_workloads,
                                           extra=args.tune_arg),
                             config.epsilon, config.window, grade=cli_grade(args.problems, gpu=args.gpu))
    else:
        runner = AgentRunner(POLICIES[args.policy], cli_tools(args.problems, emulate=args.emulate,
                                                              workloads=args.workloads, gpu=args.gpu),
                             config.epsilon)
    try:
        results = Campaign(ids, runner, config, out, log=lambda s: print(s, file=sys.stderr)).run()
    except ValueError as e:
        raise UcutError(str(e))
    print(format_table(results))
    print(f"\ntable: {out / 'table.txt'}\nresults: {out / 'results.json'}\nstate: {out / 'state.json'} "
          "(the same command again resumes)")
    from .agents.campaign import FAILED

    failed = [r for r in results["problems"] if r["stop_reason"].startswith(FAILED)]
    for r in failed:
        print(f"error: {r['problem']}: {r['stop_reason']}", file=sys.stderr)
    return 1 if len(failed) == len(results["problems"]) else 0


def cmd_import_kernelbench(args) -> int:
    """``ucutlass import kernelbench FILE.py``: a KernelBench problem as a problem folder (issue 17)."""
    from .importers import import_kernelbench, parse_scale

    problem = import_kernelbench(args.file, args.out, scale=parse_scale(args.scale), dtype=args.dtype,
                                 timeout_s=args.timeout)
    checked = problem.extra["kernelbench"]["checked"]
    at = ", ".join(f"{k}={v}" for k, v in checked.get("sizes", {}).items()) or "the file's sizes"
    check = (f"translation matches Model on the CPU at {at} (max diff {checked['max_abs_diff']:g})"
             if "max_abs_diff" in checked else f"translation not checked: {checked['skipped']}")
    print(f"wrote {problem.path}: {len(problem.inputs)} inputs, {len(problem.outputs)} output(s), "
          f"{len(problem.workloads)} workload(s); {check}")
    print(f"next: ucutlass sol {problem.path}   (or add {problem.path.parent} to --problems / $UCUTLASS_PROBLEMS)")
    return 0


# --- parser --------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ucutlass", description="The .ucut language for CUTLASS kernels: "
                                 "check, compile, grade and tune against SOL-ExecBench-style problems.")
    ap.add_argument("--version", action="version", version=f"ucutlass {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", help="parse a .ucut file and check it against its target's rules (sm90, sm100)")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable diagnostics")
    p.add_argument("--problem", help="also bind to this problem and check alignment on its workloads")
    _problems_arg(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("compile", help="generate CUTLASS C++ and compile it with nvcc (cached)")
    p.add_argument("file")
    p.add_argument("--emit-only", action="store_true", help="write the .cu files, do not run nvcc")
    p.add_argument("-o", "--output", metavar="DIR", help="copy .cu/.so here (default: print cache paths)")
    p.add_argument("--pick", action="append", default=[], metavar="KEY=VALUE", help="resolve a {…} choice")
    p.add_argument("--all", action="store_true", help="build every legal combination of the choices")
    p.add_argument("--kernel", help="only this kernel of the file")
    p.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: cores)")
    p.add_argument("--timeout", type=float, default=900.0, help="nvcc time limit per kernel, seconds")
    p.add_argument("--json", action="store_true", help="print one feedback document (ucutlass/agents/feedback-v1.json)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("sol", help="speed-of-light bound (T_SOL) per workload of a problem")
    p.add_argument("problem", nargs="?")
    p.add_argument("--list-gpus", action="store_true", help="list the hardware specs (with their sources)")
    p.add_argument("--gpu", default="h200", help="hardware spec: h200, h100, b200, b200-solar, local, …")
    p.add_argument("--json", action="store_true")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_sol)

    p = sub.add_parser("grade", help="check and time a solution (.ucut, .py, FlashInfer-Bench .json)")
    p.add_argument("file")
    p.add_argument("problem")
    p.add_argument("--json", action="store_true")
    p.add_argument("-o", "--output", help="write the JSON records here")
    p.add_argument("--workloads", type=int, help="grade only the first N workloads")
    p.add_argument("--workload", action="append", default=[], metavar="WHICH",
                   help="grade this workload: its index (from 0, as `ucutlass problems` lists them), its uuid (or a "
                        "unique prefix), or `smallest` (fewest input elements); repeatable")
    p.add_argument("--pick", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--kernel", help="the kernel of a .ucut file with several")
    p.add_argument("--emulate", action="store_true",
                   help="grade a .ucut program's meaning: its kernels run as torch ops from the IR, on the CPU or "
                        "a GPU, with no nvcc (times are torch's: no SOL score is meaningful)")
    p.add_argument("--no-timing", action="store_true",
                   help="check correctness only: no timed calls, so none of the timing's input copies (up to three "
                        "per input set) are made; for a workload whose inputs fill most of the memory, or an "
                        "emulated grade, whose times are torch's anyway")
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="deadline of each request: loading the solution, one call, and each run of the problem's "
                        "own code (past it: TIMEOUT for a candidate, a broken problem for the reference)")
    _problems_arg(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("tune", help="search a program's choices with Optuna on the GPU")
    p.add_argument("problem")
    p.add_argument("--spec", help=".ucut program (default: the problem's kernel.ucut)")
    p.add_argument("--kernel", help="the kernel to tune when the spec has several")
    p.add_argument("--trials", type=int, help="trial budget (default: decided by the SOL headroom)")
    p.add_argument("--workers", type=int, metavar="N", help="worker processes, each pinned to one GPU "
                   "(CUDA_VISIBLE_DEVICES, round-robin), all on one Optuna study (default: one per visible GPU)")
    p.add_argument("--storage", metavar="URL", help="Optuna storage: sqlite:///FILE.db, journal:///FILE.log (or a "
                   "path ending in .log), or a database server shared by several hosts, e.g. "
                   "postgresql+psycopg://USER@HOST:5432/DB (pip install 'ucutlass[postgres]'); default: "
                   "study.db (one worker) or study.log (several) in the output folder; resumable")
    p.add_argument("--study", help="study name in the storage")
    p.add_argument("--out", help="output folder (default: ./ucutlass-tune/PROBLEM)")
    p.add_argument("--jobs", type=int, help="parallel nvcc processes in all, shared among the workers "
                   "(default: cores)")
    p.add_argument("--batch", type=int, default=16, help="trials compiled together per round (per worker; "
                   "a worker asks at most its share of what is left)")
    p.add_argument("--max-workloads", type=int, default=6, help="workloads measured per trial")
    p.add_argument("--epsilon", type=float, default=0.25, help="stop within (1+ε)·T_SOL")
    p.add_argument("--patience", type=int, default=12, help="stop after this many trials without gain")
    p.add_argument("--sampler", default="auto", choices=["auto", "tpe", "random", "brute"])
    p.add_argument("--dispatch", type=int, default=3, metavar="N",
                   help="at most N kernels in best.ucut, one per range of M, when they beat the single best by "
                        "5%% or more on the geomean (a GEMM; default 3; 1: one kernel)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS", help="stop searching after this long "
                   "(the best found is still verified on every workload)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    p.add_argument("--dry-run", action="store_true", help="show the space and plan; no GPU needed")
    p.add_argument("--json", action="store_true", help="print one feedback document (ucutlass/agents/feedback-v1.json)"
                   " at the end instead of the table")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("init", help="write a .ucut program from a problem's reference (kernels + torch steps) and "
                       "check it with the emulated grade on the smallest workload")
    p.add_argument("problem", help="a problem id (as `ucutlass problems` lists them) or a problem folder's path")
    p.add_argument("-o", "--output", metavar="FILE", help="write the program here (default: stdout)")
    p.add_argument("--no-check", action="store_true", help="do not grade it (emulated) after writing it (a problem "
                   "whose smallest workload is too large for this machine's memory)")
    _problems_arg(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("prompt", help="a task prompt for an LLM agent: the card's sections for the problem, the "
                       "problem, T_SOL, a starting program, the feedback format (its token count on stderr)")
    p.add_argument("problem")
    p.add_argument("--max-tokens", type=int, metavar="N", help="drop the least useful parts until the prompt fits "
                   "(the reference's code, then card sections, the best so far, the starting program)")
    p.add_argument("--gpu", default="h200", help="hardware spec for T_SOL (default: h200)")
    p.add_argument("--study", metavar="DIR", help="a tune's output folder: its best program and measured baseline "
                   "(default: ./ucutlass-tune/PROBLEM when it exists)")
    p.add_argument("--no-sol", action="store_true", help="leave out the T_SOL table (no counting of the reference)")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_prompt)

    p = sub.add_parser("mcp", help="an MCP server over stdio (tools: problem, sol, prompt, card, check, compile, "
                       "grade, tune, best; the card also as a resource) for LLM agents")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="limit of one tool call (its command is killed past it; default 600)")
    _problems_arg(p)
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("campaign", help="spend a budget of tuner trials or agent attempts over several problems by "
                       "SOL headroom, with stop rules; resumable; one table (or --replay recorded tunes offline)")
    p.add_argument("problems_ids", nargs="*", metavar="PROBLEM")
    p.add_argument("--budget", type=int, help="attempts in all (tuner trials or programs graded); with --replay "
                   "default: every recorded trial")
    p.add_argument("--policy", default="tuner", choices=["tuner", "scripted"],
                   help="what makes attempts: the Optuna tuner (GPU) or the scripted agent (DiagnosticFixer)")
    p.add_argument("--epsilon", type=_off_or(float), default=0.25, metavar="E|off",
                   help="stop a problem within (1+E)·T_SOL once it beats the baseline (default 0.25)")
    p.add_argument("--window", type=_off_or(int), default=12, metavar="W|off",
                   help="stop a problem after W attempts without a 1%% gain (default 12)")
    p.add_argument("--spread", default="headroom", choices=["headroom", "even"],
                   help="split the budget by SOL headroom, or evenly without the ε and w rules (the baseline)")
    p.add_argument("--probe", type=int, default=2, help="attempts first given to a problem of unknown headroom")
    p.add_argument("--out", default="ucutlass-campaign", help="state, table.txt, results.json and the tuner's "
                   "studies (default ./ucutlass-campaign); rerun the same command to resume")
    p.add_argument("--replay", nargs="+", metavar="RECORDS", help="replay campaigns on recorded tunes (a tune's "
                   "folder, or a campaign's --out): the even spread and each --rule, no GPU")
    p.add_argument("--rule", action="append", metavar="EPS:W", help="a stop rule to replay (repeatable)")
    p.add_argument("--emulate", action="store_true", help="agent policies: grade as torch ops (CPU; no T_SOL)")
    p.add_argument("--workloads", type=int, help="agent policies: grade only the first N workloads")
    p.add_argument("--max-workloads", type=int, default=6, help="tuner: workloads measured per trial")
    p.add_argument("--tune-arg", action="append", default=[], metavar="ARG",
                   help="tuner: passed to each `ucutlass tune` (repeatable; e.g. --tune-arg=--dispatch=1)")
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    _problems_arg(p)
    p.set_defaults(func=cmd_campaign)

    p = sub.add_parser("problems", help="list the problems ucutlass can find")
    _problems_arg(p)
    p.set_defaults(func=cmd_problems)

    p = sub.add_parser("import", help="turn another benchmark's problem into a problem folder")
    imp = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    p = imp.add_parser("kernelbench", help="a KernelBench file (class Model, get_inputs, get_init_inputs)")
    p.add_argument("file", help="the KernelBench .py file (it runs only in a child process, on the meta device)")
    p.add_argument("-o", "--out", metavar="DIR", help="problem folder to write (default ./kernelbench_<stem>)")
    p.add_argument("--scale", action="append", default=[], metavar="GLOBAL=F[,F…]",
                   help="scale an int global of the file; several factors make several workloads (repeatable)")
    p.add_argument("--dtype", choices=["bf16", "bfloat16", "fp16", "float16"],
                   help="make the float32 tensors this dtype")
    p.add_argument("--timeout", type=float, default=120.0, help="the probe's time limit, seconds (default 120)")
    p.set_defaults(func=cmd_import_kernelbench)

    p = sub.add_parser("calibrate", help="measure this GPU's copy bandwidth and matmul rates for T_SOL")
    p.add_argument("--no-save", action="store_true", help="print only; do not store the calibrated entry")
    p.set_defaults(func=cmd_calibrate)
    return ap


def _terminate(signum, frame) -> None:
    """SIGTERM (``timeout``, a job scheduler) as an interrupt: graders close their workers and remove their
    scratch folders on the way out."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import signal

    previous = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        try:
            previous = signal.signal(signal.SIGTERM, _terminate)
        except ValueError:  # not the main thread (main() called from a thread): leave it
            pass
    try:
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _json_error(args, e: BaseException) -> None:
    """With ``--json`` (check, compile, grade, tune), a failure is a feedback document on stdout too."""
    if getattr(args, "json", False) and args.command in ("check", "compile", "grade", "tune"):
        from .agents.feedback import error_document

        fields = {"file": getattr(args, "file", None), "problem": getattr(args, "problem", None)}
        print(json.dumps(error_document(args.command, e, **{k: v for k, v in fields.items() if v is not None}),
                         indent=2))


def _run(args) -> int:
    try:
        return args.func(args)
    except UcutSyntaxError as e:
        _json_error(args, e)
        print(e.format(), file=sys.stderr)
        return 1
    except ToolchainError as e:
        _json_error(args, e)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UcutError as e:
        _json_error(args, e)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ucutlass check --json | head`
        sys.stderr.close()
        return 0
    except FileNotFoundError as e:  # a path given on the command line (a solution, a spec, a workload file)
        missing = _missing(e)
        _json_error(args, UcutError(missing))
        print(f"error: {missing}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.command == "tune":
            print("interrupted; finished trials are saved in the study storage, run the same command to resume",
                  file=sys.stderr)
        else:
            print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
