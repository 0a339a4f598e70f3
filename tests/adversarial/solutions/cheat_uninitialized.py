"""Cheat: returns an uninitialised buffer, hoping it still holds a freed output of the right answer (as
when the reference runs first in the same process, KernelBench-style). Here the reference never runs in
the candidate's process and every solution gets its own inputs: INCORRECT_NUMERICAL."""
import torch


def run(A, B):
    return torch.empty(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
