"""Honest: returns a dict by output name."""
import torch


def run(x):
    return {"idx": torch.argmax(x, dim=1), "y": x + x}
