"""Cheat: NaN outputs (e.g. an uninitialised accumulator): INCORRECT_NUMERICAL."""
import torch


def run(A, B):
    C = torch.matmul(A, B.T)
    C[::7, ::5] = float("nan")
    return C
