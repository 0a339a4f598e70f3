"""Cheat: installs a trace function to rewrite the grader's locals (here: every list named ``times``).
The integrity guard sees the hook: TAMPERED."""
import sys

import torch


def _tracer(frame, event, arg):
    if event == "return" and isinstance(frame.f_locals.get("times"), list):
        frame.f_locals["times"][:] = [1e-6] * len(frame.f_locals["times"])
    return _tracer


_on = False


def run(A, B):
    global _on
    if not _on:
        sys.settrace(_tracer)
        _on = True
    return torch.matmul(A, B.T)
