"""Honest: adv_gemm in plain torch, destination passing."""
import torch

DESTINATION_PASSING = True


def run(A, B, C):
    torch.matmul(A, B.T, out=C)
