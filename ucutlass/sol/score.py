"""SOL-ExecBench's SOL score.

``S = (T_b − T_SOL) / ((T_k − T_SOL) + (T_b − T_SOL))``: 1 at the speed of light, 0.5 at the baseline T_b
(the reference's time in the same run), tending to 0 as the kernel gets slower.
"""

from __future__ import annotations

import math


def sol_score(t_kernel_ms: float, t_baseline_ms: float, t_sol_ms: float) -> float:
    """The SOL score of a kernel time, given the baseline time and T_SOL (all in ms).

    A time below T_SOL is physically impossible (a wrong bound, a wrong result, or a broken timer): it is
    never rewarded. The score is then NaN, and callers must flag the trial (``math.isnan``) and re-verify it.

    Returns:
        1.0 when ``t_kernel_ms == t_sol_ms``; the formula otherwise (0.5 at the baseline, 0.0 when the
        baseline sits exactly at T_SOL and the kernel is slower);
        NaN when ``t_kernel_ms < t_sol_ms`` (impossible kernel time) or ``t_baseline_ms < t_sol_ms``
        (impossible baseline: the bound is wrong for this workload).

    Raises:
        ValueError: a time that is not a positive finite number.

    Example:
        >>> sol_score(2.0, 3.0, 1.0)
        0.6666666666666666
    """
    for name, t in (("t_kernel_ms", t_kernel_ms), ("t_baseline_ms", t_baseline_ms), ("t_sol_ms", t_sol_ms)):
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise ValueError(f"{name} must be a positive finite time in ms, got {t!r}")
    if t_kernel_ms < t_sol_ms or t_baseline_ms < t_sol_ms:
        return math.nan
    if t_kernel_ms == t_sol_ms:
        return 1.0
    gap_b = t_baseline_ms - t_sol_ms
    return gap_b / ((t_kernel_ms - t_sol_ms) + gap_b)


def is_impossible(t_kernel_ms: float, t_sol_ms: float) -> bool:
    """True when a measured time is below T_SOL: flag it, re-verify it, never reward it."""
    return t_kernel_ms < t_sol_ms


__all__ = ["sol_score", "is_impossible"]
