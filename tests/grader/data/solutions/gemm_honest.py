"""Honest return-style solution of gemm_bias."""
import torch


def run(A, B, bias):
    return torch.addmm(bias, A, B.T)
