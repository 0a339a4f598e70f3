"""Honest destination-passing solution of gemm_bias: writes C in place."""
import torch

DESTINATION_PASSING = True


def run(A, B, bias, C):
    torch.addmm(bias, A, B.T, out=C)
