"""Check our bounds against NVIDIA's published ones: SOL-ExecBench's ``b200_sol.json`` beside a problem.

``b200_sol.json`` holds, per workload, SOLAR's T_SOL on a B200 (``sol["per_workload"][i]["sol_ms"]``,
rounded to 0.1 µs for most problems) and the baseline time. :func:`compare_published` pairs them with
ours (on the ``b200-solar`` entry, which uses SOLAR's constants) and classifies each workload:

- ``agree``: within the tolerance (10% by default);
- ``published-low``: theirs is lower — below our minimum. Our count is a lower bound on the work any
  correct kernel does (each input read once, each output written once, every needed MAC), so a
  published bound below it cannot be reached: the published count misses bytes or FLOPs;
- ``published-high``: theirs is higher — their count includes work a kernel can skip (a causal mask's
  upper triangle, experts without tokens).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .analysis import SolReport, analyze, prefetch_counts
from .isolation import shared_counting_process

PUBLISHED_FILE = "b200_sol.json"


@dataclass(frozen=True)
class Comparison:
    """Our T_SOL against the published one for one workload (ms)."""

    problem_id: str
    index: int
    label: str
    ours_ms: float
    published_ms: float
    status: str  # agree | published-low | published-high
    report: SolReport

    @property
    def ratio(self) -> float:
        """ours / published."""
        return self.ours_ms / self.published_ms


def load_published(problem_dir: str | os.PathLike) -> list[dict]:
    """The per-workload records of a problem's ``b200_sol.json`` (index, axes, sol_ms, baseline_latency_ms)."""
    data = json.loads((Path(problem_dir) / PUBLISHED_FILE).read_text())
    return list(data["sol"]["per_workload"])


def compare_published(problem, *, hardware: str = "b200-solar", tolerance: float = 0.10,
                      indices=None) -> list[Comparison]:
    """Compare our T_SOL with ``b200_sol.json`` for a problem's workloads.

    Args:
        problem: a :class:`ucutlass.problem.Problem` whose folder holds ``b200_sol.json``.
        hardware: the entry to price on (``b200-solar`` reproduces SOLAR's constants).
        tolerance: relative difference still called ``agree``.
        indices: only these workload indices (default all).

    Raises:
        ValueError: the published axes of a workload differ from the problem's.
    """
    published = load_published(problem.path)
    prefetch_counts(problem, [r["index"] for r in published if indices is None or r["index"] in indices])
    out = []
    for rec in published:
        i = rec["index"]
        if indices is not None and i not in indices:
            continue
        w = problem.workloads[i]
        axes = problem.resolve_axes(w)
        if any(int(v) != axes.get(k) for k, v in rec["axes"].items()):
            raise ValueError(f"{problem.id} workload {i}: published axes {rec['axes']} != ours {dict(w.axes)}")
        report = analyze(problem, w, hardware)
        ours, theirs = report.t_sol_ms, float(rec["sol_ms"])
        if abs(ours - theirs) <= tolerance * theirs:
            status = "agree"
        else:
            status = "published-low" if theirs < ours else "published-high"
        out.append(Comparison(problem.id, i, w.label(), ours, theirs, status, report))
    return out


def main(argv=None) -> int:
    """``python -m ucutlass.sol.published DIR...``: print the agreement table for SOL-ExecBench folders."""
    import argparse

    from ..problem import load_problem

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="problem folders holding b200_sol.json (or a folder of them)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--detail", action="store_true", help="one line per workload that disagrees")
    args = ap.parse_args(argv)
    folders = []
    for d in map(Path, args.dirs):
        folders += [d] if (d / PUBLISHED_FILE).is_file() else sorted(p.parent for p in d.glob(f"*/{PUBLISHED_FILE}"))
    print(f"{'problem':<52} {'agree':>7} {'pub-low':>8} {'pub-high':>9}  ours/published (min..max)")
    with shared_counting_process():  # one counting process for all the folders
        for folder in folders:
            rows = compare_published(load_problem(folder), tolerance=args.tolerance)
            n = {s: sum(r.status == s for r in rows) for s in ("agree", "published-low", "published-high")}
            ratios = [r.ratio for r in rows]
            print(f"{folder.name:<52} {n['agree']:>3}/{len(rows):<3} {n['published-low']:>8} "
                  f"{n['published-high']:>9}  {min(ratios):.3f}..{max(ratios):.3f}")
            if args.detail:
                for r in rows:
                    if r.status != "agree":
                        print(f"    {r.index:>3} {r.label:<44} ours {r.ours_ms * 1e3:10.2f} µs  published "
                              f"{r.published_ms * 1e3:10.2f} µs  ({r.status}, {r.report.bound}-bound)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Comparison", "compare_published", "load_published", "PUBLISHED_FILE"]
