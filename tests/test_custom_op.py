"""A program as a torch custom op (issue 16, item 2): a model under ``torch.compile(fullgraph=True)`` calls it
without a graph break (fullgraph raises on one), AOTAutograd runs its fake implementation for the shapes, and the
result is the program's. CPU: emulated programs; GPU: the compiled pipeline."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from ucutlass.errors import KernelRuntimeError
from ucutlass.problem import find_problem
from ucutlass.runtime.custom_op import axes_of_inputs
from ucutlass.solution import program_op

REPO = Path(__file__).resolve().parents[1]
PROBLEM = "o_proj_residual_llama3_1_8b"  # attn_output [B, S, 4096], o_proj_weight [4096, 4096], residual → output
_names = (f"test_op_{i}" for i in itertools.count())  # an op name is registered once per process

KERNEL = """
kernel o_proj : gemm {
  a : bf16[M, K] row <- attn_output
  b : bf16[N, K] row <- o_proj_weight
  d : bf16[M, N] row -> output
  tile = 128x128x64   schedule = cooperative
  epilogue { residual : bf16[M, N] row <- residual   d = acc + residual }
}
"""


class Block(torch.nn.Module):
    """Torch before and after the op, so the op sits inside one compiled graph."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, w, r):
        return self.op(x * 2, w, r).float().relu()


def inputs(tokens=8):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, tokens, 4096, generator=g).bfloat16()
    w = (torch.randn(4096, 4096, generator=g) / 64).bfloat16()
    r = torch.randn(1, tokens, 4096, generator=g).bfloat16()
    return x, w, r


def expected(x, w, r):
    return (torch.nn.functional.linear((x * 2).float(), w.float()) + r.float()).relu()


@pytest.mark.parametrize("source", ["pipeline", "kernel"])
def test_a_program_op_runs_inside_one_compiled_graph(source, tmp_path):
    problem = find_problem(PROBLEM)
    path = REPO / "examples/pipeline_o_proj_residual.ucut"
    if source == "kernel":
        path = tmp_path / "o_proj.ucut"
        path.write_text(KERNEL)
    op = program_op(str(path), problem, next(_names), emulate=True)
    model = torch.compile(Block(op), fullgraph=True, backend="aot_eager")  # a graph break would raise here
    for tokens in (8, 24):  # a second shape: the fake implementation gives the new output shape
        x, w, r = inputs(tokens)
        y = model(x, w, r)
        assert y.shape == (1, tokens, 4096)
        torch.testing.assert_close(y, expected(x, w, r), atol=0.1, rtol=0.02)


def test_the_op_is_reachable_through_torch_ops_and_checks_its_shapes():
    problem = find_problem(PROBLEM)
    name = next(_names)
    program_op(str(REPO / "examples/pipeline_o_proj_residual.ucut"), problem, name, emulate=True)
    x, w, r = inputs()
    out = getattr(torch.ops.ucutlass, name)(x, w, r)
    torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()) + r.float(),
                               atol=0.1, rtol=0.02)
    with pytest.raises(KernelRuntimeError, match="axis seq_len is 8 in one input and 9 in residual"):
        axes_of_inputs(problem, {"attn_output": x, "o_proj_weight": w, "residual": torch.zeros(1, 9, 4096)})
    with pytest.raises(KernelRuntimeError, match="axis hidden_size is 4096 in the definition, 1024"):
        axes_of_inputs(problem, {"attn_output": x, "o_proj_weight": w[:1024], "residual": r[..., :1024]})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_compiled_pipeline_as_an_op_matches_its_emulation(kernel_cache, monkeypatch):
    monkeypatch.setenv("UCUTLASS_CACHE_DIR", str(kernel_cache))
    problem = find_problem(PROBLEM)
    path = str(REPO / "examples/pipeline_o_proj_residual.ucut")
    compiled = torch.compile(Block(program_op(path, problem, next(_names))), fullgraph=True)
    emulated = program_op(path, problem, next(_names), emulate=True)
    x, w, r = (t.cuda() for t in inputs(40))
    torch.testing.assert_close(compiled(x, w, r), Block(emulated)(x, w, r), atol=0.1, rtol=0.02)
