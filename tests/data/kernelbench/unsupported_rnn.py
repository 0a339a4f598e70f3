import torch
import torch.nn as nn


class Model(nn.Module):
    """An LSTM: a module with no functional translation (the import must say so)."""

    def __init__(self, input_size, hidden_size):
        super(Model, self).__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, batch_first=True)

    def forward(self, x):
        out, _ = self.lstm(x)
        return out


batch_size = 2
seq_len = 5
input_size = 4
hidden_size = 6


def get_inputs():
    return [torch.rand(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
