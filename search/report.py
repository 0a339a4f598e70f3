"""What ``ucutlass tune`` leaves behind: the best concrete `.ucut`, a per-workload table, JSON, a plot.

Files in the output folder:
- ``best.ucut``: the program with every ``{…}`` replaced by the winning value (comments kept), or, when several
  kernels beat the single best by range of M, the dispatch program of those kernels (``when M <= …``);
- ``results.json``: study, stop reason, budget, headroom, seconds (in all, and searching), measured trials,
  the best config and one record per workload (time, reference time, T_SOL, SOL score, speedup), and every
  trial (of every worker);
- ``table.txt``: the per-workload table as printed;
- ``trials.csv``: one row per trial (number, state, objective, params, reason, the worker that ran it,
  and the trial it retries when its first worker died);
- ``trials.png``: objective (T_kernel / T_SOL) per trial against the SOL line, when matplotlib is
  installed (``pip install matplotlib``); otherwise the CSV is the plot's data.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .budget import geomean
from .study import TuneResult


def sol_score(t_k: float | None, t_b: float | None, t_sol: float | None) -> float | None:
    """SOL-ExecBench's score via :func:`ucutlass.sol.sol_score` (None when it cannot be computed)."""
    if t_k is None or t_b is None or t_sol is None:
        return None
    from ucutlass.sol import sol_score as score

    try:
        value = score(t_k, t_b, t_sol)
    except ValueError:  # non-positive times
        return None
    return value if math.isfinite(value) else None  # NaN: faster than T_SOL, never rewarded


def workload_rows(result: TuneResult) -> list[dict[str, Any]]:
    """One dict per workload of what ``tune`` delivers (the dispatch when there is one, else the verified best):
    label, times (ms), speedup, SOL score, status; with a dispatch also the kernel that served the workload and
    the single best configuration's time (``single_time_ms``)."""
    d = result.dispatch
    single = {o.workload.uuid: o.latency_ms for o in (d.single_outcomes if d else [])}
    rows = []
    for o in (d.outcomes if d else result.best_outcomes):
        row = {
            "workload": o.workload.label(), "uuid": o.workload.uuid, "status": o.status,
            "time_ms": o.latency_ms, "reference_ms": o.reference_ms, "t_sol_ms": o.t_sol_ms,
            "speedup": (o.reference_ms / o.latency_ms) if o.latency_ms and o.reference_ms else None,
            "sol_score": sol_score(o.latency_ms, o.reference_ms, o.t_sol_ms),
            "tuned": o.workload in result.tuned_workloads,
        }
        if d:
            row.update(kernel=d.served.get(o.workload.uuid), single_time_ms=single.get(o.workload.uuid))
        rows.append(row)
    return rows


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def format_table(result: TuneResult) -> str:
    """The per-workload table of the best configuration, with a geomean line."""
    rows = workload_rows(result)
    d = result.dispatch
    width = max([len(r.get("kernel") or "") for r in rows] + [6]) if d else 0
    extra_head = f" {'kernel':<{width}} {'single ms':>9}" if d else ""
    head = (f"{'workload':<34} {'time ms':>9} {'torch ms':>9} {'T_SOL ms':>9} {'speedup':>8} {'SOL score':>9}"
            + extra_head)
    lines = [head, "-" * len(head)]
    for r in rows:
        mark = "*" if r["tuned"] else " "
        extra = f" {r.get('kernel') or '-':<{width}} {_fmt(r.get('single_time_ms'), '9.4f')}" if d else ""
        lines.append(f"{(r['workload'] + mark)[:34]:<34} {_fmt(r['time_ms'], '9.4f')} {_fmt(r['reference_ms'], '9.4f')} "
                     f"{_fmt(r['t_sol_ms'], '9.4f')} {_fmt(r['speedup'], '8.3f')} {_fmt(r['sol_score'], '9.3f')}"
                     + extra)
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    scores = [r["sol_score"] for r in rows if r["sol_score"] is not None]
    if speedups:
        lines.append("-" * len(head))
        lines.append(f"{'geomean speedup / mean SOL score':<34} {'':>9} {'':>9} {'':>9} "
                     f"{geomean(speedups):8.3f} {_fmt(sum(scores) / len(scores) if scores else None, '9.3f')}")
    lines.append("* = workload used during the search; every row was verified with "
                 + ("the dispatch of best.ucut (kernel = the one that served it; single ms = the best single "
                    "configuration)" if d else "the best config"))
    return "\n".join(lines)


#: Permissions of what ``tune`` writes: readable by all, as the kernel cache's files (mkstemp makes 0600).
OUTPUT_MODE = 0o644


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, mode :data:`OUTPUT_MODE`, then rename it over ``path``:
    a reader (or a run killed half-way) sees the old file or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.chmod(tmp, OUTPUT_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_outputs(result: TuneResult, out_dir: Path, extra: dict | None = None) -> dict[str, Path]:
    """Write best.ucut, results.json, table.txt, trials.csv (and trials.png); return their paths. Each is written
    atomically (a temporary file renamed over it) with mode 0644."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if result.best is not None:
        paths["best"] = out_dir / "best.ucut"
        _atomic_write(paths["best"], result.dispatch.source if result.dispatch else result.best.program.source)
        paths["table"] = out_dir / "table.txt"
        _atomic_write(paths["table"], format_table(result) + "\n")
    doc = {
        "study": result.study_name, "stop_reason": result.stop_reason, "budget": result.budget,
        "legal_configs": result.legal_size, "space_size": result.space_size,
        "headroom_reference_over_sol": result.headroom, "seconds": round(result.seconds, 1),
        "search_seconds": None if result.search_seconds is None else round(result.search_seconds, 1),
        "measured_trials": sum(1 for t in result.trials if t["state"] in ("COMPLETE", "FAIL")
                               and not t.get("duplicate") and t.get("status") != "INTERRUPTED"),
        "best": None if result.best is None else {
            "trial": result.best.number, "params": result.best.params,
            "config": result.best.kernel.config_name(), "objective_t_over_sol": result.best_value,
            "so_path": str(result.best.build.so_path) if result.best.build else None,
        },
        "dispatch": None if result.dispatch is None else {
            "kernels": result.dispatch.kernels,
            "geomean_speedup": geomean([o.reference_ms / o.latency_ms for o in result.dispatch.outcomes]),
            "single_best_geomean_speedup": geomean([o.reference_ms / o.latency_ms
                                                    for o in result.dispatch.single_outcomes]),
        },
        "workloads": workload_rows(result),
        "records": [o.record for o in (result.dispatch.outcomes if result.dispatch else result.best_outcomes)],
        "trials": result.trials,
        **(extra or {}),
    }
    paths["json"] = out_dir / "results.json"
    _atomic_write(paths["json"], json.dumps(doc, indent=2, default=str))
    paths["csv"] = out_dir / "trials.csv"
    rows = io.StringIO(newline="")
    w = csv.writer(rows)
    w.writerow(["number", "state", "objective_t_over_sol", "status", "config", "reason", "params", "worker",
                "retry_of"])
    for t in result.trials:
        w.writerow([t["number"], t["state"], t.get("value"), t.get("status", ""), t.get("config", ""),
                    t.get("reason", ""), json.dumps(t.get("params", {}), sort_keys=True), t.get("worker", ""),
                    t.get("retry_of", "")])
    _atomic_write(paths["csv"], rows.getvalue())
    png = _plot(result, out_dir / "trials.png")
    if png:
        paths["plot"] = png
    return paths


def _plot(result: TuneResult, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    done = [t for t in result.trials if t["state"] == "COMPLETE" and t.get("value") and not t.get("duplicate")]
    failed = [t for t in result.trials if t["state"] == "FAIL" and not t.get("duplicate")
              and t.get("status") != "INTERRUPTED"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter([t["number"] for t in done], [t["value"] for t in done], s=14, label="measured")
    best, xs, ys = math.inf, [], []
    for t in sorted(done, key=lambda t: t["number"]):
        best = min(best, t["value"])
        xs.append(t["number"])
        ys.append(best)
    ax.step(xs, ys, where="post", label="best so far")
    if failed:
        top = max([t["value"] for t in done] or [2.0])
        ax.scatter([t["number"] for t in failed], [top] * len(failed), marker="x", color="grey", label="failed")
    ax.axhline(1.0, color="k", linestyle="--", label="T_SOL")
    ax.set_yscale("log")  # a spilling config can be 50x slower than the rest
    ax.set_xlabel("Optuna trial number (pruned proposals take numbers too)")
    ax.set_ylabel("geomean T_kernel / T_SOL (log)")
    ax.set_title(result.study_name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
