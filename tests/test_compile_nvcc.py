"""Real nvcc compiles of generated CUTLASS SM90 and SM100 GEMMs (1–3 minutes each on 2 cores).

Each run uses a fresh temporary cache so these are real compiles, never cache hits. The kernels in
tests/kernels/ cover every EVT leaf kind (AccFetch, SrcFetch, RowBroadcast, ColBroadcast, AuxLoad,
ScalarBroadcast), the three sm90 schedules and both sm100 ones (1SM, 2SM), both tile schedulers,
column-major operands and explicit stages, and two swapped (swap_ab) kernels on narrow tiles: 128x16 with a bias
(a column broadcast once swapped) and gelu, 128x32 stream-K with a residual c, an extra output and both reductions;
tests/test_runtime_gpu.py and tests/test_swap_ab_gpu.py run the sm90 files on the H200 (the sm100 ones compile for
sm_100a and cannot run there).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from ucutlass.build import build_kernels
from ucutlass.lang import parse_file
from ucutlass.runtime import CompiledKernel

KERNELS = Path(__file__).parent / "kernels"
CI_KERNELS = ["evt_full.ucut", "src_colmajor_f16.ucut", "stream_k.ucut", "sm100_bias_gelu.ucut",
              "sm100_2sm_residual.ucut", "swap_bias_gelu_n16.ucut", "swap_residual_outputs_stream_k.ucut"]

pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cache = tmp_path_factory.mktemp("kernel-cache")
    kernels = [parse_file(KERNELS / name).kernel() for name in CI_KERNELS]
    results = build_kernels(kernels, jobs=2, root=cache, timeout_s=900)
    return dict(zip(CI_KERNELS, zip(kernels, results)))


@pytest.mark.parametrize("name", CI_KERNELS)
def test_generated_kernel_compiles_with_nvcc(compiled, name):
    kernel, result = compiled[name]
    assert result.ok, f"nvcc failed for {name}:\n{result.log[-3000:]}"
    assert not result.cached  # a fresh cache: this was a real compile
    lib = ctypes.CDLL(str(result.so_path))
    for symbol in ("ucut_run", "ucut_workspace_size", "ucut_can_implement", "ucut_info", "ucut_last_error"):
        assert hasattr(lib, symbol)
    # The runtime loads it and checks that it was built from this kernel (no CUDA call is made).
    loaded = CompiledKernel(result.so_path, kernel)
    assert loaded.info["config"] == kernel.build_config().config_name()  # compiled under ir.BUILD_NAME
    assert loaded.info["ptrs"] == list(loaded.abi.ptr_names)
    meta = json.loads((result.entry / "meta.json").read_text())
    assert meta["ok"] and meta["config"] == kernel.build_config().config_name()
    gencode = {"sm90": "arch=compute_90a,code=sm_90a", "sm100": "arch=compute_100a,code=sm_100a"}
    assert loaded.info["target"] == meta["target"] == kernel.target.value
    assert gencode[kernel.target.value] in meta["command"]


def test_so_built_from_another_kernel_is_refused(compiled):
    from ucutlass.errors import KernelRuntimeError

    (_, result), (other, _) = compiled["evt_full.ucut"], compiled["stream_k.ucut"]
    with pytest.raises(KernelRuntimeError, match="built from another kernel"):
        CompiledKernel(result.so_path, other)


def test_swapped_builds_take_their_extents_as_n_m_k(compiled):
    for name in ("swap_bias_gelu_n16.ucut", "swap_residual_outputs_stream_k.ucut"):
        kernel, result = compiled[name]
        loaded = CompiledKernel(result.so_path, kernel)
        assert loaded.info["swap_ab"] is True
        assert loaded.info["extents"] == list(loaded.abi.extents) == ["N", "M", "K"]
    kernel, result = compiled["stream_k.ucut"]
    assert CompiledKernel(result.so_path, kernel).info["swap_ab"] is False
