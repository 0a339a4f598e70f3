import torch
import torch.nn as nn


class Model(nn.Module):
    """A Linear layer followed by ReLU, then a learned scale (a bare nn.Parameter)."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
        self.relu = nn.ReLU()

    def forward(self, x):
        x = self.relu(self.linear(x))
        return x * self.scale


batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
