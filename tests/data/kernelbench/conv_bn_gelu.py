import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d (stride 2, padding 1), BatchNorm2d in training mode, GELU, then a clamp and a division."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, divisor):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bn = nn.BatchNorm2d(out_channels)
        self.divisor = divisor

    def forward(self, x):
        x = self.bn(self.conv(x))
        x = F.gelu(x)
        x = torch.clamp(x, min=-0.5)
        return x / self.divisor


batch_size = 2
in_channels = 3
out_channels = 8
height = width = 12
kernel_size = 3
stride = 2
padding = 1
divisor = 2.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, divisor]
