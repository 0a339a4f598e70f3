"""GPU: an out-of-bounds gather trips a device-side assert (a sticky CUDA error)."""
import torch


def run(A, B, bias):
    idx = torch.tensor([1 << 30], device=A.device)
    x = A.reshape(-1)[idx]
    torch.cuda.synchronize()
    return x
