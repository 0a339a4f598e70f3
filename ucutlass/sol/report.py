"""Text and JSON for ``ucutlass sol PROBLEM [--gpu h200|b200|local] [--json]``."""

from __future__ import annotations

import json
from typing import Iterable, Sequence

from .analysis import SolReport, analyze, prefetch_counts
from ._errors import HardwareError
from .hardware import ALIASES, Hardware, list_hardware, load_hardware


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def format_time(ms: float) -> str:
    """A duration in ms as text: ``12.34 µs`` under 1 ms, else 4 significant digits in ms."""
    return f"{ms * 1e3:.2f} µs" if ms < 1 else f"{ms:.4g} ms"


def format_table(reports: Sequence[SolReport], hardware: Hardware | None = None) -> str:
    """A plain-text table, one row per workload: axes, FLOPs, bytes, intensity, bound, T_SOL.

    The hardware (name, method and main ceilings; ``hardware`` or looked up by the reports' name) is stated
    once above the table; notes that every workload shares are listed once below it.
    """
    if not reports:
        return "(no workloads)"
    if hardware is None:
        try:
            hardware = load_hardware(reports[0].hardware)
        except HardwareError:
            hardware = None
    precisions = sorted({p for r in reports for p in r.flops_by_precision})
    where = (hardware.describe(precisions) if hardware
             else f"{reports[0].hardware} (method {reports[0].hardware_method})")
    head = f"{reports[0].problem_id} on {where}"
    rows = [("workload", "FLOPs", "precision", "bytes", "FLOP/B", "bound", "T_SOL")]
    for r in reports:
        precs = "+".join(sorted(r.flops_by_precision)) or "-"
        rows.append((r.workload_label, _si(r.flops, "FLOP"), precs, _si(r.bytes, "B"),
                     f"{r.intensity:.1f}", r.bound, format_time(r.t_sol_ms)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [head, ""]
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    shared = [n for n in reports[0].notes if all(n in r.notes for r in reports)]
    own = sorted({n for r in reports for n in r.notes if n not in shared})
    if shared or own:
        lines.append("")
        lines += [f"note: {n}" for n in shared]
        lines += [f"note (some workloads): {n}" for n in own]
    return "\n".join(lines)


def sol_reports(problem, gpu: str | Hardware, workloads: Iterable[int] | None = None, *,
                timeout_s: float | None = None) -> list[SolReport]:
    """:func:`analyze` for every workload (or the given indices) of a problem on one GPU, counted in one child
    process (:func:`prefetch_counts`); ``timeout_s`` as for :func:`analyze`."""
    hw = load_hardware(gpu)
    picked = problem.workloads if workloads is None else [problem.workloads[i] for i in workloads]
    prefetch_counts(problem, picked, timeout_s=timeout_s)
    return [analyze(problem, w, hw, timeout_s=timeout_s) for w in picked]


def sol_command(problem, gpu: str, as_json: bool = False, *, timeout_s: float | None = None) -> str:
    """The text ``ucutlass sol PROBLEM --gpu GPU [--json] [--timeout SECONDS]`` prints.

    Args:
        problem: a :class:`ucutlass.problem.Problem`, or an id / folder for :func:`ucutlass.problem.find_problem`.
        gpu: a hardware name or alias (``h200``, ``b200``, ``b200-solar``, ``local`` …).
        as_json: JSON (hardware entry + one record per workload) instead of the table.
        timeout_s: limit for loading the reference and for counting each workload (default 60 s).

    Raises:
        ProblemError, HardwareError, SolError (BrokenReferenceError): as :func:`analyze`.
    """
    if isinstance(problem, str):
        from ..problem import find_problem

        problem = find_problem(problem)
    hw = load_hardware(gpu)
    reports = sol_reports(problem, hw, timeout_s=timeout_s)
    if as_json:
        return json.dumps({"problem": problem.id, "hardware": hw.to_json(),
                           "workloads": [r.to_json() for r in reports]}, indent=2)
    return format_table(reports, hw)


def hardware_command(as_json: bool = False) -> str:
    """The text ``ucutlass sol --list-gpus`` prints: every hardware entry, one line each (or JSON)."""
    entries = list_hardware()
    if as_json:
        return json.dumps([h.to_json() for h in entries], indent=2)
    aliases = {v: k for k, v in ALIASES.items()}
    lines = [h.describe() + (f"  [--gpu {aliases[h.name]}]" if h.name in aliases else "") for h in entries]
    return "\n".join(lines + ["local: the current GPU (its calibrated entry, else its datasheet entry)"])


__all__ = ["format_table", "sol_command", "sol_reports", "hardware_command"]
