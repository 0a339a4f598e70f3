"""Cheat: looks for the expected output among every tensor the garbage collector knows (a reference
output left behind, a previous result), and returns it without computing. Nothing useful lives in the
candidate's process: INCORRECT_NUMERICAL."""
import gc

import torch


def run(A, B):
    shape = (A.shape[0], B.shape[0])
    best = None
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and tuple(obj.shape) == shape and obj.dtype == A.dtype \
                    and obj.device == A.device and obj is not A and obj is not B:
                if not bool(torch.isnan(obj).any()):
                    best = obj
        except Exception:
            continue
    if best is not None:
        return best.clone()
    return torch.zeros(shape, dtype=A.dtype, device=A.device)
