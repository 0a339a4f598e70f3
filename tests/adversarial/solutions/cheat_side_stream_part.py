"""Cheat (GPU): computes the last half of the rows on a side stream and never joins it back, so CUDA events on the
current stream see half a call. Outputs are right (the grader's correctness calls synchronise the device). Either
the parent's wall clock fails it (UNTIMED_WORK) or, where the hidden work is close to what the events saw, charges
it (the latency becomes the wall clock's time per call): it gains nothing over the honest GEMM."""
import torch

DESTINATION_PASSING = True
_side = None


def run(A, B, C):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    half = A.shape[0] // 2
    _side.wait_stream(torch.cuda.current_stream())  # inputs are ready; the side half is never waited for
    torch.matmul(A[:half], B.T, out=C[:half])
    with torch.cuda.stream(_side):
        torch.matmul(A[half:], B.T, out=C[half:])
