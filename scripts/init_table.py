"""Write docs/init-table.md: what ``ucutlass init`` makes of SOL-ExecBench problems (issue 17, "Must show").

For each problem: the kernels, torch steps and views of the written program, the share of the reference's matmul
FLOPs inside kernels, and the emulated grade on the smallest workload (``ucutlass grade FILE PROBLEM --emulate``'s
machinery), or why ``init`` wrote nothing. The grade runs only where the smallest workload's inputs fit
``--max-mb`` (CPU memory and time): other rows say "not run (too large for CPU)".

Usage: python scripts/init_table.py [--problems DIR] [--all] [--max-mb 256] [-o docs/init-table.md] [IDS...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

#: The 32 forward bf16/fp16/fp8 problems of issue 17's "Must show" (prefixes of ../shared/sol-execbench folders).
MUST_SHOW = ["FlashInfer-Bench_004", "FlashInfer-Bench_006", "FlashInfer-Bench_007", "FlashInfer-Bench_008",
             "L1_003", "L1_020", "L1_029", "L1_030", "L1_031", "L1_044", "L1_048", "L1_050", "L1_057", "L1_064",
             "L1_073", "L1_083", "L2_004", "L2_012", "L2_013", "L2_016", "L2_024", "L2_027", "L2_045", "L2_047",
             "L2_062", "L2_081", "Quant_001", "Quant_005", "Quant_007", "Quant_015", "Quant_016", "Quant_017"]


def _row(folder: Path, max_mb: float, out_dir: Path | None) -> str:
    from ucutlass.init import InitError, check_program, init_program
    from ucutlass.init.program import input_mib
    from ucutlass.problem import find_problem

    try:
        problem = find_problem(str(folder))
    except Exception as e:  # a broken problem folder: say so in its row
        return f"| {folder.name} | — | — | — | problem does not load: {e} |"
    t0 = time.time()
    try:
        result = init_program(problem)
    except InitError as e:
        return f"| {problem.id} | — | — | — | init: {str(e).replace(problem.id + ': ', '').replace('|', '/')} |"
    part = result.partition
    kinds = {k: sum(1 for s in part.steps if s.kind == k) for k in ("kernel", "torch", "view")}
    if out_dir is not None:
        (out_dir / f"{problem.id}.ucut").write_text(result.text)
    mib = input_mib(problem)
    if mib > max_mb:
        grade = f"not run (too large for CPU: {mib:.0f} MiB of inputs)"
    else:
        passed, why = check_program(result.text, problem, f"{problem.id}.ucut", timeout_s=300)
        grade = why.replace("|", "/").replace("\n", " ")
    share = f"{result.flop_share:.0%}" if part.total_flops else "no matmul"
    return (f"| {problem.id} | {len(part.kernels)} ({kinds['kernel']} calls) | {kinds['torch']} torch, "
            f"{kinds['view']} views | {share} | {grade} ({time.time() - t0:.0f} s) | {_tuner_space(problem, result)} |")


def _tuner_space(problem, result) -> str:
    """What `ucutlass tune PROBLEM` would search: each kernel's legal configurations over every workload (the
    tuner's plan, rules applied to every workload's shapes), or why it has none (a program the emulated grade
    passes on one workload can still break a rule on another: an odd extent)."""
    from ucutlass.lang import parse
    from ucutlass.search.pipeline_plan import plan_pipeline

    try:
        program = parse(result.text, f"{problem.id}.ucut")
        if not getattr(program, "pipelines", None):
            return "one kernel, bound directly"
        plan = plan_pipeline(problem, program)
    except Exception as e:  # noqa: BLE001 - the row says why the tuner cannot plan it
        return f"no plan: {str(e).splitlines()[0][:160].replace('|', '/')}"
    return ", ".join(f"{k.name} {len(k.legal)}" for k in plan.kernels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ids", nargs="*", help="problem id prefixes (default: issue 17's 32)")
    ap.add_argument("--problems", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "sol-execbench"))
    ap.add_argument("--all", action="store_true", help="every problem of the folder")
    ap.add_argument("--max-mb", type=float, default=256.0, help="grade only where the inputs fit (MiB)")
    ap.add_argument("--programs", metavar="DIR", help="also write each program here")
    ap.add_argument("-o", "--output", default="docs/init-table.md")
    args = ap.parse_args()
    root = Path(args.problems)
    folders = sorted(p for p in root.iterdir() if (p / "definition.json").is_file())
    wanted = args.ids or (None if args.all else MUST_SHOW)
    if wanted is not None:
        folders = [f for f in folders if any(f.name.startswith(i + "_") or f.name == i for i in wanted)]
    out_dir = Path(args.programs) if args.programs else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for folder in folders:
        row = _row(folder, args.max_mb, out_dir)
        print(row, flush=True)
        rows.append(row)
    head = ["# What `ucutlass init` makes of SOL-ExecBench problems", "",
            "Written by `python scripts/init_table.py` (issue 17). Kernels: gemm kernels declared (calls in the "
            "pipeline); steps: torch steps and views of the pipeline; FLOP share: the reference's matmul FLOPs "
            "inside kernels; grade: `ucutlass grade FILE PROBLEM --emulate`'s machinery on the smallest workload "
            f"(CPU; only where its inputs fit {args.max_mb:.0f} MiB). Times are this machine's CPU wall clock for "
            "init plus the check, not kernel times. Tuner's space: legal configurations per kernel over every "
            "workload (`ucutlass tune PROBLEM --dry-run`'s plan).", "",
            "| problem | kernels | steps | FLOP share | emulated grade (smallest workload) | tuner's space |",
            "|---|---|---|---|---|---|"]
    Path(args.output).write_text("\n".join(head + rows) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
