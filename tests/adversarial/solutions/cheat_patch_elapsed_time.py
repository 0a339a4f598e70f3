"""Cheat: at its first call, replaces torch.cuda.Event.elapsed_time so every timed call reports 1 ns.
The grader reads events through the C base class it bound at start-up (the patch changes nothing) and the
integrity guard reports it: TAMPERED. (torch.cuda.Event exists in CPU builds too, so this runs in CI.)"""
import torch

_patched = False


def run(A, B):
    global _patched
    if not _patched:
        torch.cuda.Event.elapsed_time = lambda self, end_event: 1e-6
        _patched = True
    return torch.matmul(A, B.T)
