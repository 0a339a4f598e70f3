"""Paths and helpers shared by the grader tests (imported by the test modules and conftest)."""

from __future__ import annotations

from pathlib import Path

from ucutlass.grader import solution_from_file

DATA = Path(__file__).resolve().parent / "data"
SOLUTIONS = DATA / "solutions"

# Small timing settings keep CI fast; timeout_s is generous for a loaded CI machine.
FAST = dict(warmup_ms=2.0, rep=5.0, timeout_s=60.0)


def solution(name: str, problem=None, **kw):
    """The SolutionRef of data/solutions/<name> (``.py`` unless a suffix is given)."""
    path = SOLUTIONS / (name if "." in name else f"{name}.py")
    return solution_from_file(path, problem, **kw)
