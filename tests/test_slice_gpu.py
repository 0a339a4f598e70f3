"""Sliced input bindings and batch strides that are not packed, on the GPU, against fp64 torch.

Run on the H200: ``pytest -m gpu tests/test_slice_gpu.py``. Two kernels are compiled first, in parallel: the LM
head of SOL-ExecBench L1_003 in small (``a : bf16[B, M, K] row <- hidden_states[:, -keep:]``, one weight for every
batch, K-major), bound to a problem whose call slices the input, and the same GEMM with an N-major shared b.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from ucutlass.lang import parse

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

LM_HEAD = """
kernel lm_head_slice : gemm {
  a : bf16[B, M, K] row <- hidden_states[:, -keep:]
  b : bf16[N, K] row <- weight
  d : f32[B, M, N] row -> logits
  tile = 64x128x64   schedule = pingpong
}
"""

N_MAJOR = """
kernel shared_b_n_major : gemm {
  a : bf16[B, M, K] row   b : bf16[K, N] row   d : f32[B, M, N] row
  tile = 128x128x64   schedule = cooperative   cluster = 2x1x1
}
"""


def _problem(folder: Path):
    from ucutlass.problem import load_problem

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps({
        "name": "lm_small", "description": "LM head on the last keep positions",
        "axes": {"batch": {"type": "var"}, "seq": {"type": "var"}, "keep": {"type": "var"},
                 "hidden": {"type": "const", "value": 512}, "vocab": {"type": "const", "value": 1000}},
        "inputs": {"hidden_states": {"shape": ["batch", "seq", "hidden"], "dtype": "bfloat16"},
                   "weight": {"shape": ["vocab", "hidden"], "dtype": "bfloat16"}},
        "outputs": {"logits": {"shape": ["batch", "keep", "vocab"], "dtype": "float32"}},
        "reference": "import torch\ndef run(hidden_states, weight):\n    raise NotImplementedError\n"}))
    rows = [{"batch": 3, "seq": 200, "keep": 37}, {"batch": 2, "seq": 64, "keep": 64}]
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"w{i}", "axes": a, "inputs": {}}) + "\n" for i, a in enumerate(rows)))
    return load_problem(folder)


@pytest.fixture(scope="module")
def built(kernel_cache, tmp_path_factory):
    from ucutlass.bind import bind

    binding = bind(parse(LM_HEAD).kernel(), _problem(tmp_path_factory.mktemp("problem") / "lm_small"))
    kernels = build_and_load([binding.kernel, parse(N_MAJOR).kernel()], kernel_cache)
    return kernels, binding


def _reference(h, w, keep):
    return h[:, h.shape[1] - keep:].double() @ w.double().T


@pytest.mark.parametrize("batch, seq, keep", [
    (3, 200, 37),  # batches 200·512 elements apart, 37 rows each: ragged against the 64-row tile
    (2, 64, 64),  # keep = seq: packed batches, as before
    (1, 300, 1),  # one row of one batch
    (5, 9, 0),  # nothing to compute
])
def test_bound_callable_slices_the_input_and_matches_torch(built, batch, seq, keep):
    kernels, binding = built
    run = binding.callable(kernels["lm_head_slice"])
    h, w = randn(batch, seq, 512), randn(1000, 512, std=0.05)
    logits = poisoned(batch, keep, 1000, dtype=torch.float32)
    before = h.clone()
    run(h, w, logits)
    torch.cuda.synchronize()
    assert torch.equal(h, before)  # a view: the input is untouched and not copied
    if keep:
        assert rel_err(logits, _reference(h, w, keep)) < 1e-5


def test_an_output_whose_batches_are_not_packed(built):
    """d a view of a longer buffer: its batches are seq·N apart; the rows after each batch's M stay untouched."""
    kernels, _ = built
    h, w = randn(4, 96, 512), randn(1000, 512, std=0.05)
    buffer = poisoned(4, 96, 1000, dtype=torch.float32)
    kernels["lm_head_slice"](a=h[:, 96 - 40:], b=w, d=buffer[:, :40])
    torch.cuda.synchronize()
    assert rel_err(buffer[:, :40], _reference(h, w, 40)) < 1e-5
    assert torch.isnan(buffer[:, 40:]).all()


def test_a_shared_n_major_b(built):
    kernels, _ = built
    h, w = randn(3, 150, 512), randn(512, 1000, std=0.05)  # b : [K, N] row, one for every batch
    out = poisoned(3, 100, 1000, dtype=torch.float32)
    kernels["shared_b_n_major"](a=h[:, 50:], b=w, d=out)
    torch.cuda.synchronize()
    assert rel_err(out, h[:, 50:].double() @ w.double()) < 1e-5
