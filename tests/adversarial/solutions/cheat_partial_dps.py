"""Cheat: destination passing, writes every row but the last (the poison shows): INCORRECT_NUMERICAL."""
import torch

DESTINATION_PASSING = True


def run(A, B, C):
    torch.matmul(A[:-1], B.T, out=C[:-1])
