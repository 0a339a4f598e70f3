"""Cheat: only handles the listed shapes (anything else gets zeros, as a kernel with hard-coded tile
counts would). The grader adds a trial on a shape no workload lists: INCORRECT_NUMERICAL."""
import torch

_LISTED = {16, 128, 4096}


def run(A, B):
    if A.shape[0] in _LISTED:
        return torch.matmul(A, B.T)
    return torch.zeros(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
