"""Raises when called."""


def run(A, B, bias):
    raise ValueError("boom: this solution always fails")
