"""Honest: adv_gemm in plain torch, return style."""
import torch


def run(A, B):
    return torch.matmul(A, B.T)
