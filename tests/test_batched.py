"""Batched GEMM (CUTLASS's batch mode L) and every row/col layout pair of a and b: language, rules, rendering.

No GPU and no nvcc here: tests/test_alignment.py compiles tests/kernels/batched_bias.ucut with nvcc and
tests/test_batched_gpu.py runs the batched kernels on the H200.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ucutlass import arch, lang
from ucutlass.bind import bind
from ucutlass.codegen import abi_of, render, template_values
from ucutlass.errors import UcutSyntaxError
from ucutlass.ir import EpilogueInputKind, Layout
from ucutlass.problem import load_problem

KERNELS = Path(__file__).parent / "kernels"

SCORES = """
kernel scores : gemm {
  a : bf16[B, H, M, K] row
  b : bf16[B, H, N, K] row
  d : f32[B, H, M, N] row
  epilogue { d = acc * 0.125 }
}
"""


def kernel_of(text: str):
    return lang.parse(text, "t.ucut").kernel()


def errors(text: str) -> list:
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    return info.value.diagnostics


def test_leading_dims_shared_by_a_b_d_are_the_batch_mode():
    k = kernel_of(SCORES)
    assert k.batch == ("B", "H")
    assert [(op.batch, op.dims) for op in k.operands] == [(("B", "H"), ("M", "K")), (("B", "H"), ("N", "K")),
                                                          (("B", "H"), ("M", "N"))]
    assert k.a.contiguous_dim == "K" and k.d.contiguous_dim == "N"  # layouts apply to the two matrix dims
    assert "batched" in k.config_name()
    assert abi_of(k).extents == ("M", "N", "K", "L", "batch_stride_a", "batch_stride_b", "batch_stride_d")
    plain = kernel_of(SCORES.replace("B, H, ", ""))
    assert plain.batch == () and abi_of(plain).extents == ("M", "N", "K")
    assert plain.build_digest() != k.build_digest()


def test_col_layout_of_a_batched_operand_is_the_first_matrix_dim():
    k = kernel_of("kernel k : gemm { a : bf16[L, M, K] col  b : bf16[L, K, N] row  d : bf16[L, M, N] col }")
    assert (k.a.contiguous_dim, k.b.contiguous_dim, k.d.contiguous_dim) == ("M", "N", "M")
    values = template_values(k)
    assert (values["layout_a"], values["layout_b"], values["layout_d"]) == (
        "cutlass::layout::ColumnMajor", "cutlass::layout::RowMajor", "cutlass::layout::ColumnMajor")


@pytest.mark.parametrize("operands, who", [
    ("a : bf16[B, M, K] row  b : bf16[B, N, K] row  d : f32[M, N] row", "d"),
    ("a : bf16[B, M, K] row  b : bf16[N, K] row  c : bf16[M, N] row  d : f32[B, M, N] row", "c"),
    ("a : bf16[B, H, M, K] row  b : bf16[H, B, N, K] row  d : f32[B, H, M, N] row", "b"),
    ("a : bf16[M, K] row  b : bf16[B, N, K] row  d : f32[B, M, N] row", "b"),
])
def test_batch_dims_must_agree_on_a_b_d(operands, who):
    diags = errors(f"kernel k : gemm {{ {operands} }}")
    bad = [d for d in diags if d.code == "bad-dims"]
    assert bad, [d.format() for d in diags]
    assert any(f"{who} has batch dims" in d.message or d.message.startswith(who) for d in bad)
    assert all("folds into M" in d.message for d in bad if "batch dims" in d.message)


def test_batch_dims_are_not_mode_names_and_are_distinct():
    for dims in ("[M, M, K]", "[K, M, K]", "[B, B, M, K]"):
        diags = errors(f"kernel k : gemm {{ a : bf16{dims} row  b : bf16[N, K] row  d : f32[M, N] row }}")
        assert [d.code for d in diags] == ["bad-dims"], dims
        assert "after any batch dims" in diags[0].message


def test_epilogue_inputs_take_the_batch_dims_or_none():
    k = kernel_of("""kernel k : gemm {
      a : bf16[L, M, K] row  b : bf16[L, N, K] row  d : bf16[L, M, N] row
      epilogue { bias : bf16[L, N]  scale : f32[M]  r : bf16[L, M, N] row  shared : bf16[M, N] row
                 d = acc * scale + bias + r + shared } }""")
    kinds = {i.name: (i.kind, i.batch, i.dims) for i in k.epilogue_inputs}
    assert kinds == {"bias": (EpilogueInputKind.row_vector, ("L",), ("N",)),
                     "scale": (EpilogueInputKind.col_vector, (), ("M",)),
                     "r": (EpilogueInputKind.matrix, ("L",), ("M", "N")),
                     "shared": (EpilogueInputKind.matrix, (), ("M", "N"))}
    src = render(k)
    assert "{_0{}, _1{}, int64_t(N)}" in src  # bias: one row per batch, batch stride N
    assert "{static_cast<float const*>(ptrs[4]), float(0), {}}" in src  # scale: shared, batch stride 0
    assert "cute::make_shape(M, N, L))}" in src  # r: packed per batch
    assert "with_batch_stride(cutlass::make_cute_packed_stride(typename AuxDesc1::Stride{}, " \
           "cute::make_shape(M, N, 1)), 0)" in src  # shared: batch stride 0
    diags = errors("""kernel k : gemm { a : bf16[L, M, K] row  b : bf16[L, N, K] row  d : bf16[L, M, N] row
      epilogue { bias : bf16[X, N]  d = acc + bias } }""")
    assert [d.code for d in diags] == ["bad-dims"] and "takes the kernel's batch dims [L]" in diags[0].message


def test_batched_render_passes_l_to_the_problem_shape_and_strides():
    k = kernel_of(SCORES)
    src = render(k)
    assert "const int L = static_cast<int>(extents[3]);" in src
    assert "{M, N, K, L}," in src
    for shape in ("(M, K, L)", "(N, K, L)", "(M, N, L)"):
        assert f"cute::make_shape{shape}" in src
    assert json.loads(template_values(k)["info_json"])["extents"] == ["M", "N", "K", "L", "batch_stride_a",
                                                                        "batch_stride_b", "batch_stride_d"]
    for name, index in (("a", 4), ("b", 5), ("d", 6)):  # the runtime's batch strides replace the packed ones
        assert f"stride_{name} = with_batch_stride(stride_{name}, extents[{index}]);" in src
    plain = render(kernel_of(SCORES.replace("B, H, ", "")))
    assert "const int L = 1;" in plain and "extents[3]" not in plain


@pytest.mark.parametrize("a", ["a : bf16[M, K] row", "a : bf16[M, K] col", "a : bf16[K, M] row", "a : bf16[K, M] col"])
@pytest.mark.parametrize("b", ["b : bf16[N, K] row", "b : bf16[N, K] col", "b : bf16[K, N] row", "b : bf16[K, N] col"])
def test_every_row_col_pair_of_a_and_b_passes_the_rules_and_renders(a, b):
    """bf16/f16 wgmma reads K-major and MN-major tiles of both operands, so every pair is legal on both targets."""
    for target in ("sm90", "sm100"):
        k = kernel_of(f"kernel k : gemm {{ target = {target} {a}  {b}  d : bf16[M, N] row }}")
        assert [d.code for d in arch.check_kernel(k)] == []
        values = template_values(k)
        a_k_major = k.a.contiguous_dim == "K"
        b_k_major = k.b.contiguous_dim == "K"
        assert values["layout_a"] == ("cutlass::layout::RowMajor" if a_k_major else "cutlass::layout::ColumnMajor")
        assert values["layout_b"] == ("cutlass::layout::ColumnMajor" if b_k_major else "cutlass::layout::RowMajor")


def test_tf32_still_needs_k_major_in_a_batched_kernel():
    k = kernel_of("kernel k : gemm { a : f32[L, M, K] col  b : f32[L, N, K] row  d : f32[L, M, N] row "
                  "tile = 128x128x32 }")
    assert [d.code for d in arch.check_kernel(k)] == ["sm90.tf32-k-major"]


def test_shipped_batched_kernels_parse_and_pass_the_rules():
    for name in ("batched_scores", "batched_bias"):
        k = lang.parse_file(KERNELS / f"{name}.ucut").kernel()
        assert k.batch and arch.check(k) == []


def _scores_problem(tmp_path: Path, workloads: list[dict]) -> Path:
    folder = tmp_path / "scores"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({
        "name": "scores", "description": "attention scores",
        "axes": {"B": {"type": "var"}, "H": {"type": "const", "value": 2}, "S": {"type": "var"},
                 "T": {"type": "var"}, "D": {"type": "const", "value": 64}},
        "inputs": {"q": {"shape": ["B", "H", "S", "D"], "dtype": "bfloat16"},
                   "k": {"shape": ["B", "H", "T", "D"], "dtype": "bfloat16"}},
        "outputs": {"s": {"shape": ["B", "H", "S", "T"], "dtype": "float32"}},
        "reference": "import torch\ndef run(q, k):\n    return (q.float() @ k.float().transpose(-1, -2)) * 0.125\n"}))
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"w{i}", "axes": axes, "inputs": {"q": {"type": "random"}, "k": {"type": "random"}}})
        + "\n" for i, axes in enumerate(workloads)))
    return folder


BOUND = """
kernel scores : gemm {
  a : bf16[B, H, M, K] row <- q
  b : bf16[B, H, N, K] row <- k
  d : f32[B, H, M, N] row -> s
  epilogue { d = acc * 0.125 }
}
"""


def test_bind_reads_batch_dims_from_the_tensors_and_lowers_auto_alignment(tmp_path):
    problem = load_problem(_scores_problem(tmp_path, [{"B": 2, "S": 128, "T": 256}, {"B": 3, "S": 100, "T": 1002}]))
    k = kernel_of(BOUND)
    binding = bind(k, problem)
    assert [binding.extents(w) for w in problem.workloads] == [
        {"B": 2, "H": 2, "M": 128, "K": 64, "N": 256}, {"B": 3, "H": 2, "M": 100, "K": 64, "N": 1002}]
    # N = 1002 f32 elements is not a multiple of 4 (16 bytes): auto lowers to 2 elements for every operand
    assert k.alignment is None and binding.kernel.alignment == 2
    assert binding.kernel.digest() != k.digest()
    assert arch.check(binding.kernel, binding.extents(problem.workloads[1])) == []
    (tmp_path / "x").mkdir()
    aligned = load_problem(_scores_problem(tmp_path / "x", [{"B": 2, "S": 100, "T": 256}]))
    assert bind(k, aligned).kernel is k  # 16 bytes serves it: auto stays TMA


def _argument_checker(kernel):
    """The runtime's argument checks without a compiled library (they run before any CUDA call)."""
    from ucutlass.runtime import CompiledKernel

    ck = CompiledKernel.__new__(CompiledKernel)
    ck.kernel, ck.abi, ck._inputs = kernel, abi_of(kernel), {i.name: i for i in kernel.epilogue_inputs}
    return ck


def test_runtime_reads_batched_operands_and_refuses_unpacked_batches():
    torch = pytest.importorskip("torch")
    from ucutlass.errors import KernelRuntimeError

    k = kernel_of("""kernel k : gemm { a : bf16[L, M, K] col  b : bf16[L, N, K] row  d : bf16[L, M, N] row
      epilogue { bias : bf16[L, N]  shared : bf16[M, N] row  d = acc + bias + shared } }""")
    ck, cpu, ext = _argument_checker(k), torch.device("cpu"), {}
    a = torch.zeros(3, 64, 40, dtype=torch.bfloat16).transpose(-1, -2)  # [L, M, K], M contiguous
    view = ck._matrix("a", a, k.a.dims, k.a.layout, k.a.dtype, ext, cpu, k.a.batch, 8)
    assert tuple(view.shape) == (40, 64) and ext == {"L": 3, "M": 40, "K": 64}
    ck._matrix("b", torch.zeros(3, 16, 64, dtype=torch.bfloat16), k.b.dims, k.b.layout, k.b.dtype, ext, cpu,
               k.b.batch, 8)
    with pytest.raises(KernelRuntimeError, match="batch dim L = 2, but another operand gives L = 3"):
        ck._matrix("d", torch.zeros(2, 40, 16, dtype=torch.bfloat16), k.d.dims, k.d.layout, k.d.dtype, dict(ext),
                   cpu, k.d.batch, 8)
    with pytest.raises(KernelRuntimeError, match=r"batch strides \(1280,\) are not packed \(expected \(640,\)"):
        ck._matrix("d", torch.zeros(3, 80, 16, dtype=torch.bfloat16)[:, :40], k.d.dims, k.d.layout, k.d.dtype,
                   dict(ext), cpu, k.d.batch, 8)
    with pytest.raises(KernelRuntimeError, match="shared by every batch and must be 2-D"):
        ck._matrix("shared", torch.zeros(3, 40, 16, dtype=torch.bfloat16), ("M", "N"), Layout.row, k.d.dtype,
                   dict(ext), cpu)
    ext["N"] = 16
    ck._vector("bias", torch.zeros(3, 16, dtype=torch.bfloat16), "N", k.d.dtype, ext, cpu, batches=3)
    with pytest.raises(KernelRuntimeError, match="3 batches × N = 16"):
        ck._vector("bias", torch.zeros(16, dtype=torch.bfloat16), "N", k.d.dtype, ext, cpu, batches=3)


def test_runtime_names_the_alignment_a_shape_needs():
    torch = pytest.importorskip("torch")
    from ucutlass.errors import KernelRuntimeError

    k = kernel_of("kernel k : gemm { a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row alignment = 4 }")
    ck, cpu = _argument_checker(k), torch.device("cpu")
    ck._matrix("a", torch.zeros(5, 12, dtype=torch.bfloat16), ("M", "K"), Layout.row, k.a.dtype, {}, cpu, (), 4)
    with pytest.raises(KernelRuntimeError, match=r"K = 10 is not a multiple of 4 elements.*alignment = 2 or less"):
        ck._matrix("a", torch.zeros(5, 10, dtype=torch.bfloat16), ("M", "K"), Layout.row, k.a.dtype, {}, cpu, (), 4)
    with pytest.raises(KernelRuntimeError, match=r"K = 12 × 2 bytes is not a multiple of 16; TMA"):
        ck._matrix("a", torch.zeros(5, 12, dtype=torch.bfloat16), ("M", "K"), Layout.row, k.a.dtype, {}, cpu)


def test_packed_batches_with_a_shared_b_run_as_one_gemm_of_all_rows():
    """L batches of a row-major a and d, each right after the one before, against one b: one GEMM of L·M rows
    (b read once, one ragged M tile instead of L); anything that tells the batches apart keeps the L GEMMs."""
    lm_head = """kernel k : gemm { a : bf16[B, M, K] row  b : bf16[N, K] row  d : bf16[B, M, N] row %s }"""
    m, n, k = 100, 256, 64
    packed = {"a": m * k, "b": 0, "d": m * n}
    ck = _argument_checker(kernel_of(lm_head % ""))
    assert ck._batches_are_rows(m, n, k, packed)
    assert not ck._batches_are_rows(m, n, k, {**packed, "a": 128 * k})  # a slice [:, -100:] of 128 positions
    assert not ck._batches_are_rows(m, n, k, {**packed, "d": 128 * n})
    bias = _argument_checker(kernel_of(lm_head % "epilogue { bias : bf16[N]  d = acc + bias }"))
    assert bias._batches_are_rows(m, n, k, packed)  # one bias row for every row of every batch
    per_row = _argument_checker(kernel_of(lm_head % "epilogue { s : f32[M]  d = acc * s }"))
    assert not per_row._batches_are_rows(m, n, k, packed)  # [M] is repeated per batch, not [L·M]
    per_batch = _argument_checker(kernel_of(lm_head % "epilogue { bias : bf16[B, N]  d = acc + bias }"))
    assert not per_batch._batches_are_rows(m, n, k, packed)
    own_b = _argument_checker(kernel_of(lm_head.replace("b : bf16[N, K]", "b : bf16[B, N, K]") % ""))
    assert not own_b._batches_are_rows(m, n, k, {**packed, "b": n * k})
    col_a = _argument_checker(kernel_of(lm_head.replace("a : bf16[B, M, K] row", "a : bf16[B, M, K] col") % ""))
    assert not col_a._batches_are_rows(m, n, k, packed)
