"""Paths, helpers and fixtures shared by the grader tests.

The fixtures live here rather than in a conftest.py, and the test modules import them: a second module
named ``conftest`` would shadow tests/conftest.py for tests that import from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ucutlass.grader import Grader, solution_from_file
from ucutlass.problem import load_problem

DATA = Path(__file__).resolve().parent / "data"
SOLUTIONS = DATA / "solutions"

# Small timing settings keep CI fast; timeout_s is generous for a loaded CI machine.
FAST = dict(warmup_ms=2.0, rep=5.0, timeout_s=60.0)


def solution(name: str, problem=None, **kw):
    """The SolutionRef of data/solutions/<name> (``.py`` unless a suffix is given)."""
    path = SOLUTIONS / (name if "." in name else f"{name}.py")
    return solution_from_file(path, problem, **kw)


@pytest.fixture(scope="session")
def gemm_problem():
    return load_problem(DATA / "gemm_bias")


@pytest.fixture(scope="session")
def rowstats_problem():
    return load_problem(DATA / "rowstats")


@pytest.fixture(scope="module")
def grader(gemm_problem):
    """One CPU grader for a whole test module: its workers persist across solutions, as in the tuner."""
    with Grader(gemm_problem, device="cpu", **FAST) as g:
        yield g
