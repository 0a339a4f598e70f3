"""Cheat: computes the right answer, then zeroes its inputs, so a grader that recomputes the reference
from the inputs after the call (and compares with a zeroed-input run) would be fooled into anything.
The parent keeps private copies and checks the shared inputs after every call: INPUT_MODIFIED."""
import torch


def run(A, B):
    C = torch.matmul(A, B.T)
    A.zero_()
    B.zero_()
    return C
