"""What the GPU test modules share: their ``kernels`` fixtures' build-and-load step and their tensor helpers.

tests/ is on sys.path for its own modules (as tests/shared_data.py); the GPU modules import
:func:`build_and_load`, :func:`rel_err`, :func:`randn` and :func:`poisoned` from here. Without torch, importing
this module skips the importing module (as its own ``pytest.importorskip("torch")`` would).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

from ucutlass.build import build_kernels
from ucutlass.runtime import load_kernel

torch = pytest.importorskip("torch")


def build_and_load(kernels: Sequence[Any], kernel_cache: Path) -> dict[str, Any]:
    """Compile ``kernels`` in parallel (one nvcc each) into ``kernel_cache`` and load each one, by kernel name.

    Args:
        kernels: lowered kernels (``parse_file(...).kernel()``, a problem binding's kernel, ...), any family.
        kernel_cache: the ``kernel_cache`` fixture's folder (tests/conftest.py).

    Returns:
        ``{kernel name: callable}`` as :func:`ucutlass.runtime.load_kernel` loads it (``CompiledKernel`` for a
        GEMM, the attention or grouped runtime's kernel for those families).

    Raises:
        AssertionError: a build failed; the message lists every failed build with its error and the last 2000
            characters of its nvcc log.
    """
    kernels = list(kernels)
    results = build_kernels(kernels, root=kernel_cache, timeout_s=900)
    failed = [f"{r.name}: {r.error}\n{r.log[-2000:]}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    return {k.name: load_kernel(r.so_path, k) for k, r in zip(kernels, results)}


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def randn(*shape, dtype=torch.bfloat16, std=1.0):
    return (torch.randn(*shape, device="cuda") * std).to(dtype)


def poisoned(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)
