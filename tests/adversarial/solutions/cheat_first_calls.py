"""Cheat: correct for the first calls (3 correctness trials and the unlisted shape), then returns zeros
fast. A random timed call per input set is checked: INCORRECT_NUMERICAL."""
import torch

_calls = 0


def run(A, B):
    global _calls
    _calls += 1
    if _calls <= 4:
        return torch.matmul(A, B.T)
    return torch.zeros(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
