"""GPU: a Triton kernel stores 4 TB past the output: an illegal memory access (a sticky CUDA error)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _poke(ptr, offset, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(ptr + offset + i, tl.zeros([BLOCK], dtype=tl.float32), mask=i < n)


def run(A, B, bias):
    C = torch.empty(A.shape[0], B.shape[0], device=A.device, dtype=A.dtype)
    _poke[(1,)](C, 1 << 40, 16, BLOCK=16)
    torch.cuda.synchronize()
    return C
