"""A portfolio of configurations, one per range of a GEMM mode: what ``tune`` turns into a dispatch program.

One configuration is rarely fastest from M = 1 (a memory-bound GEMV: small tiles, split-K) to M = 16384 (compute
bound: large tiles, clusters). cuBLAS answers with a heuristic per shape; ``tune`` answers with the measurements it
already has. After the search, :func:`contenders` takes, for each tuned workload, the configuration that was fastest
on it; the tuner times those on a sample of workloads spread over M; :func:`choose` then keeps the few that shorten
the geomean time the most (greedy forward selection, each addition must gain at least ``min_gain``), and
:func:`ranges` turns the per-workload winners into ``when M <= bound`` ranges, merging a range into a neighbour when
that costs less than ``min_gain``, with each bound at the geometric mean of the two measured modes it separates.
The result is written as a `.ucut` dispatch (``kernel … when M <= 64 { … }``, docs/DSL.md).

Times are in ms, keyed ``times[config][workload]``; a missing entry means the configuration failed or was not
measured on that workload (it can never serve it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

Config = Hashable
Times = Mapping[Config, Mapping[str, float]]


@dataclass(frozen=True)
class Range:
    """Configuration ``config`` serves the calls whose mode is at most ``upper`` (None: every larger one)."""

    config: Config
    upper: int | None


def contenders(trial_times: Times, workloads: Sequence[str]) -> list[Config]:
    """The configurations fastest on at least one of ``workloads`` (from the search's per-trial times), the one
    fastest on the most workloads first; each appears once."""
    wins: dict[Config, int] = {}
    for w in workloads:
        timed = [(t[w], c) for c, t in trial_times.items() if t.get(w) is not None]
        if timed:
            best = min(timed, key=lambda x: x[0])[1]
            wins[best] = wins.get(best, 0) + 1
    return sorted(wins, key=lambda c: -wins[c])


def _log_total(times: Times, chosen: Sequence[Config], workloads: Sequence[str]) -> float:
    """Sum over workloads of log(fastest time among ``chosen``); inf when one has no time at all."""
    total = 0.0
    for w in workloads:
        best = min((times[c][w] for c in chosen if times[c].get(w) is not None), default=None)
        if best is None:
            return math.inf
        total += math.log(best)
    return total


def choose(times: Times, workloads: Sequence[str], first: Config, max_configs: int, min_gain: float = 0.05
           ) -> list[Config]:
    """Greedy forward selection: start from ``first`` (the single best, which serves every workload) and add the
    configuration that lowers the geomean time over ``workloads`` most, while it lowers it by at least
    ``min_gain`` (a fraction: 0.05 = 5 %) and fewer than ``max_configs`` are chosen.

    Raises:
        ValueError: ``first`` has no time on some workload (it must serve them all).
    """
    chosen = [first]
    current = _log_total(times, chosen, workloads)
    if not math.isfinite(current):
        raise ValueError(f"{first!r} is not timed on every workload")
    n = len(workloads)
    while len(chosen) < max_configs:
        gains = {c: current - _log_total(times, chosen + [c], workloads) for c in times if c not in chosen}
        if not gains:
            break
        best = max(gains, key=gains.get)
        if gains[best] / n < math.log1p(min_gain):  # geomean gain below min_gain
            break
        chosen.append(best)
        current -= gains[best]
    return chosen


def ranges(times: Times, chosen: Sequence[Config], mode_of: Mapping[str, int], min_gain: float = 0.05,
           max_ranges: int | None = None) -> list[Range]:
    """``when MODE <= upper`` ranges over the workloads sorted by their mode (``mode_of[workload]``), each served
    by the fastest of ``chosen`` there. Neighbouring ranges are merged while merging costs less than ``min_gain`` of
    the geomean time of the workloads the merged range covers, then (cheapest merge first) while there are more
    than ``max_ranges``: small-M times are noisy, and a range per noise bump would fit the noise. A range's
    ``upper`` is the geometric mean (rounded down) of its largest mode and the next range's smallest; the last
    range has ``upper`` None (the fallback). Workloads with the same mode go to one range (the configuration fastest over
    all of them)."""
    by_mode: dict[int, list[str]] = {}
    for w, m in mode_of.items():
        by_mode.setdefault(m, []).append(w)
    groups = [by_mode[m] for m in sorted(by_mode)]
    modes = sorted(by_mode)

    def cost(config: Config, ws: Sequence[str]) -> float:
        return sum(math.log(times[config][w]) if times[config].get(w) is not None else math.inf for w in ws)

    def fastest(ws: Sequence[str]) -> tuple[Config, float]:
        return min(((c, cost(c, ws)) for c in chosen), key=lambda x: x[1])

    # Each run of workloads: (config, workloads, top mode)
    runs: list[tuple[Config, list[str], int]] = []
    for m, ws in zip(modes, groups):
        c, _ = fastest(ws)
        if runs and runs[-1][0] == c:
            runs[-1] = (c, runs[-1][1] + ws, m)
        else:
            runs.append((c, list(ws), m))
    merged = True
    while merged and len(runs) > 1:
        merged = False
        best_i, best_loss, best_cfg = None, math.inf, None
        for i in range(len(runs) - 1):
            ws = runs[i][1] + runs[i + 1][1]
            c, merged_cost = fastest(ws)
            loss = (merged_cost - cost(runs[i][0], runs[i][1]) - cost(runs[i + 1][0], runs[i + 1][1])) / len(ws)
            if loss < best_loss:
                best_i, best_loss, best_cfg = i, loss, c
        too_many = max_ranges is not None and len(runs) > max_ranges
        if best_i is not None and (best_loss < math.log1p(min_gain) or too_many):
            i = best_i
            runs[i:i + 2] = [(best_cfg, runs[i][1] + runs[i + 1][1], runs[i + 1][2])]
            merged = True
            # neighbours that now share a configuration become one range
            j = 0
            while j < len(runs) - 1:
                if runs[j][0] == runs[j + 1][0]:
                    runs[j:j + 2] = [(runs[j][0], runs[j][1] + runs[j + 1][1], runs[j + 1][2])]
                else:
                    j += 1
    # A bound between two measured modes is a guess either way: take their geometric mean, so that an unmeasured
    # M = 952 between a decode range ending at 492 and a prefill range starting at 8828 goes to the nearer one.
    bottoms = [min(mode_of[w] for w in ws) for _, ws, _ in runs]
    return [Range(c, None if i == len(runs) - 1 else max(top, math.isqrt(top * bottoms[i + 1])))
            for i, (c, _, top) in enumerate(runs)]


def assigned(rngs: Sequence[Range], mode: int) -> Config:
    """The configuration that serves a call with this mode value (the first range whose bound holds)."""
    for r in rngs:
        if r.upper is None or mode <= r.upper:
            return r.config
    raise ValueError("no fallback range")  # ranges() always ends with one
