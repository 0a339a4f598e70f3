"""Honest (GPU): a Triton fp32 GEMM with IEEE fp32 products (no TF32), destination passing."""
import triton
import triton.language as tl

DESTINATION_PASSING = True


@triton.jit
def _gemm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, y, input_precision="ieee")
    tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(A, B, C):
    M, K = A.shape
    N = B.shape[0]
    _gemm[(triton.cdiv(M, 64), triton.cdiv(N, 64))](A, B, C, M, N, K, BM=64, BN=64, BK=32)
