"""search.portfolio: which configurations a dispatch keeps, and the M ranges each serves (pure logic, CPU)."""

from __future__ import annotations

import math

import pytest

from ucutlass.search.portfolio import Range, assigned, choose, contenders, ranges

# Times in ms of three configurations on five workloads (M = 1, 8, 64, 1024, 8192): a decode config (small tile,
# split-K), a prefill config (large tiles) and a middling one that is never far from either.
M = {"m1": 1, "m8": 8, "m64": 64, "m1024": 1024, "m8192": 8192}
TIMES = {
    "decode": {"m1": 10.0, "m8": 10.0, "m64": 11.0, "m1024": 60.0, "m8192": 5000.0},
    "prefill": {"m1": 20.0, "m8": 20.0, "m64": 20.0, "m1024": 40.0, "m8192": 250.0},
    "middle": {"m1": 12.0, "m8": 12.0, "m64": 13.0, "m1024": 42.0, "m8192": 310.0},
}
W = list(M)


def geomean_of(chosen):
    return math.exp(sum(math.log(min(TIMES[c][w] for c in chosen)) for w in W) / len(W))


def test_contenders_are_the_per_workload_winners_most_wins_first():
    assert contenders(TIMES, W) == ["decode", "prefill"]
    partial = {"a": {"m1": 1.0}, "b": {"m1": 2.0, "m8": 1.0}, "c": {"m8": 3.0}}
    assert contenders(partial, ["m1", "m8", "m64"]) == ["a", "b"]  # m64: nobody timed, no winner


def test_choose_adds_what_shortens_the_geomean_and_stops_at_the_cap():
    # "middle" is the best single config (geomean), then "decode" gains the most.
    best_single = min(TIMES, key=lambda c: geomean_of([c]))
    assert best_single == "middle"
    assert choose(TIMES, W, "middle", max_configs=2) == ["middle", "decode"]
    chosen = choose(TIMES, W, "middle", max_configs=3)
    assert chosen == ["middle", "decode", "prefill"]
    assert geomean_of(chosen) < geomean_of(["middle", "decode"]) < geomean_of(["middle"])
    assert choose(TIMES, W, "middle", max_configs=1) == ["middle"]


def test_ranges_never_outnumber_max_ranges():
    """Noise at small M: winners that alternate A, B, A, B, … make one range per bump unless capped."""
    modes = {f"w{i}": i + 1 for i in range(8)}
    times = {"A": {w: (1.0 if i % 2 == 0 else 1.3) for i, w in enumerate(modes)},
             "B": {w: (1.3 if i % 2 == 0 else 1.0) for i, w in enumerate(modes)}}
    assert len(ranges(times, ["A", "B"], modes, min_gain=0.0)) == 8
    capped = ranges(times, ["A", "B"], modes, min_gain=0.0, max_ranges=3)
    assert len(capped) <= 3 and capped[-1].upper is None
    assert [r.upper for r in capped[:-1]] == sorted(r.upper for r in capped[:-1])


def test_choose_skips_additions_below_the_minimum_gain():
    near = {"a": {"x": 10.0, "y": 10.0}, "b": {"x": 9.95, "y": 10.0}}  # 0.25 % on the geomean
    assert choose(near, ["x", "y"], "a", max_configs=4, min_gain=0.02) == ["a"]
    assert choose(near, ["x", "y"], "a", max_configs=4, min_gain=0.001) == ["a", "b"]


def test_choose_needs_a_first_config_that_serves_every_workload():
    with pytest.raises(ValueError, match="not timed on every workload"):
        choose({"a": {"x": 1.0}}, ["x", "y"], "a", max_configs=2)


def test_ranges_follow_the_winners_by_m_and_end_with_a_fallback():
    rngs = ranges(TIMES, ["middle", "decode", "prefill"], M)
    assert rngs == [Range("decode", 256), Range("prefill", None)]  # 256 = √(64 · 1024): between the measured M
    assert [assigned(rngs, m) for m in (1, 64, 256, 257, 10**6)] == ["decode"] * 3 + ["prefill"] * 2


def test_ranges_merge_a_range_that_gains_less_than_min_gain():
    times = {"a": {"m1": 10.0, "m8": 10.0, "m64": 10.0}, "b": {"m1": 11.0, "m8": 9.99, "m64": 11.0}}
    modes = {"m1": 1, "m8": 8, "m64": 64}
    assert ranges(times, ["a", "b"], modes) == [Range("a", None)]  # b's 0.1 % at M=8 is not worth a range
    assert len(ranges(times, ["a", "b"], modes, min_gain=0.0, max_ranges=2)) <= 2
    assert ranges(times, ["a", "b"], modes, min_gain=0.0) == [Range("a", 2), Range("b", 22), Range("a", None)]


def test_ranges_put_equal_modes_together():
    times = {"a": {"x": 1.0, "y": 3.0}, "b": {"x": 2.0, "y": 1.0}}
    assert ranges(times, ["a", "b"], {"x": 5, "y": 5}) == [Range("b", None)]  # 2·1 < 1·3 over both


def test_a_config_that_failed_a_workload_never_serves_it():
    times = {"a": {"m1": 5.0, "m8": 5.0}, "b": {"m1": 1.0}}  # b failed at M=8
    rngs = ranges(times, ["a", "b"], {"m1": 1, "m8": 8}, min_gain=0.0)
    assert assigned(rngs, 8) == "a" and assigned(rngs, 1) == "b"
