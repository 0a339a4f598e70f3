"""``ucutlass init`` fuses an activation after a plain gemm into its epilogue, however the reference spells it
(ucutlass/init/epilogues.py), and a gated MLP's multiply into the other gemm's epilogue (``d = cast(acc, T) * c``).
Graphs from make_fx on fake tensors (CPU, a second or two)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from ucutlass.init import check_program, init_program
from ucutlass.init.epilogues import find_activation
from ucutlass.problem import find_problem

DATA = Path(__file__).resolve().parent / "data" / "init"


def activation_of(fn, dtype=torch.bfloat16):
    """The epilogue activation :func:`find_activation` finds after ``fn``'s input, or None."""
    graph = make_fx(fn, tracing_mode="fake")(torch.randn(4, 8, dtype=dtype))
    nodes = list(graph.graph.nodes)
    found = find_activation(nodes[0], nodes)
    return found.op if found else None


def gelu_tanh_by_hand(c: float):
    """tanh-GELU written op by op in f32, as L1_048 writes it, with the cubic's coefficient ``c``."""
    def f(x):
        g = x.float()
        return (0.5 * g * (1.0 + torch.tanh(0.7978845608028654 * (g + c * torch.pow(g, 3))))).to(x.dtype)
    return f


@pytest.mark.parametrize("fn, want", [
    (gelu_tanh_by_hand(0.044715), "gelu_tanh"),
    (lambda x: F.gelu(x), "gelu"),
    (lambda x: (x.float() * 0.5 * (1 + torch.erf(x.float() / 2 ** 0.5))).bfloat16(), "gelu"),
    (lambda x: x * torch.sigmoid(x), "silu"),
    (lambda x: F.silu(x.float()).to(torch.bfloat16), "silu"),
    (lambda x: torch.relu(x), "relu"),
    (lambda x: torch.tanh(x), "tanh"),
])
def test_an_activation_is_found_by_what_it_computes(fn, want):
    assert activation_of(fn) == want


@pytest.mark.parametrize("fn", [
    gelu_tanh_by_hand(0.05),  # close to tanh-GELU, but not it: the probe tells them apart
    lambda x: F.gelu(x * 0.5),  # GELU of a scaled input: no epilogue activation computes it
    lambda x: x * x,
    lambda x: x.float(),  # a cast alone is no activation
])
def test_what_no_activation_computes_is_left_to_torch(fn):
    assert activation_of(fn) is None


def test_only_the_activation_joins_the_epilogue():
    """``gelu(x) + 1``: the epilogue computes the GELU; the add (not an activation of x) stays outside; a result
    read as f32 (``silu(x).float()``) ends the region at the silu."""
    graph = make_fx(lambda x: F.gelu(x) + 1, tracing_mode="fake")(torch.randn(4, 8, dtype=torch.bfloat16))
    nodes = list(graph.graph.nodes)
    found = find_activation(nodes[0], nodes)
    assert found.op == "gelu" and [str(n.target) for n in found.region] == ["aten.gelu.default"]
    assert activation_of(lambda x: F.silu(x).float()) == "silu"


def test_a_gated_mlp_is_two_kernel_calls_and_no_torch_step():
    """L1_048's shape: ``tanh-GELU(x·Wgᵀ) · (x·Wuᵀ)`` with the GELU written op by op in f32. The gate gemm's
    epilogue computes the GELU, the up gemm's multiplies by it (``c``), and the program passes the emulated grade."""
    p = find_problem(str(DATA / "tiny_gated_gelu"))
    result = init_program(p)
    text = result.text
    assert "d = cast(gelu_tanh(cast(acc, bf16)), bf16)" in text and "d = cast(acc, bf16) * c" in text
    assert "torch.tanh" not in text and "0 torch step(s)" in text
    assert check_program(text, p) == (True, "PASSED")


def test_a_bias_added_after_the_matmul_joins_the_epilogue():
    """L1_050's ``matmul(x, w.t()) + b`` (an ``mm``, a reshape back to 3-D, then the add of an ``[N]`` vector): the
    add is the epilogue's row broadcast, rounded as the reference (``d = cast(acc, bf16) + bias``), no torch step."""
    p = find_problem(str(DATA / "tiny_bias_after_mm"))
    text = init_program(p).text
    assert "epilogue { bias : bf16[N]   d = cast(acc, bf16) + bias }" in text and ", bias=b)" in text
    assert "0 torch step(s)" in text
    assert check_program(text, p) == (True, "PASSED")
