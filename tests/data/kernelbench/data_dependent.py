import torch
import torch.nn as nn


class Model(nn.Module):
    """Control flow on a tensor's value: torch.fx cannot trace it (the import must say so)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        if x.sum() > 0:
            return torch.relu(x)
        return x


batch_size = 4
dim = 8


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
