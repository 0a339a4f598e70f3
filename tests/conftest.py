"""Shared fixtures. GPU tests carry the ``gpu`` marker and skip without CUDA; nvcc tests skip without nvcc;
``full_size`` tests (an emulated grade of a real problem at full size: 2-20 minutes on 2 cores, past CI's share) run
only with ``UCUTLASS_FULL_SIZE_TESTS=1``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from shared_data import SHARED_SOL_EXECBENCH  # tests/ is on sys.path for its own modules

REPO = Path(__file__).resolve().parents[1]

# tests/gpu_build.py holds the GPU modules' shared build-and-load step: show its failed asserts as in a test module
pytest.register_assert_rewrite("gpu_build")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    has_cuda = _cuda_available()
    has_nvcc = bool(os.environ.get("CUDACXX") or shutil.which("nvcc") or
                    (os.environ.get("CUDA_HOME") and Path(os.environ["CUDA_HOME"], "bin", "nvcc").exists()))
    full_size = os.environ.get("UCUTLASS_FULL_SIZE_TESTS") == "1"
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)"))
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(pytest.mark.skip(reason="needs nvcc"))
        if "full_size" in item.keywords and not full_size:
            item.add_marker(pytest.mark.skip(reason="a full-size emulated grade (minutes): UCUTLASS_FULL_SIZE_TESTS=1"))


@pytest.fixture(scope="session")
def sol_execbench_dir() -> Path:
    """../shared/sol-execbench (real SOL-ExecBench problems); skips when absent."""
    if not SHARED_SOL_EXECBENCH.is_dir():
        pytest.skip(f"{SHARED_SOL_EXECBENCH} not present")
    return SHARED_SOL_EXECBENCH


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory) -> Path:
    """Where the GPU tests build their kernels: a fresh temporary cache, or ``$UCUTLASS_TEST_KERNEL_CACHE``.

    The device scripts (scripts/device_gpu_tests.sh) pre-build every tests/kernels file there in one
    parallel nvcc round, so the GPU modules do not each wait for a round of their own. The compile tests
    (marker ``nvcc``) never use it: they always build in a fresh cache.
    """
    given = os.environ.get("UCUTLASS_TEST_KERNEL_CACHE")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("kernel-cache")
