"""Sliced input bindings (``a : bf16[B, M, K] row <- hidden_states[:, -keep:]``) and batch strides that are not
packed: the language, the binding (the view and the extents), the runtime's arguments. No GPU and no nvcc here:
tests/test_slice_gpu.py runs a sliced batched kernel on the H200 against torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ucutlass import lang
from ucutlass.bind import bind, slice_index, slice_view
from ucutlass.codegen import abi_of, render, template_values
from ucutlass.errors import CheckError, UcutSyntaxError
from ucutlass.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]

LM_HEAD = """
kernel lm_head : gemm {
  a : bf16[B, M, K] row <- hidden_states[:, -keep:]
  b : bf16[N, K] row <- weight
  d : bf16[B, M, N] row -> logits
  tile = 64x128x64   schedule = pingpong
}
"""


def errors(text: str) -> list:
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    return info.value.diagnostics


def _lm_problem(tmp_path: Path, workloads: list[dict], name: str = "lm") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({
        "name": name, "description": "LM head on the last keep positions",
        "axes": {"batch": {"type": "var"}, "seq": {"type": "var"}, "keep": {"type": "var"},
                 "hidden": {"type": "const", "value": 256}, "vocab": {"type": "const", "value": 384}},
        "inputs": {"hidden_states": {"shape": ["batch", "seq", "hidden"], "dtype": "bfloat16"},
                   "weight": {"shape": ["vocab", "hidden"], "dtype": "bfloat16"}},
        "outputs": {"logits": {"shape": ["batch", "keep", "vocab"], "dtype": "bfloat16"}},
        "reference": "import torch\ndef run(hidden_states, weight):\n    raise NotImplementedError\n"}))
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"w{i}", "axes": axes, "inputs": {}}) + "\n" for i, axes in enumerate(workloads)))
    return folder


# --- the language -------------------------------------------------------------------------------------------

def test_a_slice_lowers_into_the_operand_and_b_may_be_shared_by_every_batch():
    k = lang.parse(LM_HEAD).kernel()
    assert k.a.slice == (":", "-keep:") and k.a.binding == "hidden_states" and k.a.batch == ("B",)
    assert k.b.batch == () and k.b.slice == () and k.batch == ("B",)
    plain = lang.parse(LM_HEAD.replace("[:, -keep:]", "")).kernel()
    assert plain.a.slice == () and plain.digest() != k.digest()
    forms = lang.parse(LM_HEAD.replace("[:, -keep:]", "[skip:]")).kernel()
    assert forms.a.slice == ("skip:",)


def test_a_shared_b_is_a_static_zero_batch_stride_and_the_others_come_from_the_call():
    k = lang.parse(LM_HEAD).kernel()
    assert abi_of(k).extents == ("M", "N", "K", "L", "batch_stride_a", "batch_stride_b", "batch_stride_d")
    values = template_values(k)
    assert values["layout_b"] == "cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>"  # K-major, batch mode _0
    src = render(k)
    assert "stride_a = with_batch_stride(stride_a, extents[4]);" in src
    assert "stride_d = with_batch_stride(stride_d, extents[6]);" in src
    assert "stride_b = with_batch_stride" not in src  # b is one matrix for every batch
    n_major = lang.parse(LM_HEAD.replace("b : bf16[N, K] row", "b : bf16[K, N] row")).kernel()
    assert template_values(n_major)["layout_b"] == "cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>"


@pytest.mark.parametrize("source, entry, col", [
    ("h[:, 3:5]", "3:5", 33), ("h[:, :keep]", ":keep", 33), ("h[2:]", "2:", 30), ("h[-1:, :]", "-1:", 30),
    ("h[:, keep:end]", "keep:end", 33),
])
def test_slice_entries_other_than_the_three_forms_are_refused_with_line_column_and_forms(source, entry, col):
    text = f"kernel k : gemm {{\n  a : bf16[B, M, K] row <- {source}\n  b : bf16[N, K] row  d : bf16[B, M, N] row }}"
    diags = errors(text)
    assert [d.code for d in diags] == ["bad-binding"], [d.format() for d in diags]
    assert f"slice entry '{entry}'" in diags[0].message
    assert (diags[0].pos.line, diags[0].pos.column) == (2, col)
    assert diags[0].valid == (":", "NAME:", "-NAME:")


def test_a_slice_elsewhere_than_a_gemm_input_is_refused():
    diags = errors("""kernel k : gemm { a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row -> out[:, -n:]
      epilogue { bias : bf16[N] <- b1[-n:]  d = acc + bias } }""")
    assert [d.code for d in diags] == ["bad-binding", "bad-binding"]
    assert "not an output" in diags[0].message and "not epilogue input bias" in diags[1].message
    assert all(d.valid == ("a", "b", "c") for d in diags)
    diags = errors("kernel at : attention { q : bf16[B, Sq, Hq, 64] <- q[:, -n:]  k : bf16[B, Sk, Hq, 64]  "
                   "v : bf16[B, Sk, Hq, 64]  o : bf16[B, Sq, Hq, 64] }")
    assert any(d.code == "bad-binding" and "q of a attention kernel" in d.message for d in diags)


def test_a_bare_index_is_a_syntax_error():
    diags = errors("kernel k : gemm { a : bf16[M, K] row <- h[0]  b : bf16[N, K] row  d : bf16[M, N] row }")
    assert diags[0].code == "syntax" and diags[0].pos.line == 1


def test_only_b_may_leave_out_the_batch_dims():
    diags = errors("kernel k : gemm { a : bf16[M, K] row  b : bf16[B, N, K] row  d : bf16[B, M, N] row }")
    assert {d.code for d in diags} == {"bad-dims"}
    assert "b may have none" in diags[0].message


# --- binding ------------------------------------------------------------------------------------------------

def test_slice_view_and_index_of_a_contiguous_tensor():
    assert slice_view([":", "-keep:"], (4, 10, 256), {"keep": 3}) == (7 * 256, (4, 3, 256), (2560, 256, 1))
    assert slice_view(["skip:"], (10, 256), {"skip": 4}) == (4 * 256, (6, 256), (256, 1))
    assert slice_view([":", "-keep:"], (4, 10, 256), {"keep": 10}) == (0, (4, 10, 256), (2560, 256, 1))
    assert slice_index([":", "-keep:"], (4, 10, 256), {"keep": 0}) == (slice(None), slice(10, None))  # not -0:
    with pytest.raises(ValueError, match="keep = 11 of a dim of size 10"):
        slice_view([":", "-keep:"], (4, 10, 256), {"keep": 11})


def test_bind_derives_m_from_the_sliced_axis(tmp_path):
    problem = load_problem(_lm_problem(tmp_path, [{"batch": 2, "seq": 10, "keep": 3},
                                                  {"batch": 1, "seq": 128, "keep": 128}]))
    binding = bind(lang.parse(LM_HEAD).kernel(), problem)
    assert [binding.extents(w) for w in problem.workloads] == [
        {"B": 2, "M": 3, "K": 256, "N": 384}, {"B": 1, "M": 128, "K": 256, "N": 384}]
    a = next(s for s in binding.slots if s.arg == "a")
    assert a.slice == (":", "-keep:") and a.tensor == "hidden_states"


@pytest.mark.parametrize("source, message", [
    ("hidden_states[:, -kep:]", "has no axis 'kep'; did you mean 'keep'?"),
    ("hidden_states[:, :, -keep:]", "its contiguous dim (K) is sliced"),
])
def test_bind_refuses_unknown_axes_and_a_sliced_contiguous_dim(tmp_path, source, message):
    problem = load_problem(_lm_problem(tmp_path, [{"batch": 2, "seq": 10, "keep": 3}]))
    with pytest.raises(CheckError) as info:
        bind(lang.parse(LM_HEAD.replace("hidden_states[:, -keep:]", source)).kernel(), problem)
    assert [d.code for d in info.value.diagnostics] == ["bind-slice"]
    assert message in info.value.diagnostics[0].message


def test_bind_refuses_a_keep_longer_than_the_sequence(tmp_path):
    problem = load_problem(_lm_problem(tmp_path, [{"batch": 2, "seq": 10, "keep": 12}]))
    with pytest.raises(CheckError, match=r"keep = 12 of a dim of size 10"):
        bind(lang.parse(LM_HEAD).kernel(), problem)


def test_a_folded_operand_slices_only_where_the_view_stays_contiguous(tmp_path):
    folded = """kernel k : gemm { a : bf16[M, K] row <- hidden_states[:, -keep:]  b : bf16[N, K] row <- weight
                d : bf16[M, N] row -> logits }"""
    one = load_problem(_lm_problem(tmp_path, [{"batch": 1, "seq": 10, "keep": 3}], "one"))
    assert bind(lang.parse(folded).kernel(), one).extents(one.workloads[0]) == {"M": 3, "K": 256, "N": 384}
    two = load_problem(_lm_problem(tmp_path, [{"batch": 2, "seq": 10, "keep": 3}], "two"))
    with pytest.raises(CheckError, match="dim 1 is sliced but dims \\[0\\] before it fold"):
        bind(lang.parse(folded).kernel(), two)


def test_the_bound_callable_passes_a_view_of_the_input_no_copy(tmp_path):
    torch = pytest.importorskip("torch")
    problem = load_problem(_lm_problem(tmp_path, [{"batch": 2, "seq": 10, "keep": 3}]))
    binding = bind(lang.parse(LM_HEAD).kernel(), problem)
    seen = []

    class Fake:
        abi = abi_of(binding.kernel)

        def call(self, values):
            seen.append(values)

    run = binding.callable(Fake())
    h, w = torch.randn(2, 10, 256).bfloat16(), torch.randn(384, 256).bfloat16()
    out = torch.empty(2, 3, 384, dtype=torch.bfloat16)
    run(h, w, out)
    a, b, d = seen[0]
    assert tuple(a.shape) == (2, 3, 256) and a.stride() == (2560, 256, 1)
    assert a.data_ptr() == h.data_ptr() + 7 * 256 * 2  # a view: rows 7..9 of each batch
    assert b is w and d is out
    run(h, w, torch.empty(2, 10, 384, dtype=torch.bfloat16))  # keep read from the output's shape at each call
    assert tuple(seen[1][0].shape) == (2, 10, 256) and seen[1][0].data_ptr() == h.data_ptr()


def test_the_l1_003_example_checks_and_binds(capsys, sol_execbench_dir):
    from ucutlass.cli import main

    spec = ROOT / "examples" / "lm_head_logit_slicing.ucut"
    assert main(["check", str(spec), "--problem", "L1_003_lm_head_projection_with_logit_slicing",
                 "--problems", str(sol_execbench_dir)]) == 0
    out = capsys.readouterr().out
    assert "binds to L1_003_lm_head_projection_with_logit_slicing" in out and "K = [2048]" in out
    assert main(["tune", "L1_003_lm_head_projection_with_logit_slicing", "--problems", str(sol_execbench_dir),
                 "--spec", str(spec), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "legal under the sm90 rules: 8" in out and "B=64 M=128 K=2048 N=102400" in out


# --- the runtime's arguments --------------------------------------------------------------------------------

def _argument_checker(kernel):
    """The runtime's argument checks without a compiled library (they run before any CUDA call)."""
    from ucutlass.runtime import CompiledKernel

    ck = CompiledKernel.__new__(CompiledKernel)
    ck.kernel, ck.abi, ck._inputs = kernel, abi_of(kernel), {i.name: i for i in kernel.epilogue_inputs}
    return ck


def test_runtime_passes_a_slices_batch_stride_and_zero_for_a_shared_b():
    torch = pytest.importorskip("torch")
    k = lang.parse(LM_HEAD).kernel()
    ck, cpu, ext, strides = _argument_checker(k), torch.device("cpu"), {}, {}
    h = torch.zeros(4, 10, 256, dtype=torch.bfloat16)
    for op, t in (("a", h[:, -3:]), ("b", torch.zeros(384, 256, dtype=torch.bfloat16)),
                  ("d", torch.zeros(4, 3, 384, dtype=torch.bfloat16))):
        o = getattr(k, op)
        ck._matrix(op, t, o.dims, o.layout, o.dtype, ext, cpu, o.batch, 8, strides)
    assert strides == {"a": 2560, "b": 0, "d": 3 * 384} and ext == {"B": 4, "M": 3, "K": 256, "N": 384}
    assert list(ck._extents(3, 384, 256, 4, strides)) == [3, 384, 256, 4, 2560, 0, 3 * 384]


def test_runtime_passes_packed_strides_as_before_for_packed_tensors():
    torch = pytest.importorskip("torch")
    k = lang.parse((ROOT / "tests" / "kernels" / "batched_scores.ucut").read_text()).kernel()
    ck, cpu, ext, strides = _argument_checker(k), torch.device("cpu"), {}, {}
    for op, shape in (("a", (2, 3, 40, 64)), ("b", (2, 3, 16, 64)), ("d", (2, 3, 40, 16))):
        o = getattr(k, op)
        ck._matrix(op, torch.zeros(*shape, dtype=getattr(torch, o.dtype.torch_name)), o.dims,
                   o.layout, o.dtype, ext, cpu, o.batch, None, strides)
    # what make_cute_packed_stride gives the batch mode: M·K, N·K, M·N; the default (no strides) is the same
    assert strides == {"a": 40 * 64, "b": 16 * 64, "d": 40 * 16}
    assert list(ck._extents(40, 16, 64, 6, strides)) == list(ck._extents(40, 16, 64, 6)) == [
        40, 16, 64, 6, 2560, 1024, 640]


def test_runtime_refuses_batch_strides_the_kernel_cannot_take():
    torch = pytest.importorskip("torch")
    from ucutlass.errors import KernelRuntimeError

    k = lang.parse(LM_HEAD).kernel()
    ck, cpu = _argument_checker(k), torch.device("cpu")

    def check(op, t):
        o = getattr(k, op)
        ck._matrix(op, t, o.dims, o.layout, o.dtype, {}, cpu, o.batch, 8, {})

    with pytest.raises(KernelRuntimeError, match="batch stride 384 < 1152 elements per batch: the output's batches"):
        check("d", torch.zeros(6, 384, dtype=torch.bfloat16).as_strided((4, 3, 384), (384, 384, 1)))
    with pytest.raises(KernelRuntimeError, match="batch stride 2564 is not a multiple of 8 elements"):
        check("a", torch.zeros(4 * 2564, dtype=torch.bfloat16).as_strided((4, 3, 256), (2564, 256, 1)))
    k2 = lang.parse(LM_HEAD.replace("B, M", "B, H, M")).kernel()
    ck2 = _argument_checker(k2)
    with pytest.raises(KernelRuntimeError, match="do not fold into one batch mode"):
        ck2._matrix("a", torch.zeros(2, 3, 10, 256, dtype=torch.bfloat16)[:, 1:], k2.a.dims, k2.a.layout,
                    k2.a.dtype, {}, cpu, k2.a.batch, 8, {})
    with pytest.raises(KernelRuntimeError, match="shared by every batch and must be 2-D"):
        check("b", torch.zeros(4, 384, 256, dtype=torch.bfloat16))
