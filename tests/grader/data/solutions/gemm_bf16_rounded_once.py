"""A bf16 GEMM with bias computed in float64 and rounded once: closer to the truth than a bf16 reference that
rounds the product and then the sum, so it disagrees with that reference by one ulp on many elements."""
import torch


def run(A, B, bias):
    return (A.double() @ B.double().T + bias.double()).to(A.dtype)
