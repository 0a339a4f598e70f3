"""Cheat: skips the last row when it is less than 1% of the output (zeros there), inside the 99% matched
ratio of the tolerance. The accuracy check's sparse test finds it: INCORRECT_ACCURACY (or
INCORRECT_NUMERICAL on a shape where one row is more than 1%)."""
import torch


def run(A, B):
    C = torch.zeros(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device)
    C[:-1] = torch.matmul(A[:-1], B.T)
    return C
