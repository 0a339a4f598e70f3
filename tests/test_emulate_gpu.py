"""Emulation against the compiled kernels on the GPU: each kernel of a sample of tests/kernels/ runs compiled and
emulated (:mod:`ucutlass.emulate`) on the same random arguments, and every output agrees.

Run on the H200: ``pytest -m gpu tests/test_emulate_gpu.py``. The sample covers what the emulator reads
differently: column-major operands and a source, a [K, N] weight, swap AB, extra outputs stored and reduced,
blockwise FP8 scales, a grouped GEMM with per-group, per-row and scalar inputs, and causal GQA attention.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.emulate import emulate_kernel
from ucutlass.ir import DType, EpilogueInputKind, Layout, split_dim
from ucutlass.lang import parse_file

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]
KERNELS = Path(__file__).parent / "kernels"
FILES = ["src_colmajor_f16.ucut", "plain_kmajor_b.ucut", "swap_bias_gelu_n16.ucut", "evt_outputs.ucut",
         "evt_reduce_pingpong.ucut", "fp8_blockwise.ucut", "grouped_epilogue.ucut", "attn_gqa_causal.ucut"]


@pytest.fixture(scope="module")
def kernels(kernel_cache):
    """``{file stem: (kernel, compiled kernel)}``."""
    parsed = {f.removesuffix(".ucut"): parse_file(KERNELS / f).kernel() for f in FILES}
    loaded = build_and_load(list(parsed.values()), kernel_cache)
    return {stem: (k, loaded[k.name]) for stem, k in parsed.items()}


def _tensor(dims, dtype: DType, layout: Layout, sizes, output: bool):
    shape = [math.ceil(sizes[split_dim(d)[0]] / split_dim(d)[1]) for d in dims]
    torch_dtype = getattr(torch, dtype.torch_name)
    if layout is Layout.col and len(shape) == 2:
        return _tensor(tuple(reversed(dims)), dtype, Layout.row, sizes, output).t()
    if output:
        return poisoned(*shape, dtype=torch_dtype)
    x = torch.randn(*shape, device="cuda") * (len(shape) > 1 and dims[-1] == "K" and sizes["K"] ** -0.25 or 1.0)
    return x.to(torch_dtype)


def _gemm_args(kernel, sizes):
    """Random arguments by ABI name for a (grouped) GEMM with modes ``sizes``; which ones are outputs."""
    args, outputs = {}, ["d"] + [o.name for o in kernel.epilogue_outputs]
    for op in kernel.operands:
        args[op.name] = _tensor(op.dims, op.dtype, op.layout, sizes, op.name == "d")
    for s in kernel.scales:
        args[s.name] = (torch.rand(*[math.ceil(sizes[split_dim(d)[0]] / split_dim(d)[1]) for d in s.dims],
                                   device="cuda") + 0.5) if s.dims else torch.tensor([0.75], device="cuda")
    for i in kernel.epilogue_inputs:
        args[i.name] = 0.5 if i.kind is EpilogueInputKind.scalar else _tensor(i.dims, i.dtype, i.layout, sizes, False)
    for o in kernel.epilogue_outputs:
        args[o.name] = _tensor(o.dims, o.dtype, o.layout, sizes, True)
    if getattr(kernel, "groups", None) is not None:
        counts = torch.tensor([sizes["M"] // 4, 0, sizes["M"] // 2, sizes["M"] - sizes["M"] // 4 - sizes["M"] // 2])
        values = counts if kernel.groups.name == "m_sizes" else counts.cumsum(0)
        args[kernel.groups.name] = values.to(getattr(torch, kernel.groups.dtype.torch_name)).cuda()
    return args, outputs


def _attention_args(kernel):
    B, Sq, Hq, Hkv, D = 2, 256, 8, 2, kernel.head_dim
    shape = {"q": (B, Sq, Hq, D), "k": (B, Sq, Hkv, D), "v": (B, Sq, Hkv, D), "o": (B, Sq, Hq, D), "lse": (B, Hq, Sq)}
    args = {n: torch.randn(*shape[n], device="cuda").bfloat16() for n in ("q", "k", "v")}
    args["o"] = poisoned(*shape["o"])
    if kernel.lse is not None:
        args["lse"] = poisoned(*shape["lse"], dtype=torch.float32)
    return args, ["o"] + (["lse"] if kernel.lse is not None else [])


@pytest.mark.parametrize("name", [f.removesuffix(".ucut") for f in FILES])
def test_emulation_agrees_with_the_compiled_kernel(kernels, name):
    kernel, compiled = kernels[name]
    torch.manual_seed(0)
    if kernel.family == "attention":
        args, outputs = _attention_args(kernel)
    else:
        args, outputs = _gemm_args(kernel, {"M": 384, "N": 256, "K": 512, "G": 4})
    emulator = emulate_kernel(kernel)
    names = compiled.abi.ptr_names + compiled.abi.scalar_names
    assert names == emulator.abi.ptr_names + emulator.abi.scalar_names
    emulated = {n: (v.clone() if n in outputs else v) for n, v in args.items()}
    compiled.call([args[n] for n in names])
    emulator.call([emulated[n] for n in names])
    torch.cuda.synchronize()
    for n in outputs:
        assert not args[n].isnan().any(), f"{name}: the compiled kernel left {n} unwritten"
        err = rel_err(args[n], emulated[n])
        assert err < 1e-2, f"{name}: {n} differs by {err:.3g} (relative, Frobenius)"
