"""Cheat: computes the float32 GEMM in bfloat16 (tensor cores on a GPU), well within the 1e-2 tolerance
but ~10^4 times less accurate than the float32 reference: INCORRECT_ACCURACY."""
import torch


def run(A, B):
    return torch.matmul(A.bfloat16(), B.bfloat16().T).float()
