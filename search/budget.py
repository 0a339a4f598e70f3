"""How many trials a problem deserves, and when to stop: decisions driven by the speed of light.

The headroom of a problem is how far its baseline is from the bound: ``H = geomean(T_ref / T_SOL)``
over the tuned workloads. A problem whose reference already runs near T_SOL has little to win and gets
few trials; one far from it gets more (logarithmic in H: each halving of the gap is worth a similar
number of trials).

Stop rules (DESIGN.md, "Search"; μCUTLASS found ε between 25% and 250% of T_SOL and w = 12–16 trials
without gain to work): stop when the best objective (geomean of T_kernel / T_SOL) is within ``1 + ε``,
after ``patience`` finished trials without a relative gain of at least ``min_gain``, when the budget is
spent, when every legal configuration has been measured, or when a time limit is reached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

#: Trial budget: BASE + PER_DOUBLING · log2(headroom), clamped to [MIN, MAX] and to the legal space.
BASE_TRIALS = 8
PER_DOUBLING = 16
MIN_TRIALS = 8
MAX_TRIALS = 96


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive numbers (``nan`` for an empty sequence)."""
    values = [v for v in values]
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def headroom(reference_ms: Sequence[float], t_sol_ms: Sequence[float]) -> float:
    """``geomean(T_ref / T_SOL)``: how many times slower than the bound the baseline is (≥ 1 when the
    bound is right)."""
    return geomean([r / s for r, s in zip(reference_ms, t_sol_ms) if s and s > 0 and r > 0])


def trial_budget(head: float, legal_size: int) -> int:
    """Trials to spend given the headroom ``head`` and the number of legal configurations."""
    if not math.isfinite(head) or head <= 1.0:
        wanted = MIN_TRIALS
    else:
        wanted = round(BASE_TRIALS + PER_DOUBLING * math.log2(head))
    return max(1, min(legal_size, max(MIN_TRIALS, min(MAX_TRIALS, wanted))))


@dataclass
class StopRule:
    """Tracks finished trials and says when to stop (see the module docstring).

    Attributes:
        epsilon: stop when best ≤ 1 + epsilon (objective is geomean T_kernel / T_SOL).
        patience: finished trials without a gain before stopping (w), counting only trials proposed after
            the best so far was known (:meth:`record`'s ``informed``).
        budget: trials to run at most (counting failed and pruned ones).
        legal_size: legal configurations in the space.
        min_gain: relative improvement that counts as a gain.
        time_limit_s: wall-clock limit of the search (the verification of the best comes after it).
    """

    epsilon: float = 0.25
    patience: int = 12
    budget: int = 32
    legal_size: int = 1 << 30
    min_gain: float = 0.01
    time_limit_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    best: float = math.inf
    since_gain: int = 0
    finished: int = 0
    tried: set = field(default_factory=set)
    reason: str = ""

    def record(self, value: float | None, config_key=None, informed: bool = True) -> bool:
        """Record one finished trial (``value`` None for a failed or pruned one); ``config_key``
        identifies a legal configuration that was built and measured (or failed doing so).

        ``informed``: the trial was proposed after the best so far was known. One proposed before (in the
        same batch as the best, or built ahead) says nothing about whether the search has stalled, so
        without a gain it does not count for patience. Returns True when the trial was a gain.
        """
        self.finished += 1
        if config_key is not None:
            self.tried.add(config_key)
        if value is not None and value < self.best * (1 - self.min_gain):
            self.best = value
            self.since_gain = 0
            return True
        if value is not None:
            self.best = min(self.best, value)
        if informed:
            self.since_gain += 1
        return False

    def record_earlier(self, value: float | None, config_key=None) -> None:
        """Record a trial finished before this run started (a resumed study): it counts for the budget,
        the legal configurations tried and the best, not for patience."""
        self.finished += 1
        if config_key is not None:
            self.tried.add(config_key)
        if value is not None:
            self.best = min(self.best, value)

    def should_stop(self) -> bool:
        """True when a stop rule fires; :attr:`reason` says which."""
        if self.best <= 1.0 + self.epsilon:
            self.reason = f"best is within {self.epsilon:.0%} of T_SOL ({self.best:.3f}× T_SOL)"
        elif self.since_gain >= self.patience:
            self.reason = f"{self.since_gain} trials without a {self.min_gain:.0%} gain"
        elif self.finished >= self.budget:
            self.reason = f"trial budget of {self.budget} spent"
        elif len(self.tried) >= self.legal_size:
            self.reason = f"all {self.legal_size} legal configurations tried"
        elif self.time_limit_s is not None and time.monotonic() - self.started >= self.time_limit_s:
            self.reason = f"time limit of {self.time_limit_s:.0f} s reached"
        else:
            return False
        return True
