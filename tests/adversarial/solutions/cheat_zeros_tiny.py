"""Cheat: writes zeros wherever the output is smaller than the absolute tolerance (skipping that work
would pass the 1e-2 tolerance). Structured inputs make whole rows tiny, and the ground-truth accuracy
check compares errors relative to each row's scale: INCORRECT_ACCURACY."""
import torch


def run(A, B):
    C = torch.matmul(A, B.T)
    return torch.where(C.abs() < 1e-2, torch.zeros_like(C), C)
