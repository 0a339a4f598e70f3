"""Cheat: caches outputs by the inputs' addresses, so repeated calls on the rotated timing sets cost
nothing. The grader gives every timed call fresh input contents: stale outputs fail the check of a random
timed call (or an earlier trial that reuses a freed address): INCORRECT_NUMERICAL."""
import torch

_cache = {}


def run(A, B):
    key = (A.data_ptr(), B.data_ptr(), tuple(A.shape))
    if key not in _cache:
        _cache[key] = torch.matmul(A, B.T)
    return _cache[key].clone()
