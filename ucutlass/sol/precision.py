"""The vocabulary of SOL precisions: which tensor-core rate a value or a matmul is priced at.

A *precision* names a class of tensor-core throughput, not a storage type: ``fp4`` (NVFP4/MXFP4),
``fp8`` (E4M3/E5M2), ``fp16``, ``bf16``, ``tf32`` (fp32 operands on the tensor cores), ``fp64`` and
``int8``. Values carry the precision of their *information*: an fp8 tensor converted to fp32 and
multiplied by a block scale still holds fp8 values (the dequantize-then-matmul pattern of quantized
references), so the matmul that consumes it is priced at the fp8 rate.
"""

from __future__ import annotations

#: Precisions from narrowest to widest information content (int8 stands apart: see :func:`widest`).
ORDER = ("fp4", "fp8", "fp16", "bf16", "fp32", "fp64")

#: The precision a matmul is priced at, given the widest precision of its operands.
MATMUL_PRECISION = {"fp4": "fp4", "fp8": "fp8", "fp16": "fp16", "bf16": "bf16", "fp32": "tf32",
                    "fp64": "fp64", "int8": "int8"}

#: When a GPU has no rate for a precision, the next precision whose rate bounds it from below
#: (a Hopper GPU runs an fp4 GEMM no faster than an fp8 one; fp16 and bf16 run at one rate).
FALLBACK = {"fp4": "fp8", "fp8": "bf16", "fp16": "bf16", "bf16": "fp16", "int8": "fp8"}

_DTYPE_PRECISION = {
    "float4_e2m1fn_x2": "fp4",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8",
    "float8_e8m0fnu": "fp8",
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
    "int8": "int8", "uint8": "int8",
}


def dtype_precision(dtype) -> str | None:
    """The precision of a torch dtype (``torch.bfloat16`` → ``"bf16"``); None for other integers and bool."""
    return _DTYPE_PRECISION.get(str(dtype).replace("torch.", ""))


def widest(*precisions: str | None) -> str | None:
    """The widest of some precisions (None entries ignored); ``int8`` only when nothing else is given."""
    floats = [p for p in precisions if p in ORDER]
    if floats:
        return max(floats, key=ORDER.index)
    return "int8" if "int8" in precisions else None


def narrowest(*precisions: str | None) -> str | None:
    """The narrowest of some floating precisions (None and int8 entries ignored)."""
    floats = [p for p in precisions if p in ORDER]
    return min(floats, key=ORDER.index) if floats else None


def matmul_precision(a: str | None, b: str | None) -> str:
    """The precision a matmul with operands of precision ``a`` and ``b`` runs at (the wider one).

    fp32 operands map to ``tf32``, the tensor-core path that takes fp32 inputs; whether a hardware
    entry prices ``tf32`` at the TF32 rate or at the 16-bit rate is the entry's choice
    (:attr:`ucutlass.sol.hardware.Hardware.tf32_priced_as`).
    """
    return MATMUL_PRECISION.get(widest(a, b) or "fp32", "tf32")
