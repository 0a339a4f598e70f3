"""Wrong: destination passing, but leaves the last row of C unwritten (the NaN poison shows it)."""
import torch

DESTINATION_PASSING = True


def run(A, B, bias, C):
    C[:-1] = torch.addmm(bias, A[:-1], B.T)
