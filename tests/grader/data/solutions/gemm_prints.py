"""Honest, but prints (the output lands in the result's log)."""
import torch


def run(A, B, bias):
    print("hello from the candidate", flush=True)
    return torch.addmm(bias, A, B.T)
