"""Convolutions (``kernel NAME : conv``) on the GPU: the compiled kernels against torch's conv in fp64 — 1-D (the
Whisper conv2 shapes, stride 2, bias + GELU), 2-D (stride 2, bias + SiLU + a residual c, cluster 2x1x1), 3-D (padding
and dilation 2, f16 in, f32 out), per-channel sum and max over the pixels — the launcher's argument checks, and an sm100 conv that compiles and loads (it runs
on a B200 only).

Run on the H200: ``pytest -m gpu tests/test_conv_gpu.py`` (five kernels of tests/kernels/conv*.ucut compile first, in
parallel, unless scripts/device_gpu_tests.sh built them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.errors import KernelRuntimeError
from ucutlass.lang import parse_file

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ("conv1d_bias_gelu.ucut", "conv2d_residual_silu.ucut", "conv3d_f16_f32out.ucut",
         "conv2d_sm100_2sm.ucut")


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    return build_and_load([parse_file(KERNELS / name).kernel() for name in FILES], kernel_cache)


@pytest.mark.parametrize("batch, channels", [(1, 512), (2, 1280), (3, 80)])
def test_conv1d_stride2_bias_gelu(kernels, batch, channels):
    """Whisper's conv2 (base: 512 channels, large-v3: 1280) and an 80-channel one (the mel bins), 3000 frames."""
    x = randn(batch, 3000, channels)
    w, bias = randn(channels, 3, channels, std=(3 * channels) ** -0.5), randn(channels)
    out = poisoned(batch, 1500, channels)
    kernels["conv1d_bias_gelu"](a=x, b=w, d=out, bias=bias)
    ref = F.gelu(F.conv1d(x.double().transpose(1, 2), w.double().permute(0, 2, 1), bias.double(), stride=2,
                          padding=1)).transpose(1, 2)
    assert rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("batch, size, channels, out_channels", [(4, 56, 64, 128), (1, 17, 256, 64)])
def test_conv2d_stride2_residual(kernels, batch, size, channels, out_channels):
    """A 3x3 stride-2 conv with bias, SiLU and a residual c; 17x17 leaves a partial last tile."""
    q = (size + 2 - 3) // 2 + 1
    x, w = randn(batch, size, size, channels), randn(out_channels, 3, 3, channels, std=(9 * channels) ** -0.5)
    bias, res = randn(out_channels), randn(batch, q, q, out_channels)
    out = poisoned(batch, q, q, out_channels)
    kernels["conv2d_residual_silu"](a=x, b=w, c=res, d=out, bias=bias)
    ref = F.silu(F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), bias.double(), stride=2,
                          padding=1)).permute(0, 2, 3, 1) + res.double()
    assert rel_err(out, ref) < 1e-2


def test_conv3d_dilated_f32_out(kernels):
    x, w = randn(2, 8, 16, 16, 32, dtype=torch.float16), randn(64, 3, 3, 3, 32, dtype=torch.float16, std=0.1)
    out = poisoned(2, 8, 16, 16, 64, dtype=torch.float32)
    kernels["conv3d_f16_f32out"](a=x, b=w, d=out)
    ref = F.conv3d(x.double().movedim(-1, 1), w.double().movedim(-1, 1), padding=2, dilation=2).movedim(1, -1)
    assert rel_err(out, ref) < 1e-3


def test_argument_errors_name_the_operand(kernels):
    conv = kernels["conv1d_bias_gelu"]
    x, w, bias = randn(1, 3000, 512), randn(512, 3, 512), randn(512)
    with pytest.raises(KernelRuntimeError, match="Q = 1499"):  # not what stride 2 and padding 1 give
        conv(a=x, b=w, d=poisoned(1, 1499, 512), bias=bias)
    with pytest.raises(KernelRuntimeError, match="C = 256"):  # a filter over other channels
        conv(a=x, b=randn(512, 3, 256), d=poisoned(1, 1500, 512), bias=bias)
    with pytest.raises(KernelRuntimeError, match="contiguous"):
        conv(a=randn(1, 512, 3000).transpose(1, 2), b=w, d=poisoned(1, 1500, 512), bias=bias)
    with pytest.raises(KernelRuntimeError, match="cannot run"):  # CUTLASS's can_implement: 500 bf16 channels
        conv(a=randn(1, 3000, 500), b=randn(512, 3, 500), d=poisoned(1, 1500, 512), bias=bias)


def test_sm100_conv_compiles_and_is_refused_on_this_gpu(kernels):
    conv = kernels["conv2d_sm100_2sm"]
    assert conv.info["target"] == "sm100"  # sm_100a: a B200 runs it
    if torch.cuda.get_device_capability() == (10, 0):
        pytest.skip("a B200 runs sm100 kernels")
    d = poisoned(2, 8, 8, 128)
    with pytest.raises(KernelRuntimeError, match=r"kernel built for sm100"):
        conv(a=randn(2, 16, 16, 64), b=randn(128, 3, 3, 64), d=d, bias=randn(128))
    assert d.isnan().all()  # nothing was written
