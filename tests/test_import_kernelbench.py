"""``ucutlass import kernelbench`` (issue 17 item 5): a KernelBench file becomes a problem folder whose reference
is the Model's own computation.

The files are small ones written for these tests (tests/data/kernelbench/). Each import starts one probe child
process (a torch import, a few seconds on a small machine): the imports shared by several tests run once, in a
module-scoped fixture.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from ucutlass.cli import main
from ucutlass.importers import ImportProblemError, import_kernelbench, parse_scale
from ucutlass.importers.functional import HEADER, TranslationError, functional_source
from ucutlass.problem import find_problem, load_problem

DATA = Path(__file__).parent / "data" / "kernelbench"


def _kernelbench_module(name: str):
    """The test file itself, imported in this process (it is ours, not untrusted): the ground truth."""
    spec = importlib.util.spec_from_file_location(f"kb_{name}", DATA / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """linear_relu through the CLI; conv_bn_gelu through the API; matmul_globals scaled, cast to bf16 and checked
    at halved sizes."""
    root = tmp_path_factory.mktemp("kb")
    assert main(["import", "kernelbench", str(DATA / "linear_relu.py"), "-o", str(root / "linear_relu")]) == 0
    import_kernelbench(DATA / "conv_bn_gelu.py", root / "conv_bn_gelu")
    import_kernelbench(DATA / "matmul_globals.py", root / "matmul_bf16", scale={"M": [0.5, 2.0]}, dtype="bf16",
                       check_max_elements=1000)  # 1680 elements at the file's sizes: the check halves them
    return root


@pytest.mark.parametrize("name", ["linear_relu", "conv_bn_gelu"])
def test_reference_matches_the_model_on_the_cpu(imported, name):
    """run(inputs, parameters) of the imported problem equals Model(*inputs) for the same inputs and weights."""
    problem = find_problem(imported / name)
    kb = problem.extra["kernelbench"]
    assert kb["checked"]["sizes"] == {} and kb["checked"]["max_abs_diff"] <= 1e-5  # the probe's check, full size
    mod = _kernelbench_module(name)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    xs = mod.get_inputs()
    values = dict(zip(kb["forward_inputs"], xs))
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    values.update({arg: state[qual].clone() for arg, qual in kb["parameters"].items()})
    assert list(values) == list(problem.inputs)  # forward's inputs first, then parameters
    got = problem.run_reference(values)["output"]
    with torch.no_grad():
        want = model(*xs)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_parameters_and_buffers_become_inputs(imported):
    lin = load_problem(imported / "linear_relu")
    assert list(lin.inputs) == ["x", "linear_weight", "linear_bias", "scale"]
    assert lin.inputs["linear_weight"].shape == ("out_features", "in_features")  # axes named after the globals
    assert lin.outputs["output"].shape == ("batch_size", "out_features")
    conv = load_problem(imported / "conv_bn_gelu")
    assert {"bn_running_mean", "bn_running_var", "bn_weight", "bn_bias", "conv_weight", "conv_bias"} <= set(conv.inputs)
    assert conv.inputs["conv_weight"].shape == ("out_channels", "in_channels", "kernel_size", "kernel_size")
    # height == width == 12 in the file, but they are separate globals: separate axes
    assert conv.inputs["x"].shape == ("batch_size", "in_channels", "height", "width")
    assert "torch.conv2d" in conv.reference_source and "batch_norm" in conv.reference_source


@pytest.mark.parametrize("name", ["linear_relu", "conv_bn_gelu", "matmul_bf16"])
def test_generated_inputs_run_through_the_reference(imported, name):
    """Every workload's inputs (the custom entry point) have the definition's shapes and give finite outputs."""
    problem = load_problem(imported / name)
    for w in problem.workloads:
        inputs = problem.make_inputs(w, seed=1)
        out = problem.run_reference(inputs)
        want = problem.output_shapes(w)
        for k, v in out.items():
            assert tuple(v.shape) == want[k] and torch.isfinite(v.float()).all(), k


def test_scale_and_dtype(imported):
    problem = load_problem(imported / "matmul_bf16")
    assert problem.axes["M"].kind == "var" and problem.axes["K"].kind == "const"
    assert [w.axes for w in problem.workloads] == [{"M": 8}, {"M": 32}]  # M = 16 · 0.5 and 16 · 2
    assert all(s.dtype == "bfloat16" for s in [*problem.inputs.values(), *problem.outputs.values()])
    assert list(problem.inputs) == ["A", "B"] and list(problem.outputs) == ["output0", "output1"]
    # the CPU check of the translation ran with globals halved, largest first, until 1000 elements: K, then N
    assert problem.extra["kernelbench"]["checked"]["sizes"] == {"K": 16, "N": 12}
    inputs = problem.make_inputs(problem.workloads[1], seed=0)
    out = problem.run_reference(inputs)
    torch.testing.assert_close(out["output0"], inputs["A"] @ inputs["B"])
    assert out["output1"].shape == (32,) and out["output1"].dtype == torch.bfloat16
    lines = (imported / "matmul_bf16" / "workload.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["tolerance"] == {"max_atol": 1e-2, "max_rtol": 1e-2, "required_matched_ratio": 1.0}


def test_unsupported_module_is_named(tmp_path):
    with pytest.raises(ImportProblemError, match=r"self\.lstm \(torch\.nn\.modules\.rnn\.LSTM\) has no functional"):
        import_kernelbench(DATA / "unsupported_rnn.py", tmp_path / "rnn")
    assert not (tmp_path / "rnn").exists()


def test_the_file_runs_in_a_child_process_only(tmp_path):
    with pytest.raises(ImportProblemError, match="defines no Model, get_init_inputs"):
        import_kernelbench(DATA / "not_kernelbench.py", tmp_path / "x")
    assert not hasattr(builtins, "UCUTLASS_KERNELBENCH_FILE_RAN_HERE")


def test_data_dependent_control_flow_is_refused(tmp_path):
    with pytest.raises(ImportProblemError, match="cannot be traced by torch.fx .*control flow"):
        import_kernelbench(DATA / "data_dependent.py", tmp_path / "x")


@pytest.mark.slow
def test_a_file_that_hangs_is_stopped(tmp_path):
    with pytest.raises(ImportProblemError, match="ran longer than 3 s"):
        import_kernelbench(DATA / "hangs.py", tmp_path / "x", timeout_s=3)


def test_a_global_the_forward_uses_as_a_constant_cannot_be_scaled(tmp_path):
    """conv_bn_gelu's ``stride`` is baked into the traced conv2d call: scaling it would leave the reference behind."""
    with pytest.raises(ImportProblemError, match="with stride=4 the traced forward differs"):
        import_kernelbench(DATA / "conv_bn_gelu.py", tmp_path / "x", scale={"stride": [2.0]})


def test_bad_options_are_clear(tmp_path, capsys):
    with pytest.raises(ImportProblemError, match="GLOBAL=FACTOR"):
        parse_scale(["batch_size"])
    with pytest.raises(ImportProblemError, match="positive"):
        parse_scale(["batch_size=-1"])
    assert parse_scale(["M=0.5,2", "N=4"]) == {"M": [0.5, 2.0], "N": [4.0]}
    with pytest.raises(ImportProblemError, match="--dtype 'int8'"):
        import_kernelbench(DATA / "linear_relu.py", tmp_path / "x", dtype="int8")
    assert main(["import", "kernelbench", str(tmp_path / "missing.py")]) == 1
    assert "missing.py: no such file" in capsys.readouterr().err


# --- the translation table, in this process (our own modules: nothing untrusted runs here) -------------------

class _Many(torch.nn.Module):
    """One of most rows of functional.MODULES, in eval and training mode alike."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1 = nn.Conv1d(4, 8, 3, stride=2, padding=1, dilation=1, groups=2)
        self.ct = nn.ConvTranspose1d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.body = nn.Sequential(nn.BatchNorm1d(6), nn.InstanceNorm1d(6, affine=True), nn.GroupNorm(3, 6),
                                  nn.GELU(approximate="tanh"), nn.MaxPool1d(2, ceil_mode=True),
                                  nn.AvgPool1d(2, count_include_pad=False, padding=1), nn.Hardtanh(-0.5, 0.5),
                                  nn.LeakyReLU(0.1), nn.ELU(0.7), nn.Softplus(2.0, 10.0), nn.Dropout(0.0),
                                  nn.Flatten(), nn.LayerNorm(30), nn.Linear(30, 5, bias=False), nn.SiLU(),
                                  nn.Mish(), nn.Softmax(dim=1))

    def forward(self, x):
        return self.body(self.ct(self.c1(x))) + 1.0


@pytest.mark.parametrize("training", [True, False])
def test_translated_modules_compute_what_the_modules_compute(training):
    torch.manual_seed(0)
    model = _Many().train(training)
    for m in model.modules():  # non-trivial running statistics, so eval mode reads them
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 1.5)
    tr = functional_source(torch.fx.symbolic_trace(model))
    assert set(tr.modules.values()) >= {"Conv1d", "ConvTranspose1d", "BatchNorm1d", "GroupNorm", "Linear", "Softmax"}
    ns: dict = {}
    exec(HEADER + tr.source, ns)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    x = torch.randn(3, 4, 16)
    got = ns["run"](x, *[state[q].clone() for _, q in tr.params])
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_buffer_computed_in_init_is_refused():
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(4, 4)))

        def forward(self, x):
            return x * self.mask

    with pytest.raises(TranslationError, match=r"self\.mask, a buffer whose values Model computes in __init__"):
        functional_source(torch.fx.symbolic_trace(Masked()))


def test_random_dropout_is_refused():
    model = torch.nn.Sequential(torch.nn.Dropout(0.2))
    with pytest.raises(TranslationError, match=r"self\.0 \(Dropout\): Dropout\(p=0.2\) in training mode"):
        functional_source(torch.fx.symbolic_trace(model))
    functional_source(torch.fx.symbolic_trace(model.eval()))  # eval mode: the identity


def test_a_scale_that_rounds_a_size_to_zero_or_repeats_one_is_refused(tmp_path):
    """M = 16: 0.01·16 rounds to 0 (it was clamped to 1 without a word); 1.0 and 1.01 both give 16 (two workloads alike)."""
    with pytest.raises(ImportProblemError, match=r"M = 16 times 0.01 rounds to 0; the smallest factor .* is 0.0312"):
        import_kernelbench(DATA / "matmul_globals.py", tmp_path / "x", scale={"M": [0.01]})
    with pytest.raises(ImportProblemError, match=r"two factors give the same M \(16, 16"):
        import_kernelbench(DATA / "matmul_globals.py", tmp_path / "y", scale={"M": [1.0, 1.01]})
