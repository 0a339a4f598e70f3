"""Honest: returns (y, idx) as a tuple."""
import torch


def run(x):
    return x * 2.0, torch.argmax(x, dim=1)
