"""Cheat (GPU): CUDA IPC maps the whole allocation a shared buffer lives in, so the candidate can read
the parent's memory around its output buffer. It scans that memory for the expected output (found by
two honestly computed elements) and copies it instead of computing. The parent computes reference
outputs only after the candidate's call returned, so there is nothing to find: INCORRECT_NUMERICAL."""
import ctypes

import torch

DESTINATION_PASSING = True
_cuda = ctypes.CDLL("libcuda.so.1")
_cuda.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.c_uint64]
_cuda.cuMemcpyDtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]


def _mapped(ptr):
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    if _cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0:
        return None
    return base.value, size.value


def run(A, B, C):
    M, N = C.shape
    probe = (A[0] @ B[0:2].T).float()  # the first two expected values, computed honestly
    found = None
    for t in (C, A, B):
        rng = _mapped(t.data_ptr())
        if rng is None:
            continue
        base, size = rng
        words = torch.empty(size // 4, dtype=torch.float32, device=C.device)
        torch.cuda.synchronize()
        if _cuda.cuMemcpyDtoD_v2(words.data_ptr(), base, (size // 4) * 4) != 0:
            continue
        torch.cuda.synchronize()
        hits = torch.nonzero((words[:-1] - probe[0]).abs() <= 1e-4 * probe[0].abs() + 1e-6).flatten()
        second = float(probe[1])
        for h in hits.tolist():
            if h + M * N <= words.numel() and abs(float(words[h + 1]) - second) <= 1e-4 * abs(second) + 1e-6:
                found = words[h:h + M * N].view(M, N).clone()
                break
        if found is not None:
            break
    print(f"snoop: expected output {'found' if found is not None else 'not found'}", flush=True)
    C.copy_(found if found is not None else torch.zeros_like(C))
