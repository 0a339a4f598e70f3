"""Cheats: right for the first calls (the correctness trials), then returns garbage fast."""
import torch

_calls = 0


def run(A, B, bias):
    global _calls
    _calls += 1
    if _calls <= 3:
        return torch.addmm(bias, A, B.T)
    return torch.zeros(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
