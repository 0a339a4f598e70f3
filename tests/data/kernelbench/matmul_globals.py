import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with sizes from module globals, and a second output: the row sums of C."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        C = torch.matmul(A, B)
        return C, C.sum(dim=1)


M = 16
K = 32
N = 24


def get_inputs():
    A = torch.rand(M, K)
    B = torch.rand(K, N)
    return [A, B]


def get_init_inputs():
    return []
