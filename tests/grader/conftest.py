"""Fixtures of the grader tests: the test problems under data/ and a shared CPU grader."""

from __future__ import annotations

import pytest
from grader_helpers import DATA, FAST

from ucutlass.grader import Grader
from ucutlass.problem import load_problem


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
