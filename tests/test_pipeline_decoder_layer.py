"""L2_062_decoder_complete_layer as one pipeline (examples/pipeline_decoder_layer.ucut, issue 16 item 6), and the
torch step it needed: ``torch.arange`` (RoPE positions), a factory made on the device of the problem's inputs.

The example binds on every workload and passes emulated with small const extents in tests/test_pipeline_programs.py
(SHRUNK); here: its full-size emulated grade on the smallest workload (seq_len 131: padded for the FMHA; about two
minutes on 2 cores, so `slow`), a wrong RoPE failing the grader, and the factory's behaviour.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass.bind import bind_pipeline
from ucutlass.emulate import emulate_pipeline
from ucutlass.errors import CheckError
from ucutlass.grader import Grader, Status
from ucutlass.ir.torch_ops import FACTORIES, TORCH_FUNCTIONS
from ucutlass.lang import parse
from ucutlass.problem import find_problem
from ucutlass.solution import emulated_solution

FAST = dict(warmup_ms=1.0, rep=3.0, timeout_s=600.0)
EXAMPLE = REPO / "examples" / "pipeline_decoder_layer.ucut"
L2_062 = "L2_062_decoder_complete_layer"
L1_050 = "L1_050_attention_qkv_projection_with_bias_and_reshape"
SMALL = {"hidden_size": 256, "intermediate_size": 512, "cross_hidden_size": 256}


def _problem(pid: str):
    try:
        return find_problem(pid, [SHARED_SOL_EXECBENCH])
    except Exception as e:  # noqa: BLE001  (a shared problem missing beside this clone)
        pytest.skip(f"problem {pid} not found: {e}")


def _smallest(problem):
    def size(w):
        axes = problem.resolve_axes(w)
        return sum(math.prod(problem.shape(s, axes) or ()) for s in (*problem.inputs.values(),
                                                                     *problem.outputs.values()))
    return min(problem.workloads, key=size)


def _shrunk(tmp_path):
    """L2_062 with SMALL const extents and only its smallest workload (seq_len 131), in a temporary folder."""
    problem = _problem(L2_062)
    folder = tmp_path / L2_062
    folder.mkdir()
    definition = json.loads((problem.path / "definition.json").read_text())
    for axis, value in SMALL.items():
        definition["axes"][axis]["value"] = value
    (folder / "definition.json").write_text(json.dumps(definition))
    lines = (problem.path / "workload.jsonl").read_text().splitlines()
    (folder / "workload.jsonl").write_text(lines[_smallest(problem).index] + "\n")
    return find_problem(str(folder))


def _grade(source: str, problem, device: str = "cpu"):
    sol = emulated_solution(source, str(EXAMPLE), None, EXAMPLE.stem, pipeline=None)
    with Grader(problem, device=device, **FAST) as g:
        (r,) = g.grade(sol, [_smallest(problem)])
    return r


def test_the_smallest_workload_pads_the_decoder_rows():
    """The full-size test below grades seq_len 131: the FMHA's padding of the decoder's rows is exercised."""
    w = _smallest(_problem(L2_062))
    assert _problem(L2_062).resolve_axes(w)["seq_len"] % 8 != 0


@pytest.mark.slow
@pytest.mark.full_size
def test_decoder_layer_passes_emulated_on_the_cpu_at_full_size():
    r = _grade(EXAMPLE.read_text(), _problem(L2_062))
    assert r.status is Status.PASSED, r.log


def test_a_wrong_rope_fails_the_grader(tmp_path):
    """rotate_half without its minus: shapes flow, the values do not (on the small-extent copy: seconds)."""
    wrong = EXAMPLE.read_text().replace("torch.cat([-q[..., 64:]", "torch.cat([q[..., 64:]")
    assert wrong != EXAMPLE.read_text()
    r = _grade(wrong, _shrunk(tmp_path))
    assert r.status in (Status.INCORRECT_NUMERICAL, Status.INCORRECT_ACCURACY), r.log


# --- torch.arange: a factory on the inputs' device ---------------------------------------------------------------

KERNEL = """
kernel proj : gemm {
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
  epilogue { bias : bf16[N]   d = acc + bias }
}
"""
POSITIONS = "q = proj(hidden_states, q_weight, q_bias) + torch.arange(seq_len, dtype=torch.float32).unsqueeze(-1)"
REST = ["k = proj(hidden_states, k_weight, k_bias)", "v = proj(hidden_states, v_weight, v_bias)",
        "return q.to(torch.bfloat16).view(batch_size, seq_len, num_attention_heads, head_dim), "
        "k.view(batch_size, seq_len, num_key_value_heads, head_dim), "
        "v.view(batch_size, seq_len, num_key_value_heads, head_dim)"]


def _pipeline(first: str) -> str:
    return KERNEL + "pipeline p {\n" + "\n".join(f"  {line}" for line in [first, *REST]) + "\n}\n"


def test_arange_is_an_allowed_factory():
    assert "torch.arange" in FACTORIES and TORCH_FUNCTIONS["torch.arange"].group == "factory"


def _run_positions(device: str):
    problem = _problem(L1_050)
    fn = emulate_pipeline(parse(_pipeline(POSITIONS), "p.ucut"), problem)
    w = _smallest(problem)
    torch.manual_seed(0)
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in problem.make_inputs(w).items()}
    outs = [torch.empty(s, dtype=torch.bfloat16, device=device) for s in problem.output_shapes(w).values()]
    fn(*inputs.values(), *outs)
    x, qw, qb = (inputs[n].float() for n in ("hidden_states", "q_weight", "q_bias"))
    seq = x.shape[1]
    q = (x @ qw.t() + qb).to(torch.bfloat16).float() + torch.arange(seq, device=device).float().unsqueeze(-1)
    assert torch.allclose(outs[0].float(), q.reshape(outs[0].shape), rtol=2e-2, atol=2e-2)
    return outs[0]


def test_arange_binds_on_meta_and_runs_on_the_inputs_device():
    """Binding flows the positions as meta tensors beside the meta inputs (a CPU tensor would not mix with them);
    a call makes them where the inputs are, and row s of q gets s added."""
    assert len(bind_pipeline(parse(_pipeline(POSITIONS), "p.ucut"), _problem(L1_050)).kernel_calls()) == 3
    _run_positions("cpu")


@pytest.mark.gpu
def test_arange_runs_on_the_gpu():
    assert _run_positions("cuda").is_cuda


def test_a_factory_with_a_device_is_refused():
    text = _pipeline(POSITIONS.replace("dtype=torch.float32", "dtype=torch.float32, device=None"))
    with pytest.raises(CheckError) as e:
        bind_pipeline(parse(text, "p.ucut"), _problem(L1_050))
    (d,) = e.value.diagnostics
    assert d.code == "bad-call" and "device" in d.message and d.pos.line == text.splitlines().index(
        "  " + POSITIONS.replace("dtype=torch.float32", "dtype=torch.float32, device=None")) + 1


def test_padding_by_nothing_shares_the_tensor_and_padding_pads():
    """F.pad by (8 - seq_len % 8) % 8 = 0 copied q, k and v before every attention on aligned workloads; now the
    contiguous tensor itself is used. A real pad, or a non-contiguous tensor, still gets F.pad's fresh tensor."""
    import torch

    from ucutlass.ir.torch_ops import torch_function

    pad = torch_function("F.pad")
    x = torch.randn(2, 8, 4)
    assert pad(x, [0, 0, 0, 0]) is x
    y = pad(x, [0, 0, 0, 3])
    assert y.shape == (2, 11, 4) and torch.equal(y[:, :8], x) and not y[:, 8:].any()
    t = x.transpose(0, 1)
    z = pad(t, [0, 0])
    assert z is not t and torch.equal(z, t)  # F.pad copies (keeping the stride order)
    assert torch.equal(pad(x, [1, 1], value=2.0)[..., 0], torch.full((2, 8), 2.0))
