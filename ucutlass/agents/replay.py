"""Stop rules evaluated offline on recorded trials (μCUTLASS's method): how many trials a (ε, w) rule would have
spent on each tune, and what speedup it would have kept, without GPU time.

A recorded tune is its ``results.json`` (``ucutlass tune`` writes one): the measured trials in the order they were
numbered, each with its objective (geomean T_kernel / T_SOL over the tuned workloads; failed: none), and the
headroom (geomean baseline / T_SOL over the same workloads), so a trial's geomean speedup over the baseline is
``headroom / objective``. :func:`replay` runs a :class:`~ucutlass.agents.policy.StopRule` over one tune;
:func:`compare` over many, for several rules, against spending every recorded trial.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .policy import StopRule


@dataclass(frozen=True)
class RecordedTune:
    """One tune's trials as a stop rule sees them.

    Attributes:
        problem: the problem id (the tune's folder name).
        headroom: geomean baseline time / T_SOL on the tuned workloads.
        values: per measured trial, in trial order: its objective T_kernel / T_SOL, or None when it failed.
    """

    problem: str
    headroom: float
    values: tuple[float | None, ...]

    @classmethod
    def from_results(cls, path: str | Path) -> "RecordedTune":
        """Read a tune's ``results.json`` (or the folder holding it).

        Raises:
            ValueError: no headroom or no measured trial in it.
        """
        path = Path(path)
        if path.is_dir():
            path = path / "results.json"
        doc = json.loads(path.read_text())
        headroom = doc.get("headroom_reference_over_sol")
        if not isinstance(headroom, (int, float)) or not math.isfinite(headroom) or headroom <= 0:
            raise ValueError(f"{path}: no headroom_reference_over_sol (a tune without T_SOL cannot be replayed)")
        trials = sorted((t for t in doc.get("trials", []) if t.get("state") in ("COMPLETE", "FAIL")
                         and not t.get("duplicate") and t.get("status") != "INTERRUPTED"), key=lambda t: t["number"])
        if not trials:
            raise ValueError(f"{path}: no measured trial")
        values = tuple(t["value"] if t["state"] == "COMPLETE" and t.get("value") else None for t in trials)
        return cls(path.parent.name, float(headroom), values)


@dataclass(frozen=True)
class Replay:
    """What a rule did on one tune: trials it spent (of those recorded), its best speedup and the full run's."""

    problem: str
    trials: int
    recorded: int
    speedup: float | None
    full_speedup: float | None
    reason: str


def _speedup(headroom: float, value: float | None) -> float | None:
    return headroom / value if value else None


def replay(tune: RecordedTune, *, epsilon: float, patience: int, budget: int | None = None) -> Replay:
    """Run the rule (ε, w = ``patience``, at most ``budget`` trials: default all recorded) over ``tune``'s trials."""
    rule = StopRule(budget=budget or len(tune.values), epsilon=epsilon, patience=patience)
    reason = "every recorded trial spent"
    for value in tune.values:
        s = _speedup(tune.headroom, value)
        near = value is not None and value <= 1 + epsilon and s is not None and s > 1
        if rule.observe(s, near):
            reason = rule.reason
            break
    spent = tune.values[:rule.attempts]
    best = [s for s in (_speedup(tune.headroom, v) for v in spent) if s is not None]
    full = [s for s in (_speedup(tune.headroom, v) for v in tune.values) if s is not None]
    return Replay(tune.problem, rule.attempts, len(tune.values), max(best) if best else None,
                  max(full) if full else None, reason)


def _geomean(xs: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def compare(tunes: Iterable[RecordedTune], policies: Sequence[tuple[float, int]]) -> list[dict]:
    """Each (ε, w) rule over every tune: trials spent in all (and the fraction saved), geomean best speedup and
    its ratio to spending every recorded trial, and each tune's replay.

    Returns:
        one dict per rule: ``epsilon``, ``patience``, ``trials``, ``recorded``, ``saved`` (fraction),
        ``geomean_speedup``, ``full_geomean_speedup``, ``ratio``, ``replays`` (:class:`Replay` list).
    """
    tunes = list(tunes)
    out = []
    for eps, w in policies:
        rows = [replay(t, epsilon=eps, patience=w) for t in tunes]
        kept = [r for r in rows if r.speedup is not None and r.full_speedup is not None]
        geo, full = _geomean([r.speedup for r in kept]), _geomean([r.full_speedup for r in kept])
        trials, recorded = sum(r.trials for r in rows), sum(r.recorded for r in rows)
        out.append({"epsilon": eps, "patience": w, "trials": trials, "recorded": recorded,
                    "saved": 1 - trials / recorded if recorded else 0.0, "geomean_speedup": geo,
                    "full_geomean_speedup": full, "ratio": geo / full if geo and full else None, "replays": rows})
    return out


def format_comparison(rows: list[dict]) -> str:
    """A table: one line per rule (ε, w, trials spent of recorded, saved, geomean speedup, ratio to all)."""
    head = f"{'eps':>6} {'w':>4} {'trials':>13} {'saved':>7} {'geomean':>8} {'of all':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        geo = "-" if r["geomean_speedup"] is None else f"{r['geomean_speedup']:.3f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.1%}"
        lines.append(f"{r['epsilon']:>6g} {r['patience']:>4} {r['trials']:>6}/{r['recorded']:<6} "
                     f"{r['saved']:>7.1%} {geo:>8} {ratio:>7}")
    return "\n".join(lines)


__all__ = ["RecordedTune", "Replay", "replay", "compare", "format_comparison"]
