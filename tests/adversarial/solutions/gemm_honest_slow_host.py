"""Honest, with a slow host path: 120 µs of host work before a small GEMM on the current stream (a compiled
pipeline's Python path under a busy host looks like this to the grader). Nothing runs outside the events; the
wall-clock check must not call the host time untimed work (issue 16: it did, beyond the 50 µs spin)."""
import time

import torch

DESTINATION_PASSING = True


def run(A, B, C):
    until = time.perf_counter() + 120e-6
    while time.perf_counter() < until:
        pass
    torch.matmul(A, B.T, out=C)
