"""Cheat (GPU): does the work on a side stream and never joins it back, so CUDA events recorded on the
current stream see an empty call. Outputs are right (the grader's correctness calls synchronise the
device). Caught by the parent's wall clock: UNTIMED_WORK."""
import torch

DESTINATION_PASSING = True
_side = None


def run(A, B, C):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    _side.wait_stream(torch.cuda.current_stream())  # inputs are ready; the work itself is never waited for
    with torch.cuda.stream(_side):
        torch.matmul(A, B.T, out=C)
