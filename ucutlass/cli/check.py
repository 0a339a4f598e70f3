"""``ucutlass check`` and ``ucutlass compile``: a .ucut file's diagnostics against its target's rules, and its
kernels built with nvcc."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from ..errors import CheckError, UcutError, UcutSyntaxError
from .common import apply_picks, count_steps, load_program, require_kernel


# --- check ---------------------------------------------------------------------------------------------

def cmd_check(args) -> int:
    """``ucutlass check FILE``: the file's diagnostics and combinations (bound to ``--problem``'s workloads)."""
    from ..arch import check, legal_combinations, require_countable

    from ..agents.feedback import document, error_document

    try:
        program = load_program(args.file)
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
            from ..bind import bind
            from ..problem import find_problem

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
            from ..bind import resolve_auto

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
        from ..runtime import describe

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
    from ..bind import PipelineBinding, bind_pipeline

    piped: dict = {}
    for pipeline in program.pipelines:
        binding = PipelineBinding(program, pipeline, None)
        if args.problem:
            from ..problem import find_problem

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
        text.append(f"{args.file}: pipeline {pipeline.name}{where} ({count_steps(pipeline)}):")
        text += binding.describe()
        report.setdefault("pipelines", []).append({"name": pipeline.name, "steps": binding.steps()})
    return piped


def _served_in_dispatch(program, kernel, extents: list[dict]) -> list[dict] | None:
    """The extents (one per workload) that ``kernel`` runs in its program's dispatch, or None when it is not
    part of one."""
    from ..runtime import pick

    chain = program.dispatch()
    if not chain or kernel.name not in [k.name for k in chain]:
        return None
    index = [k.name for k in chain].index(kernel.name)
    return [e for e in extents if pick([k.when for k in chain], e) == index]


# --- compile -------------------------------------------------------------------------------------------

def cmd_compile(args) -> int:
    """``ucutlass compile FILE``: the kernels' .cu (``--emit-only``) or their .so, built with nvcc."""
    from ..build import build_kernels, raise_for
    from ..codegen import render
    from ..arch import check, distinct_combinations, legal_combinations

    program = load_program(args.file)
    require_kernel(program, args.kernel, "compile")
    program = apply_picks(program, args.pick, args.kernel)
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
            from ..agents.feedback import document

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
        from ..agents.feedback import build_entry, document

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


def _copy_builds(results, out: Path) -> list:
    """Copy each successful build's ``.so`` and ``.cu`` into ``out`` as NAME.so / NAME.cu; the builds copied."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    done = [r for r in results if r.ok]
    for r in done:
        shutil.copy2(r.so_path, out / f"{r.name}.so")
        shutil.copy2(r.source_path, out / f"{r.name}.cu")
    return done
