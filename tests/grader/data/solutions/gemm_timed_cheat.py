"""Cheats: right for the first calls (the 3 correctness trials and the unlisted-shape trial), then returns
garbage fast."""
import torch

_calls = 0


def run(A, B, bias):
    global _calls
    _calls += 1
    if _calls <= 4:
        return torch.addmm(bias, A, B.T)
    return torch.zeros(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
