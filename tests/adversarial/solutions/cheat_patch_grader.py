"""Cheat: replaces the grader's own timing loop (ucutlass.grader.timing.bench) in its process with one
that reports 1 ns per call. The worker bound its functions before loading candidates, and the integrity
guard reports the replacement: TAMPERED."""
import sys

import torch

timing = sys.modules.get("ucutlass.grader.timing")
if timing is not None:
    _bench = timing.bench

    def _fast(*args, **kwargs):
        out = _bench(*args, **kwargs)
        out["times_ms"] = [1e-6] * len(out["times_ms"])
        return out

    timing.bench = _fast


def run(A, B):
    return torch.matmul(A, B.T)
