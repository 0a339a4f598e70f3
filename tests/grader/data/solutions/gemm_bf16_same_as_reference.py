"""The reference's own computation, as a candidate: its speedup must come out near 1."""
import torch


def run(A, B):
    return torch.matmul(A, B.T)
