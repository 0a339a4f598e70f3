"""The problem loader (ucutlass.problem) and the problems ucutlass ships. CPU only, fast.

- shipped problems: load by id, sane workloads, reference runs on CPU, inputs deterministic by seed;
- the real SOL-ExecBench / FlashInfer-Bench problems in ../shared/sol-execbench (loaded as data): axes,
  shapes, meta inputs, tolerances (both spellings, defaults), scalar inputs, one reference on CPU;
- find_problem: --problems dirs, paths, $UCUTLASS_PROBLEMS, unknown ids, malformed files.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from pathlib import Path

import pytest
import torch

from ucutlass.errors import ProblemError
from ucutlass.problem import (DEFAULT_ATOL, DEFAULT_MATCHED_RATIO, DEFAULT_RTOL, ENV_PROBLEM_DIRS,
                              eval_axis_expression, find_problem, list_problems, load_problem,
                              shipped_problems_dir, torch_dtype)

SHIPPED = ["qkv_proj_bias_qwen2_5_7b", "o_proj_residual_llama3_1_8b", "ffn_up_gelu_tanh_gpt2_xl"]

# Same location as the sol_execbench_dir fixture (tests/conftest.py); only used to name the parameters.
from shared_data import SHARED_SOL_EXECBENCH as _SOL_DIR  # noqa: E402
SOL_NAMES = sorted(p.name for p in _SOL_DIR.iterdir() if (p / "definition.json").is_file()) \
    if _SOL_DIR.is_dir() else []


def _tokens(w) -> int:
    return w.axes["batch_size"] * w.axes["seq_len"]


def _numel(shape) -> int:
    return math.prod(shape) if shape else 1


def _input_elems(problem, w) -> int:
    return sum(_numel(s) for s in problem.input_shapes(w).values() if s is not None)


def _smallest(problem):
    return min(problem.workloads, key=lambda w: _input_elems(problem, w))


def _raw_workloads(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines() if line.strip()]


# --- shipped problems -------------------------------------------------------------------------------

def test_shipped_problems_are_listed():
    ids = [i for i, _ in list_problems()]
    for pid in SHIPPED:
        assert pid in ids
        assert (shipped_problems_dir() / pid / "definition.json").is_file()


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_definition(pid):
    p = find_problem(pid)
    assert p.id == pid and p.name == pid
    assert p.custom_inputs_entrypoint == "get_inputs"
    assert "config.json" in p.description and p.extra.get("hf_id") in p.description
    assert set(a.kind for a in p.axes.values()) == {"const", "var", "expr"}
    assert [n for n, a in p.axes.items() if a.kind == "var"] == ["batch_size", "seq_len"]
    for spec in [*p.inputs.values(), *p.outputs.values()]:
        assert spec.dtype == "bfloat16"
        assert spec.shape is not None
    for w in p.workloads:
        shapes = {**p.input_shapes(w), **p.output_shapes(w)}
        for name, shape in shapes.items():
            # 16-byte TMA alignment: the contiguous (feature) dim of every bf16 tensor is a multiple of 8
            assert shape[-1] % 8 == 0, (name, shape)
    # one GEMM: the only 2-D input is the weight [N, K]; activations are [batch, seq, K], the output
    # [batch, seq, N]; epilogue operands (bias [N], residual [batch, seq, N]) match N
    w = p.workloads[0]
    ins, outs = p.input_shapes(w), p.output_shapes(w)
    (weight,) = [s for s in ins.values() if len(s) == 2]
    n, k = weight
    (out,) = outs.values()
    assert out == (w.axes["batch_size"], w.axes["seq_len"], n)
    assert next(iter(ins.values())) == (w.axes["batch_size"], w.axes["seq_len"], k)
    for s in ins.values():
        assert s[-1] in (n, k)
    mod = p.reference_module()
    assert callable(mod.run) and callable(mod.get_inputs)


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_workloads(pid):
    p = find_problem(pid)
    raw = _raw_workloads(p.path)
    assert 6 <= len(p.workloads) <= 10
    uuids = [w.uuid for w in p.workloads]
    assert uuids == [str(uuid.uuid5(uuid.NAMESPACE_URL, f"ucutlass/problems/{pid}/{i}"))
                     for i in range(len(uuids))]
    tokens = [_tokens(w) for w in p.workloads]
    assert len(set(tokens)) == len(tokens)
    assert {1, 8, 32, 64} <= set(tokens)                  # decode steps
    assert any(t >= 512 for t in tokens) and max(tokens) <= 8192  # prefill, modest
    assert any(t > 64 and t % 64 for t in tokens)         # ragged M tiles
    for w, r in zip(p.workloads, raw):
        assert w.tolerance.from_workload and "tolerance" in r
        assert 5e-3 <= w.tolerance.max_atol <= 2e-2
        assert 1e-2 <= w.tolerance.max_rtol <= 5e-2
        assert w.tolerance.required_matched_ratio == 0.99
        assert set(r["inputs"]) == set(p.inputs)
        # the largest workload stays small enough for the grader (inputs + outputs, bf16)
        total = sum(_numel(s) for s in {**p.input_shapes(w), **p.output_shapes(w)}.values()) * 2
        assert total < 1 << 30


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_reference_runs_on_cpu(pid):
    p = find_problem(pid)
    w = _smallest(p)
    assert _tokens(w) == 1
    mod = p.reference_module()
    inputs = p.make_inputs(w, device="cpu", seed=0, module=mod)
    assert list(inputs) == list(p.inputs)
    for name, shape in p.input_shapes(w).items():
        assert tuple(inputs[name].shape) == shape and inputs[name].dtype == torch.bfloat16
    out = p.run_reference(inputs, module=mod)
    assert list(out) == list(p.outputs)
    for name, shape in p.output_shapes(w).items():
        assert tuple(out[name].shape) == shape
        assert out[name].dtype == torch_dtype(p.outputs[name].dtype)
        assert torch.isfinite(out[name]).all()
    # weights scaled by 1/sqrt(K): outputs are O(1), not O(sqrt(K))
    assert 0.3 < next(iter(out.values())).float().std().item() < 3.0


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_reference_within_its_tolerance_of_fp64(pid):
    """The bf16 reference is within the workload's own tolerance of an fp64 evaluation of the same inputs."""
    p = find_problem(pid)
    w = next(w for w in p.workloads if _tokens(w) == 64)
    mod = p.reference_module()
    inputs = p.make_inputs(w, seed=1, module=mod)
    ref = p.run_reference(inputs, module=mod)
    truth = p.run_reference({k: v.double() for k, v in inputs.items()}, module=mod)
    tol = w.tolerance
    for name in p.outputs:
        y, x = truth[name], ref[name].double()
        matched = ((x - y).abs() <= tol.max_atol + tol.max_rtol * y.abs()).double().mean().item()
        assert matched == 1.0, (name, matched)


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_inputs_deterministic_by_seed(pid):
    p = find_problem(pid)
    w = _smallest(p)
    mod = p.reference_module()
    a = p.make_inputs(w, seed=123, module=mod)
    b = p.make_inputs(w, seed=123, module=mod)
    c = p.make_inputs(w, seed=124, module=mod)
    for name in p.inputs:
        assert torch.equal(a[name], b[name])
        assert not torch.equal(a[name], c[name])


@pytest.mark.parametrize("pid", SHIPPED)
def test_shipped_meta_inputs(pid):
    p = find_problem(pid)
    for w in p.workloads:
        ins = p.make_inputs(w, device="meta")
        for name, shape in p.input_shapes(w).items():
            assert ins[name].device.type == "meta" and tuple(ins[name].shape) == shape


# --- real SOL-ExecBench / FlashInfer-Bench problems (data) ---------------------------------------------

@pytest.mark.parametrize("name", SOL_NAMES)
def test_sol_execbench_problem_loads(sol_execbench_dir, name):
    folder = sol_execbench_dir / name
    p = find_problem(folder)
    raw_def = json.loads((folder / "definition.json").read_text())
    raw_wls = _raw_workloads(folder)
    assert p.id == name and len(p.workloads) == len(raw_wls)
    assert list(p.inputs) == list(raw_def["inputs"]) and list(p.outputs) == list(raw_def["outputs"])
    assert p.custom_inputs_entrypoint == raw_def.get("custom_inputs_entrypoint")
    for w, r in zip(p.workloads, raw_wls):
        assert w.uuid == r["uuid"]
        axes = p.resolve_axes(w)
        # every axis resolves to an int: const from the definition, var from the workload, expr evaluated
        for an, a in raw_def["axes"].items():
            if a["type"] == "const":
                assert axes[an] == a["value"]
            elif a["type"] == "var":
                assert axes[an] == r["axes"][an]
            else:
                assert axes[an] == eval_axis_expression(a["expression"], axes)
            assert isinstance(axes[an], int)
        # input shapes follow the definition (axis names or literal sizes)
        shapes = p.input_shapes(w)
        for n, d in raw_def["inputs"].items():
            if d.get("shape") is None:
                assert shapes[n] is None
            else:
                assert shapes[n] == tuple(axes[s] if s in axes else int(s) for s in d["shape"])
        # meta inputs, custom_inputs_entrypoint problems included
        ins = p.make_inputs(w, device="meta")
        assert list(ins) == list(p.inputs)
        for n, spec in p.inputs.items():
            kind = r["inputs"].get(n, {}).get("type")
            if kind == "scalar":
                assert ins[n] == r["inputs"][n]["value"]
            elif shapes[n] is not None:
                assert ins[n].device.type == "meta"
                assert tuple(ins[n].shape) == shapes[n]
                assert ins[n].dtype == torch_dtype(spec.dtype)
        # tolerance: either spelling of the ratio, SOL-ExecBench's defaults where none is given
        t, rt = w.tolerance, r.get("tolerance")
        if rt:
            assert t.from_workload
            assert t.max_atol == rt.get("max_atol", DEFAULT_ATOL)
            assert t.max_rtol == rt.get("max_rtol", DEFAULT_RTOL)
            ratio = rt.get("required_matched_ratio", rt.get("required_match_ratio", DEFAULT_MATCHED_RATIO))
            assert t.required_matched_ratio == ratio
        else:
            assert not t.from_workload
            assert (t.max_atol, t.max_rtol, t.required_matched_ratio) == (1e-2, 1e-2, 0.99)
        assert t.to_json()["source"] == ("workload" if rt else "default")


def _sol(sol_execbench_dir, prefix):
    found = sorted(p for p in sol_execbench_dir.iterdir() if p.name.startswith(prefix))
    if not found:
        pytest.skip(f"no {prefix}* problem in {sol_execbench_dir}")
    return found


def test_sol_execbench_l2_required_match_ratio_is_read(sol_execbench_dir):
    seen = 0
    for folder in _sol(sol_execbench_dir, "L2_"):
        p = load_problem(folder)
        for w, r in zip(p.workloads, _raw_workloads(folder)):
            rt = r["tolerance"]
            assert "required_match_ratio" in rt and "required_matched_ratio" not in rt
            assert w.tolerance.required_matched_ratio == rt["required_match_ratio"]
            if rt["required_match_ratio"] != DEFAULT_MATCHED_RATIO:
                seen += 1
    assert seen > 0  # the value was read, not defaulted (L2 ratios are 0.98)


def test_sol_execbench_flashinfer_defaults(sol_execbench_dir):
    for folder in _sol(sol_execbench_dir, "FlashInfer-Bench_"):
        p = load_problem(folder)
        for w in p.workloads:
            t = w.tolerance
            assert (t.max_atol, t.max_rtol, t.required_matched_ratio, t.from_workload) == \
                (DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_MATCHED_RATIO, False)
            assert (DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_MATCHED_RATIO) == (1e-2, 1e-2, 0.99)


def test_sol_execbench_scalar_input(sol_execbench_dir):
    folder = sol_execbench_dir / "L2_004_fused_residual_rms_mlp"
    if not folder.is_dir():
        pytest.skip("L2_004 not present")
    p = load_problem(folder)
    assert p.inputs["eps"].is_scalar
    for w, r in zip(p.workloads, _raw_workloads(folder)):
        assert r["inputs"]["eps"]["type"] == "scalar"
        assert w.scalar_inputs()["eps"] == r["inputs"]["eps"]["value"]
        ins = p.make_inputs(w, device="meta")
        assert ins["eps"] == r["inputs"]["eps"]["value"] == pytest.approx(1e-5)


@pytest.mark.parametrize("name", ["FlashInfer-Bench_004_gemm_n128_k2048",
                                  "L1_050_attention_qkv_projection_with_bias_and_reshape",
                                  "L1_075_grouped_query_self_attention_with_rope"])
def test_sol_execbench_reference_runs_on_cpu(sol_execbench_dir, name):
    folder = sol_execbench_dir / name
    if not folder.is_dir():
        pytest.skip(f"{name} not present")
    p = load_problem(folder)
    w = _smallest(p)
    mod = p.reference_module()
    inputs = p.make_inputs(w, device="cpu", seed=0, module=mod)
    for n, shape in p.input_shapes(w).items():
        if shape is not None:
            assert tuple(inputs[n].shape) == shape
    out = p.run_reference(inputs, module=mod)
    assert list(out) == list(p.outputs)
    for n, shape in p.output_shapes(w).items():
        assert tuple(out[n].shape) == shape
        assert out[n].dtype == torch_dtype(p.outputs[n].dtype)


# --- find_problem and errors --------------------------------------------------------------------------

_TOY_REF = '''import torch


def run(A, B):
    return A @ B.T
'''


def _write_toy(folder: Path, n: int = 16, definition: str | None = None, workloads: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    d = {"name": folder.name, "description": "toy GEMM",
         "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": n},
                  "K": {"type": "expr", "expression": "N * 2"}},
         "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"},
                    "B": {"shape": ["N", "K"], "dtype": "bfloat16"}},
         "outputs": {"C": {"shape": ["M", "N"], "dtype": "bfloat16"}},
         "reference": _TOY_REF}
    (folder / "definition.json").write_text(definition if definition is not None else json.dumps(d, indent=2))
    (folder / "workload.jsonl").write_text(
        workloads if workloads is not None else
        '{"uuid": "w0", "axes": {"M": 3}, "inputs": {"A": {"type": "random"}, "B": {"type": "random"}}}\n')
    return folder


def test_find_by_id_in_problems_dir(tmp_path):
    _write_toy(tmp_path / "probs" / "toy_gemm")
    p = find_problem("toy_gemm", extra=[tmp_path / "probs"])
    assert p.id == "toy_gemm" and p.path == tmp_path / "probs" / "toy_gemm"
    assert p.resolve_axes(p.workloads[0]) == {"M": 3, "N": 16, "K": 32}
    assert p.output_shapes(p.workloads[0]) == {"C": (3, 16)}
    assert "toy_gemm" in [i for i, _ in list_problems([tmp_path / "probs"])]


def test_find_by_path(tmp_path):
    folder = _write_toy(tmp_path / "somewhere" / "toy_gemm")
    assert find_problem(folder).id == "toy_gemm"
    assert find_problem(str(folder)).path == folder


def test_find_via_env(tmp_path, monkeypatch):
    _write_toy(tmp_path / "a" / "toy_a")
    _write_toy(tmp_path / "b" / "toy_b")
    monkeypatch.setenv(ENV_PROBLEM_DIRS, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert find_problem("toy_a").id == "toy_a"
    assert find_problem("toy_b").path == tmp_path / "b" / "toy_b"
    assert find_problem(SHIPPED[0]).id == SHIPPED[0]  # the shipped ones stay visible


def test_problems_dir_wins_over_env(tmp_path, monkeypatch):
    _write_toy(tmp_path / "cli" / "toy", n=8)
    _write_toy(tmp_path / "env" / "toy", n=24)
    monkeypatch.setenv(ENV_PROBLEM_DIRS, str(tmp_path / "env"))
    assert find_problem("toy", extra=[tmp_path / "cli"]).axes["N"].value == 8
    assert find_problem("toy").axes["N"].value == 24


def test_unknown_id_lists_close_matches(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_PROBLEM_DIRS, raising=False)
    with pytest.raises(ProblemError) as e:
        find_problem("qkv_proj_bias_qwen25_7b")
    msg = str(e.value)
    assert "qkv_proj_bias_qwen25_7b" in msg and "did you mean" in msg and "qkv_proj_bias_qwen2_5_7b" in msg
    assert "--problems" in msg and ENV_PROBLEM_DIRS in msg


def test_an_id_s_start_names_the_one_problem_it_starts(tmp_path, monkeypatch):
    """`ucutlass init L1_048` (SOL-ExecBench's number alone) loads L1_048_fused_gate_up_projection_with_swiglu; a
    start shared by several ids says which and asks for the whole id."""
    monkeypatch.delenv(ENV_PROBLEM_DIRS, raising=False)
    for name in ("L1_048_gate_up", "L1_049_other", "L1_050_qkv"):
        _write_toy(tmp_path / name)
    assert find_problem("L1_048", extra=[tmp_path]).id == "L1_048_gate_up"
    with pytest.raises(ProblemError, match=r"'L1' is the start of 3 ids: L1_048_gate_up, L1_049_other, L1_050_qkv"):
        find_problem("L1", extra=[tmp_path])
    # a number that is not there: the ids of that level with the nearest numbers come first
    with pytest.raises(ProblemError, match=r"did you mean L1_050_qkv, L1_049_other, L1_048_gate_up"):
        find_problem("L1_52", extra=[tmp_path])


def test_malformed_definition_names_file_and_line(tmp_path):
    bad = '{\n  "name": "bad",\n  "axes": {,\n}\n'
    folder = _write_toy(tmp_path / "bad", definition=bad)
    with pytest.raises(ProblemError) as e:
        load_problem(folder)
    assert f"{folder / 'definition.json'}:3:" in str(e.value)
    with pytest.raises(ProblemError, match="definition.json:3:"):
        find_problem(folder)


def test_malformed_workload_names_file_and_line(tmp_path):
    good = '{"uuid": "w0", "axes": {"M": 3}, "inputs": {}}\n'
    folder = _write_toy(tmp_path / "bad", workloads=good + '{"uuid": "w1", "axes": {"M": 4\n')
    with pytest.raises(ProblemError) as e:
        load_problem(folder)
    assert f"{folder / 'workload.jsonl'}:2:" in str(e.value)


def test_missing_pieces(tmp_path):
    with pytest.raises(ProblemError, match="no definition.json"):
        load_problem(tmp_path)
    folder = _write_toy(tmp_path / "nowl", workloads="\n")
    with pytest.raises(ProblemError, match="no workloads"):
        load_problem(folder)
    d = json.loads((folder / "definition.json").read_text())
    del d["reference"]
    _write_toy(tmp_path / "noref", definition=json.dumps(d))
    with pytest.raises(ProblemError, match="missing 'reference'"):
        load_problem(tmp_path / "noref")


def test_toy_inputs_and_reference(tmp_path):
    p = load_problem(_write_toy(tmp_path / "toy"))
    w = p.workloads[0]
    assert w.tolerance.to_json() == {"max_atol": 1e-2, "max_rtol": 1e-2, "required_matched_ratio": 0.99,
                                     "source": "default"}
    a = p.make_inputs(w, seed=5)
    assert torch.equal(a["A"], p.make_inputs(w, seed=5)["A"])
    assert not torch.equal(a["A"], p.make_inputs(w, seed=6)["A"])
    out = p.run_reference(a)
    assert out["C"].shape == (3, 16) and out["C"].dtype == torch.bfloat16


def test_literal_dims_and_meta_skip_custom_entrypoint(tmp_path):
    """A literal size in a shape ("8") is a size, not an axis name; on meta, a custom entry point that
    computes on its data (here .item()) is not called: shapes and dtypes come from the definition."""
    ref = '''import torch


def run(A, s):
    return A * s


def get_inputs(axes, device):
    a = torch.randn(axes["M"], 8, device=device)
    return {"A": a, "s": a.abs().max().item()}
'''
    d = {"axes": {"M": {"type": "var"}},
         "inputs": {"A": {"shape": ["M", "8"], "dtype": "float32"}, "s": {"shape": None, "dtype": "float32"}},
         "outputs": {"C": {"shape": ["M", "8"], "dtype": "float32"}},
         "reference": ref, "custom_inputs_entrypoint": "get_inputs"}
    wl = '{"uuid": "w0", "axes": {"M": 5}, "inputs": {"A": {"type": "custom"}, "s": {"type": "custom"}}}\n'
    p = load_problem(_write_toy(tmp_path / "lit", definition=json.dumps(d), workloads=wl))
    w = p.workloads[0]
    assert p.input_shapes(w) == {"A": (5, 8), "s": None}
    meta = p.make_inputs(w, device="meta")
    assert meta["A"].device.type == "meta" and tuple(meta["A"].shape) == (5, 8)
    cpu = p.make_inputs(w, device="cpu", seed=0)
    assert isinstance(cpu["s"], float) and tuple(cpu["A"].shape) == (5, 8)
    assert p.run_reference(cpu)["C"].shape == (5, 8)
