"""Epilogue trees with extra outputs, row/column reductions and casts: lowering, errors, rendering, smem, nvcc.

The DAG (Sm90TopologicalVisitor) that a kernel with extra outputs renders to is checked for its shape here;
tests/test_evt_gpu.py checks the kernels' results on the H200 against fp64 references.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from ucutlass import arch, codegen, ir, lang
from ucutlass.arch import sm90, sm100
from ucutlass.lang import parse, parse_file
from ucutlass.errors import UcutSyntaxError

KERNELS = Path(__file__).parent / "kernels"

OUTPUTS = """
kernel k : gemm {
  a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row -> out
  tile = 128x128x64   schedule = cooperative
  epilogue {
    bias   : bf16[N] <- b1
    pre    : bf16[M, N] row -> pre_act
    rowmax : f32[M] -> row_max
    colsum : f32[N] -> col_sum
    pre = acc + bias
    y = gelu(pre)
    rowmax = max_n(cast(y, bf16))
    colsum = sum_m(y)
    d = y
  }
}
"""


def kernel_of(text: str) -> ir.GemmKernel:
    return parse(text).kernel()


def with_epilogue(body: str, target: str = "sm90") -> str:
    return (f"kernel k : gemm {{\n  target = {target}\n  a : bf16[M, K] row   b : bf16[N, K] row   "
            f"d : bf16[M, N] row\n  epilogue {{\n{body}\n  }}\n}}\n")


def errors_of(body: str) -> list:
    with pytest.raises(UcutSyntaxError) as info:
        parse(with_epilogue(body), "e.ucut")
    return info.value.diagnostics


# --- lowering ----------------------------------------------------------------------------------------------

def test_outputs_lower_with_kinds_reductions_and_the_stored_value():
    k = kernel_of(OUTPUTS)
    outs = {o.name: o for o in k.epilogue_outputs}
    assert list(outs) == ["pre", "rowmax", "colsum"]
    assert outs["pre"].kind is ir.EpilogueInputKind.matrix and outs["pre"].reduce is None
    assert outs["rowmax"].kind is ir.EpilogueInputKind.col_vector and outs["rowmax"].reduce == "max"
    assert outs["colsum"].kind is ir.EpilogueInputKind.row_vector and outs["colsum"].reduce == "sum"
    assert outs["pre"].binding == "pre_act" and outs["rowmax"].dtype is ir.DType.f32
    # pre is bf16: what it stores, and what later statements read, is acc + bias rounded to bf16
    stored = outs["pre"].value
    assert stored == ir.Cast(ir.DType.bf16, ir.Binary("+", ir.Acc(), ir.Ref("bias")))
    assert k.epilogue == ir.Unary("gelu", stored)
    assert outs["colsum"].value == k.epilogue  # the reduction reads y itself (f32)
    assert outs["rowmax"].value == ir.Cast(ir.DType.bf16, k.epilogue)  # ... this one y as rounded to bf16
    assert ir.expr_to_text(outs["rowmax"].value) == "cast(gelu(cast((acc + bias), bf16)), bf16)"


def test_f32_outputs_and_casts_to_f32_are_not_rounded():
    k = kernel_of(with_epilogue("pre : f32[M, N] row -> p\n pre = acc * 2\n d = cast(pre, f32) + 1"))
    assert k.epilogue == ir.Binary("+", ir.Binary("*", ir.Acc(), ir.Const(2.0)), ir.Const(1.0))
    assert not any(isinstance(n, ir.Cast) for n in ir.walk(k.epilogue))


def test_a_cast_is_an_expression_anywhere():
    k = kernel_of(with_epilogue("d = silu(cast(acc, f16)) * cast(cast(acc, bf16), bf16)"))
    casts = [n for n in ir.walk(k.epilogue) if isinstance(n, ir.Cast)]
    assert [c.dtype for c in casts] == [ir.DType.f16, ir.DType.bf16]  # a second cast to bf16 is dropped


@pytest.mark.parametrize("body,code,line,col,text", [
    ("r : bf16[M] -> r_out\n r = max_n(acc)\n d = acc", "bad-output", 1, 5, "f32"),
    ("p : bf16[M, K] row -> p_out\n p = acc\n d = acc", "bad-output", 1, 9, "[M, N]"),
    ("s : f32 -> s_out\n s = sum_n(acc)\n d = acc", "bad-output", 1, 1, "[M]"),
    ("r : f32[M] -> r_out\n r = sum_n(acc)\n d = acc + r", "reads-output", 3, 12, "reduction output"),
    ("r : f32[N] -> r_out\n r = max_n(acc)\n d = acc", "bad-output", 2, 6, "max_m"),
    ("r : f32[M] -> r_out\n r = acc * 2\n d = acc", "bad-output", 2, 2, "max_n"),
    ("d = acc + max_n(acc)", "bad-call", 1, 11, "output declared [M]"),
    ("d = cast(acc, bf17)", "bad-call", 1, 15, "dtype"),
    ("d = cast(acc)", "bad-call", 1, 5, "dtype"),
    ("p : bf16[M, N] row -> p_out\n d = acc", "missing-output", 1, 1, "never assigned"),
    ("p : bf16[M, N] row -> p_out\n d = acc\n p = acc", "bad-assignment", 3, 2, "last"),
    ("p : bf16[M, N] row -> p_out\n d = p + acc\n", "undefined-name", 2, 6, "before"),
    ("r : f32[M] row -> r_out\n r = sum_n(acc)\n d = acc", "bad-layout", 1, 12, "[M, N]"),
    ("p : bf16[M, N] -> p_out\n p = acc\n p = acc\n d = p", "bad-assignment", 3, 2, "twice"),
])
def test_illegal_trees_are_errors_with_line_and_column(body, code, line, col, text):
    diags = [d for d in errors_of(body) if d.code == code]
    assert diags, errors_of(body)
    d = diags[0]
    # the body starts on line 5, column 1 of the generated kernel text
    assert (d.pos.line - 4, d.pos.column) == (line, col), (d.pos, d.message)
    assert text in d.message or text in d.valid, d.message
    assert d.format().startswith(f"e.ucut:{d.pos.line}:{d.pos.column}: error:")


def test_reading_an_output_gives_the_value_once_computed():
    k = kernel_of(with_epilogue("pre : bf16[M, N] row -> p\n pre = acc * 3\n d = pre * sigmoid(pre)"))
    (out,) = k.epilogue_outputs
    assert k.epilogue == ir.Binary("*", out.value, ir.Unary("sigmoid", out.value))


# --- rendering -------------------------------------------------------------------------------------------

def dag_ops(src: str) -> list[tuple[str, str]]:
    return re.findall(r"^using (EvtNode\d+) = fusion::(\w+)", src, re.M)


def dag_edges(src: str) -> list[list[int]]:
    block = re.search(r"Sm90TopologicalVisitor<ElementCompute, cute::tuple<\s*(.*?)>,\s*\n", src, re.S).group(1)
    return [[int(x) for x in re.findall(r"\d+", seq)] for seq in re.findall(r"cute::seq<([^>]*)>", block)]


def test_outputs_render_one_topological_dag_with_shared_nodes():
    k = kernel_of(OUTPUTS)
    src = codegen.render(k)
    ops = dag_ops(src)
    kinds = [kind for _, kind in ops]
    # acc and bias are fetched once; acc + bias, its bf16 rounding and gelu are computed once
    assert kinds.count("Sm90AccFetch") == 1 and kinds.count("Sm90RowBroadcast") == 1
    assert kinds.count("Sm90AuxStore") == 1 and kinds.count("Sm90ColReduction") == 1
    assert kinds.count("Sm90RowReduction") == 1
    assert sum("thread::GELU," in line for line in src.splitlines() if line.startswith("using EvtNode")) == 1
    edges = dag_edges(src)
    assert len(edges) == len(ops)
    assert all(all(c < i for c in e) for i, e in enumerate(edges))  # topological order
    index = {alias: i for i, (alias, _) in enumerate(ops)}
    store = next(i for i, (_, kind) in enumerate(ops) if kind == "Sm90AuxStore")
    gelu = next(i for i, line in enumerate(l for l in src.splitlines() if l.startswith("using EvtNode"))
                if "thread::GELU," in line)
    assert edges[store] == edges[gelu]  # the stored value is what gelu reads (the bf16 rounding of acc + bias)
    assert "Identity, cutlass::bfloat16_t, ElementCompute" in src  # the cast node
    root = ops[-1][0]
    assert f"using {root} = fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD," in src
    assert len(index) == len(ops)
    assert "Sm90ColReduction<UcutMaximum, UcutMaximum, UcutMaximum, 0, TileShape, float," in src
    assert "Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0, TileShape, float," in src
    assert "template <class T> using UcutMaximum = cutlass::maximum<T>;" in src
    assert "AuxStoreDescriptor<EpiDesc, cutlass::layout::RowMajor, cutlass::bfloat16_t>" in src
    # one argument per op, in order; the outputs' pointers come after the inputs' in the ABI
    assert codegen.abi_of(k).ptr_names == ("a", "b", "d", "bias", "pre", "rowmax", "colsum")
    args = re.search(r"args\.epilogue\.thread = \{ (.*) \};", src).group(1)
    assert "static_cast<cutlass::bfloat16_t*>(ptrs[4])" in args
    assert "{ptrs[5], -cutlass::platform::numeric_limits<ElementCompute>::infinity(), {}}" in args
    assert "{ptrs[6], ElementCompute(0), {}}" in args
    info = json.loads(re.search(r'R"UCUTINFO\((.*)\)UCUTINFO"', src).group(1))
    assert info["ptrs"] == ["a", "b", "d", "bias", "pre", "rowmax", "colsum"]


def test_cast_without_outputs_stays_a_tree():
    src = codegen.render(kernel_of(with_epilogue("bias : bf16[N]\n d = gelu(cast(acc + bias, bf16))")))
    assert "Sm90TopologicalVisitor" not in src
    assert re.search(r"Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, cutlass::bfloat16_t, "
                     r"ElementCompute, RoundStyle>,\s*EvtNode\d+>;  // cast\(\(acc \+ bias\), bf16\)", src)


def test_sm100_renders_the_same_dag_on_its_cta_tile():
    text = OUTPUTS.replace("tile = 128x128x64   schedule = cooperative",
                           "target = sm100   tile = 256x128x64   cluster = 2x1x1")
    src90, src100 = codegen.render(kernel_of(OUTPUTS)), codegen.render(kernel_of(text))
    assert [kind for _, kind in dag_ops(src90)] == [kind for _, kind in dag_ops(src100)]
    assert dag_edges(src90) == dag_edges(src100)
    assert "Sm100AuxStoreDescriptor<EpiDesc, cutlass::layout::RowMajor, cutlass::bfloat16_t>" in src100
    assert "Sm90ColReduction<UcutMaximum, UcutMaximum, UcutMaximum, 0, CtaTileShape," in src100


# --- shared memory -------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch,text", [(sm90, OUTPUTS), (sm100, OUTPUTS.replace("schedule = cooperative",
                                                                                 "target = sm100"))])
def test_smem_model_counts_the_aux_store_and_not_the_reductions(arch, text):
    k = kernel_of(text)
    pre, rowmax, colsum = k.epilogue_outputs
    no_outputs = dataclasses.replace(k, epilogue_outputs=())
    only_reductions = dataclasses.replace(k, epilogue_outputs=(rowmax, colsum))
    epi_m, epi_n = arch.epilogue_tile(k)
    stages_d = arch._epilogue_stages(k)[1]
    assert arch.epilogue_smem_bytes(only_reductions) == arch.epilogue_smem_bytes(no_outputs)
    assert arch.epilogue_smem_bytes(k) == arch.epilogue_smem_bytes(no_outputs) + epi_m * epi_n * stages_d * 2
    assert arch.auto_stages(k) <= arch.auto_stages(no_outputs)


# sizeof(CollectiveEpilogue::SharedStorage), sizeof(GemmKernel::SharedStorage) and the mainloop stages that
# `auto` gets, printed by a host program that includes the generated translation unit (nvcc 13.0, CUTLASS 4.2).
MEASURED = [
    ("evt_outputs.ucut", None, 33792, 230400, 6),
    ("evt_reduce_pingpong.ucut", None, 33792, 230400, 8),
    ("evt_outputs.ucut", "target = sm100   tile = 256x128x64   cluster = 2x1x1   schedule = warpspecialized_2sm",
     33792, 230400, 8),
]


@pytest.mark.parametrize("name,sm100_settings,epi,total,stages", MEASURED)
def test_smem_model_matches_sizeof_with_extra_outputs(name, sm100_settings, epi, total, stages):
    text = (KERNELS / name).read_text()
    if sm100_settings:
        text = text.replace("tile = 128x128x64   schedule = cooperative", sm100_settings)
    k = kernel_of(text)
    arch = sm100 if sm100_settings else sm90
    assert k.target is (ir.Target.sm100 if sm100_settings else ir.Target.sm90)
    assert (arch.epilogue_smem_bytes(k), arch.smem_bytes(k), arch.auto_stages(k)) == (epi, total, stages)


# --- rules and binding -----------------------------------------------------------------------------------

def test_an_extra_output_is_stored_by_tma_and_must_be_16_byte_aligned():
    k = kernel_of(with_epilogue("z : f32[M, N] col -> z_out\n z = acc\n d = z"))
    diags = [d for d in arch.check(k, {"M": 77, "N": 256, "K": 64}) if d.code.endswith(".align")]
    assert len(diags) == 1 and "z" in diags[0].message  # z is M-contiguous: 77 f32 is not 16 bytes
    assert arch.check(k, {"M": 80, "N": 256, "K": 64}) == []


def _problem(tmp_path: Path):
    from ucutlass.problem import load_problem

    folder = tmp_path / "aux"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({
        "name": "aux", "description": "linear + gelu keeping the pre-activation and the row max",
        "axes": {"T": {"type": "var"}, "N": {"type": "const", "value": 256}, "K": {"type": "const", "value": 128}},
        "inputs": {"x": {"shape": ["T", "K"], "dtype": "bfloat16"}, "w": {"shape": ["N", "K"], "dtype": "bfloat16"},
                   "b1": {"shape": ["N"], "dtype": "bfloat16"}},
        "outputs": {"out": {"shape": ["T", "N"], "dtype": "bfloat16"},
                    "pre_act": {"shape": ["T", "N"], "dtype": "bfloat16"},
                    "row_max": {"shape": ["T"], "dtype": "float32"}},
        "reference": "import torch\ndef run(x, w, b1):\n    pre = x @ w.T + b1\n    out = torch.nn.functional.gelu(pre)"
                     "\n    return out, pre, out.float().amax(-1)\n"}))
    (folder / "workload.jsonl").write_text(json.dumps({"uuid": "w0", "axes": {"T": 96}, "inputs": {
        "x": {"type": "random"}, "w": {"type": "random"}, "b1": {"type": "random"}}}) + "\n")
    return load_problem(folder)


def test_extra_outputs_bind_to_problem_outputs_in_abi_order(tmp_path):
    from ucutlass.bind import bind

    k = kernel_of("""
    kernel k : gemm {
      a : bf16[M, K] row <- x   b : bf16[N, K] row <- w   d : bf16[M, N] row -> out
      epilogue { bias : bf16[N] <- b1   pre : bf16[M, N] row -> pre_act   rmax : f32[M] -> row_max
                 pre = acc + bias   y = gelu(pre)   rmax = max_n(cast(y, bf16))   d = y }
    }""")
    problem = _problem(tmp_path)
    binding = bind(k, problem)
    assert binding.extents(problem.workloads[0]) == {"M": 96, "K": 128, "N": 256}

    class Fake:  # records the ABI-ordered arguments the bound callable passes
        abi = codegen.abi_of(k)
        got: list = []

        def call(self, values):
            self.got[:] = values

    fake = Fake()
    binding.callable(fake)("X", "W", "B1", "OUT", "PRE", "RMAX")  # the problem's order: inputs, then outputs
    assert fake.abi.ptr_names == ("a", "b", "d", "bias", "pre", "rmax")
    assert fake.got == ["X", "W", "OUT", "B1", "PRE", "RMAX"]
    from ucutlass.errors import CheckError

    with pytest.raises(CheckError, match="row_max"):  # a problem output no operand writes is named
        bind(dataclasses.replace(k, epilogue_outputs=k.epilogue_outputs[:1]), problem)


# --- nvcc ------------------------------------------------------------------------------------------------

@pytest.mark.nvcc
def test_extra_output_and_reductions_compile_with_nvcc(tmp_path_factory):
    """The SM90 DAG with an AuxStore, a max ColReduction, a sum RowReduction and a cast compiles and loads."""
    from ucutlass.build import build_kernels
    from ucutlass.runtime import CompiledKernel

    kernel = parse_file(KERNELS / "evt_outputs.ucut").kernel()
    (result,) = build_kernels([kernel], root=tmp_path_factory.mktemp("evt-cache"), timeout_s=900)
    assert result.ok, result.log[-3000:]
    assert not result.cached
    loaded = CompiledKernel(result.so_path, kernel)
    assert loaded.info["ptrs"] == ["a", "b", "d", "bias", "pre", "rowmax", "colsum"]
