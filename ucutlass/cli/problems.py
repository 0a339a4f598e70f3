"""``ucutlass problems`` and ``ucutlass import kernelbench``: the problems ucutlass finds, and a problem folder
written from another benchmark's file."""

from __future__ import annotations

from pathlib import Path

from ..errors import UcutError


def cmd_problems(args) -> int:
    """``ucutlass problems``: one line per problem found (1 when a folder is broken)."""
    from ..problem import list_problems, load_problem

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


def cmd_import_kernelbench(args) -> int:
    """``ucutlass import kernelbench FILE.py``: a KernelBench problem as a problem folder (issue 17)."""
    from ..importers import import_kernelbench, parse_scale

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
