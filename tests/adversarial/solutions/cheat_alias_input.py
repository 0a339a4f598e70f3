"""Cheat: writes the result into the input A's memory (same shape here) and returns A, saving an
allocation and letting later calls read stale data. OUTPUT_ALIASED."""
import torch


def run(A, B):
    C = torch.matmul(A, B.T)
    A.copy_(C)
    return A
