"""Convolutions (``kernel NAME : conv``, issue 21): the language, the sm90 and sm100 rules, the render, the binding
and the emulation against torch, on the CPU; one real nvcc compile (marker ``nvcc``). The compiled kernels against
torch on the H200: tests/test_conv_gpu.py."""

from __future__ import annotations

import ctypes
import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from shared_data import REPO

from ucutlass import arch
from ucutlass.bind import bind
from ucutlass.codegen import abi_of, render
from ucutlass.emulate import emulate_kernel
from ucutlass.errors import CheckError, KernelRuntimeError, UcutSyntaxError
from ucutlass.ir import ConvKernel, EpilogueInputKind, Schedule, Target
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem, load_problem

PROBLEM = "whisper_conv2_gelu_base"
SHIPPED = REPO / "problems" / PROBLEM / "kernel.ucut"

#: (rank, activation, filter, output dims, extents, stride, padding, dilation): the three ranks, strides 1 and 2.
CASES = {
    1: ("[N, W, C]", "[K, S, C]", "[N, Q, K]", dict(N=2, W=37, C=16, K=24, S=3), (2,), (1,), (1,)),
    2: ("[N, H, W, C]", "[K, R, S, C]", "[N, P, Q, K]", dict(N=2, H=9, W=11, C=8, K=16, R=3, S=3), (2, 1), (1, 0),
        (1, 2)),
    3: ("[N, D, H, W, C]", "[K, T, R, S, C]", "[N, Z, P, Q, K]", dict(N=1, D=5, H=6, W=7, C=8, K=8, T=3, R=3, S=3),
        (1, 1, 1), (1, 1, 1), (1, 1, 1)),
}


def conv_source(rank: int, epilogue: str = "bias : bf16[K]   d = relu(acc + bias) * 0.5", extra: str = "") -> str:
    act, flt, out, _, stride, padding, dilation = CASES[rank]
    spell = lambda t: "x".join(map(str, t)) if len(t) > 1 else str(t[0])  # noqa: E731
    return (f"kernel c{rank}d : conv {{\n  a : bf16{act}\n  b : bf16{flt}\n  d : bf16{out}\n"
            f"  stride = {spell(stride)}   padding = {spell(padding)}   dilation = {spell(dilation)}\n"
            f"  tile = 128x64x64 {extra}\n  epilogue {{ {epilogue} }}\n}}\n")


def errors(text: str, file: str = "bad.ucut"):
    """The diagnostics of parsing ``text`` (with ``check``'s rules)."""
    with pytest.raises(UcutSyntaxError) as e:
        parse(text, file)
    return e.value.diagnostics


# --- language ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [1, 2, 3])
def test_parse_every_rank(rank):
    k = parse(conv_source(rank)).kernel()
    act, flt, out, _, stride, padding, dilation = CASES[rank]
    assert isinstance(k, ConvKernel) and k.family == "conv" and k.rank == rank
    assert k.a.dims == tuple(act.strip("[]").split(", ")) and k.b.dims == tuple(flt.strip("[]").split(", "))
    assert k.d.dims == tuple(out.strip("[]").split(", "))
    assert (k.stride, k.padding, k.dilation, k.group_count) == (stride, padding, dilation, 1)
    (bias,) = k.epilogue_inputs
    assert bias.dims == ("K",) and bias.kind is EpilogueInputKind.row_vector  # per output channel: GEMM N
    assert f"conv{rank}d_s" in k.config_name()


def test_one_number_is_every_spatial_dim():
    k = parse(conv_source(2).replace("stride = 2x1", "stride = 2").replace("dilation = 1x2", "dilation = 3")).kernel()
    assert k.stride == (2, 2) and k.dilation == (3, 3) and k.padding == (1, 0)


@pytest.mark.parametrize("change, code, line, col, valid", [
    (("b : bf16[K, R, S, C]", "b : bf16[K, S, R, C]"), "bad-dims", 3, 11, "[K, R, S, C]"),
    (("d : bf16[N, P, Q, K]", "d : bf16[N, P, Q, K] col"), "bad-layout", 4, 24, "row"),
    (("stride = 2x1", "stride = 2x1x1"), "bad-value", 5, 12, "2x2"),
    (("stride = 2x1", "stride = {1, 2}"), "choice-not-allowed", 5, 12, None),
    (("stride = 2x1", "strides = 2x1"), "unknown-setting", 5, 3, "stride"),
    (("bias : bf16[K]", "bias : bf16[N, K]"), "unsupported", 7, 25, "[K]"),
    (("bias : bf16[K]", "bias : bf16[K] -> out_bias"), "bad-output", 7, 21, "f32"),
    (("  b : bf16", "  c : bf16[N, Q, K]\n  b : bf16"), "bad-dims", 3, 11, "[N, P, Q, K]"),
    (("  b : bf16", "  c : bf16[N, P, Q, K]\n  b : bf16"), "unused-input", 3, 3, None),
    (("padding = 1x0", "padding = -1"), "bad-value", 5, 28, None),         # worded, not grammar jargon
])
def test_bad_programs_get_positioned_errors(change, code, line, col, valid):
    diags = errors(conv_source(2).replace(*change))
    d = next(d for d in diags if d.code == code)
    assert (d.pos.line, d.pos.column) == (line, col), d
    if valid:
        assert valid in d.valid, d


def test_missing_operand_names_what_to_write():
    (d,) = [d for d in errors(conv_source(1).replace("  d : bf16[N, Q, K]\n", "").replace("d = relu", "d = relu"))
            if d.code == "missing-operand"]
    assert "d (output)" in d.message or "missing: d" in d.message
    assert any("d : bf16[N, P, Q, K]" in v for v in d.valid)


def test_a_source_c_shaped_like_d():
    k = parse(conv_source(2, "bias : bf16[K]   d = relu(acc + bias) + 0.5 * c").replace(
        "  d : bf16", "  c : f16[N, P, Q, K] <- res\n  d : bf16")).kernel()
    assert k.c.dims == k.d.dims and k.c.binding == "res" and [op.name for op in k.operands] == ["a", "b", "c", "d"]
    assert abi_of(k).ptr_names == ("a", "b", "c", "d", "bias")
    cu = render(k)
    assert "using ElementC = cutlass::half_t;" in cu and "static_cast<ElementC const*>(ptrs[2])" in cu
    assert "Sm90SrcFetch" in cu


STATS = """kernel stats : conv {
  a : bf16[N, H, W, C]
  b : bf16[K, R, S, C]
  c : bf16[N, P, Q, K]
  d : bf16[N, P, Q, K]
  stride = 2   padding = 1
  epilogue {
    bias : bf16[K]
    csum : f32[K] -> ch_sum   cmax : f32[K] -> ch_max
    y = gelu(acc + bias)   csum = sum_m(y)   cmax = max_m(y)   d = y + c
  }
}
"""


def test_per_channel_reductions():
    """[K] outputs are the implicit GEMM's [N] reduced over the output pixels, in the language and emulation, refused
    by the rules of both targets; tensors shaped like d other than c and d are refused (CUTLASS's aux TMA takes a GEMM's [M, N])."""
    k = parse(STATS).kernel()
    assert [(o.name, o.dims, o.reduce) for o in k.epilogue_outputs] == [("csum", ("K",), "sum"),
                                                                         ("cmax", ("K",), "max")]
    assert abi_of(k).ptr_names == ("a", "b", "c", "d", "bias", "csum", "cmax")
    # refused before nvcc on sm90 too: compiled, they read NaN on the H200 (no epilogue workspace in the conv kernel)
    (d,) = arch.check_kernel(k)
    assert d.code == "sm90.conv-epilogue" and "csum, cmax" in d.message
    sm100 = dataclasses.replace(k, target=Target.sm100, schedule=Schedule.auto)
    (d,) = arch.check_kernel(sm100)
    assert d.code == "sm100.conv-epilogue" and "csum, cmax" in d.message
    (d,) = [d for d in errors(STATS.replace("bias : bf16[K]", "bias : bf16[K]   res : bf16[N, P, Q, K]"))
            if d.code == "unsupported"]
    assert "res is over [N, P, Q, K]" in d.message and "operand c" in d.message and d.pos.line == 8


def test_emulation_of_reductions_matches_torch():
    k = parse(STATS).kernel()
    torch.manual_seed(3)
    x, w = torch.randn(2, 9, 9, 16).to(torch.bfloat16), (torch.randn(32, 3, 3, 16) * 0.1).to(torch.bfloat16)
    bias = torch.randn(32).to(torch.bfloat16)
    y = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), stride=2, padding=1).permute(0, 2, 3, 1)
    res = torch.randn(y.shape).to(torch.bfloat16)
    d, csum, cmax = torch.empty(y.shape, dtype=torch.bfloat16), torch.empty(32), torch.empty(32)
    emulate_kernel(k).call([x, w, res, d, bias, csum, cmax])
    g = F.gelu(y + bias.double())
    torch.testing.assert_close(d.double(), g + res.double(), atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(csum.double(), g.sum((0, 1, 2)), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(cmax.double(), g.amax((0, 1, 2)), atol=1e-5, rtol=1e-5)


# --- rules ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, code", [
    ("schedule = cooperative", "sm90.conv-schedule"),
    ("scheduler = stream_k", "sm90.conv-scheduler"),
    ("split_k = 2", "sm90.conv-scheduler"),
    ("groups = 2", "sm90.conv-groups"),
    ("alignment = 4", "sm90.conv-alignment"),
    ("target = sm100   schedule = warpspecialized", "sm100.conv-schedule"),
    ("target = sm100   scheduler = stream_k", "sm100.conv-scheduler"),
])
def test_rules_refuse_what_cutlass_conv_cannot_build(extra, code):
    k = parse(conv_source(2, extra=extra), "r.ucut").kernel()
    diags = arch.check_kernel(k)
    assert code in {d.code for d in diags}, diags
    d = next(d for d in diags if d.code == code)
    assert d.pos.line == 6 and d.valid  # at the setting, with what to write instead


def test_sm100_conv_takes_the_sm100_gemm_rules():
    """target = sm100: the tcgen05 conv (compile-only here); auto is 2sm with an even cluster M, the sm100 tile rules
    apply to the MMA tile, and the render takes the SM100 builder, schedules and the CTA tile for the EVT."""
    k = parse(conv_source(2, extra="target = sm100   cluster = 2x1x1").replace("128x64x64", "256x128x64")).kernel()
    assert arch.check_kernel(k) == [] and arch.resolve_schedule(k) is Schedule.warpspecialized_2sm
    cu = render(k)
    assert "cutlass::conv::KernelImplicitTmaWarpSpecialized2SmSm100" in cu and "TmaWarpSpecialized2Sm;" in cu
    assert "using CtaTileShape = Shape<_128, _128, _64>;" in cu and "Sm90RowBroadcast<0, CtaTileShape" in cu
    assert "GemmUniversalMode" not in cu  # the SM100 ConvUniversal's Arguments start at the problem shape
    bad = dataclasses.replace(k, tile=(64, 128, 64), schedule=Schedule.warpspecialized_2sm)  # 2sm: M 128 or 256
    assert "sm100.tile-m" in {d.code for d in arch.check_kernel(bad)}


def test_fp8_inputs_are_refused():
    k = parse(conv_source(1).replace("a : bf16", "a : f8e4m3").replace("b : bf16", "b : f8e4m3")).kernel()
    assert {d.code for d in arch.check_kernel(k)} == {"sm90.conv-dtype"}


def test_gemm_rules_apply_to_the_implicit_gemm():
    """Tile, cluster and shared memory are the sm90 GEMM rules on the GEMM view (warpspecialized: tile M 64 or 128)."""
    k = parse(conv_source(2).replace("tile = 128x64x64", "tile = 256x128x64")).kernel()
    assert "sm90.warpspecialized-tile-m" in {d.code for d in arch.check_kernel(k)}
    assert arch.resolve_schedule(k) is Schedule.warpspecialized
    ok = parse(conv_source(2)).kernel()
    assert arch.check_kernel(ok) == []


def test_extents_rules():
    k = parse(conv_source(2)).kernel()
    good = dict(CASES[2][3], P=5, Q=7)
    assert arch.check_kernel(k, good) == []
    diags = arch.check_kernel(k, dict(good, C=12))  # 24 bytes: not a multiple of 16
    assert {d.code for d in diags} == {"sm90.conv-align"} and "16" in diags[0].valid  # C = 12 → 8 or 16
    for padding in ((129, 0), (300, 0)):  # 2-D im2col: corners within ±128 (padding ≤ 256): no extents needed
        wide = dataclasses.replace(k, padding=padding)
        assert "sm90.conv-extents" in {d.code for d in arch.check_kernel(wide)}
    far = dataclasses.replace(k, padding=(1, 0), dilation=(100, 1))  # upper corner 1 - (R-1)·100 = -199 < -128
    assert "sm90.conv-extents" in {d.code for d in arch.check_kernel(far, dict(good, H=400))}
    assert arch.check_kernel(dataclasses.replace(k, padding=(128, 0)), dict(good, H=300)) == []


def test_every_combination_of_the_shipped_program_is_legal():
    (k,) = parse_file(SHIPPED).kernels
    legal, rejected = arch.legal_combinations(k, {"N": 1, "W": 3000, "C": 512, "K": 512, "S": 3, "Q": 1500})
    assert len(legal) == 6 and rejected == []
    wide = arch.legal_combinations(dataclasses.replace(k, schedule=Schedule.cooperative))
    assert wide[0] == [] and {d.code for _, ds in wide[1] for d in ds} >= {"sm90.conv-schedule"}


# --- render --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank, layout", [(1, "TensorNWC"), (2, "TensorNHWC"), (3, "TensorNDHWC")])
def test_render(rank, layout):
    k = parse(conv_source(rank)).kernel()
    cu = render(k, "t.ucut")
    assert f"using LayoutA = cutlass::layout::{layout};" in cu and "cutlass::conv::Operator::kFprop" in cu
    assert "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90" in cu and "TmaWarpSpecialized;" in cu
    assert "Sm90RowBroadcast" in cu and "cutlass::epilogue::thread::ReLu" in cu and "0.5f" in cu
    _, _, _, _, stride, padding, dilation = CASES[rank]
    assert f"{{ {', '.join(map(str, stride))} }},  // traversal stride" in cu
    assert f"{{ {', '.join(map(str, padding))} }},  // lower padding" in cu
    assert f"{{ {', '.join(map(str, dilation))} }},  // dilation" in cu
    info = json.loads(cu.split('R"UCUTINFO(')[1].split(')UCUTINFO"')[0])
    assert info["family"] == "conv" and info["ptrs"] == ["a", "b", "d", "bias"]
    assert info["extents"] == list(abi_of(k).extents) == list(k.a.dims) + ["K"] + list(k.b.dims[1:-1])
    assert info["digest"] == k.build_digest()


def test_render_refuses_a_broken_rule():
    k = parse(conv_source(1, extra="schedule = pingpong")).kernel()
    with pytest.raises(CheckError) as e:
        render(k)
    assert "sm90.conv-schedule" in {d.code for d in e.value.diagnostics}


# --- binding -------------------------------------------------------------------------------------------------------

def _shipped_kernel(text: str | None = None):
    program = parse(text if text is not None else SHIPPED.read_text(), str(SHIPPED))
    return program.resolve({key: c.options[0] for key, c in program.choices().items()}).kernel()


def test_the_shipped_program_binds():
    problem = find_problem(PROBLEM)
    binding = bind(_shipped_kernel(), problem)
    assert binding.extents(problem.workloads[0]) == {"N": 1, "W": 3000, "C": 512, "K": 512, "S": 3, "Q": 1500}


def test_an_open_program_binds_and_check_runs_the_rules_over_its_choices():
    problem = find_problem(PROBLEM)
    k = parse_file(SHIPPED).kernel()
    assert k.choices() and bind(k, problem).kernel is k  # the rules of the extents: arch.check per combination
    assert [d.code for d in arch.check(k, bind(k, problem).extents(problem.workloads[0]))] == ["choices"]


def test_the_problem_reference_is_within_its_tolerance_of_fp64():
    """The bf16 reference (its conv rounded before GELU) is within the workload's tolerance of an fp64 evaluation."""
    p = find_problem(PROBLEM)
    w = p.workloads[0]
    mod = p.reference_module()
    inputs = p.make_inputs(w, device="cpu", seed=1, module=mod)
    (ref,) = p.run_reference(inputs, module=mod).values()
    (truth,) = p.run_reference({k: v.double() for k, v in inputs.items()}, module=mod).values()
    assert tuple(ref.shape) == (1, 1500, 512) and 0.3 < ref.float().std().item() < 3.0  # O(1) outputs
    tol = w.tolerance
    matched = ((ref.double() - truth).abs() <= tol.max_atol + tol.max_rtol * truth.abs()).double().mean().item()
    assert matched == 1.0


def test_a_stride_that_does_not_give_the_output_is_a_positioned_error():
    text = SHIPPED.read_text().replace("stride = 2", "stride = 1")
    with pytest.raises(CheckError) as e:
        bind(_shipped_kernel(text), find_problem(PROBLEM))
    (d,) = [d for d in e.value.diagnostics if d.code == "bind-extent"]
    assert "Q = 1500" in d.message and "gives Q" in d.message and d.valid == ("3000",)
    assert d.pos.line == 6  # at d's declaration


def test_a_filter_that_does_not_match_is_a_positioned_error(tmp_path):
    """The filter's C must be the activation's: a problem whose weight has other input channels does not bind."""
    src = REPO / "problems" / PROBLEM
    definition = json.loads((src / "definition.json").read_text())
    definition["axes"]["in_channels"] = {"type": "const", "value": 256}
    definition["inputs"]["conv_weight"]["shape"] = ["d_model", "kernel_size", "in_channels"]
    folder = tmp_path / "bad_filter"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text((src / "workload.jsonl").read_text())
    with pytest.raises(CheckError) as e:
        bind(_shipped_kernel(), load_problem(folder))
    (d,) = [d for d in e.value.diagnostics if d.code == "bind-extent"]
    assert "C = 256" in d.message and "C = 512" in d.message and d.pos.line == 5  # at b's declaration


def test_channels_first_tensors_are_named(tmp_path):
    """A problem in torch's own layout (x [N, C, W], weight [K, C, S]) does not bind to a channels-last conv, and the
    error says why."""
    src = REPO / "problems" / PROBLEM
    definition = json.loads((src / "definition.json").read_text())
    definition["inputs"]["hidden_states"]["shape"] = ["batch_size", "d_model", "num_frames"]
    definition["inputs"]["conv_weight"]["shape"] = ["d_model", "d_model", "kernel_size"]
    definition["outputs"]["output"]["shape"] = ["batch_size", "d_model", "out_frames"]
    folder = tmp_path / "ncw"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text((src / "workload.jsonl").read_text())
    with pytest.raises(CheckError) as e:
        bind(_shipped_kernel(), load_problem(folder))
    assert any(d.code == "bind-extent" and "look channels first" in d.message and "NCW" in d.message
               for d in e.value.diagnostics), e.value.diagnostics


def test_unaligned_channels_are_refused_at_binding(tmp_path):
    src = REPO / "problems" / PROBLEM
    definition = json.loads((src / "definition.json").read_text())
    definition["axes"]["d_model"]["value"] = 514  # not a multiple of 8 bf16 channels
    folder = tmp_path / "ragged"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text((src / "workload.jsonl").read_text())
    with pytest.raises(CheckError) as e:
        bind(_shipped_kernel(), load_problem(folder))
    codes = {d.code for d in e.value.diagnostics}
    assert "sm90.conv-align" in codes
    assert any("512 or 520" in d.message for d in e.value.diagnostics)


# --- emulation -----------------------------------------------------------------------------------------------------

def test_emulation_with_a_source_matches_torch():
    src = conv_source(2, "bias : bf16[K]   d = silu(acc + bias) + c")
    src = src.replace("  d : bf16", "  c : bf16[N, P, Q, K]\n  d : bf16")
    k = parse(src).kernel()
    ext = CASES[2][3]
    torch.manual_seed(7)
    x = torch.randn(ext["N"], ext["H"], ext["W"], ext["C"]).to(torch.bfloat16)
    w = (torch.randn(ext["K"], ext["R"], ext["S"], ext["C"]) * 0.2).to(torch.bfloat16)
    bias = torch.randn(ext["K"]).to(torch.bfloat16)
    y = F.conv2d(x.double().permute(0, 3, 1, 2), w.double().permute(0, 3, 1, 2), stride=(2, 1), padding=(1, 0),
                 dilation=(1, 2)).permute(0, 2, 3, 1)
    c = torch.randn(y.shape).to(torch.bfloat16)
    want = F.silu(y + bias.double()) + c.double()
    d = torch.full(want.shape, float("nan"), dtype=torch.bfloat16)
    emulate_kernel(k).call([x, w, c, d, bias])
    torch.testing.assert_close(d.double(), want, atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_emulation_matches_torch(rank):
    """The emulator on channels-last tensors against torch's channels-first conv written independently here."""
    k = parse(conv_source(rank)).kernel()
    _, _, _, ext, stride, padding, dilation = CASES[rank]
    torch.manual_seed(rank)
    spatial_a = [ext[d] for d in k.a.dims[1:-1]]
    window = [ext[d] for d in k.b.dims[1:-1]]
    x = torch.randn(ext["N"], *spatial_a, ext["C"]).to(torch.bfloat16)
    w = (torch.randn(ext["K"], *window, ext["C"]) * 0.2).to(torch.bfloat16)
    bias = torch.randn(ext["K"]).to(torch.bfloat16)
    conv = (F.conv1d, F.conv2d, F.conv3d)[rank - 1]
    ref = conv(x.double().movedim(-1, 1), w.double().movedim(-1, 1), stride=stride, padding=padding,
               dilation=dilation)
    want = (torch.relu(ref.movedim(1, -1) + bias.double()) * 0.5)
    d = torch.full(want.shape, float("nan"), dtype=torch.bfloat16)
    emulate_kernel(k).call([x, w, d, bias])
    assert d.shape == want.shape
    torch.testing.assert_close(d.double(), want, atol=2e-2, rtol=2e-2)
    modes = emulate_kernel(k).modes([x, w, d, bias])
    assert modes == {"M": d.numel() // ext["K"], "N": ext["K"], "K": w[0].numel()}


# --- nvcc and the GPU ----------------------------------------------------------------------------------------------

@pytest.mark.nvcc
def test_conv_compiles_with_nvcc(tmp_path):
    """One real compile of the shipped program's first combination (about 1-3 minutes on 2 cores)."""
    from ucutlass.build import build_kernels
    from ucutlass.runtime import ConvCompiledKernel

    k = bind(_shipped_kernel(), find_problem(PROBLEM)).kernel
    (result,) = build_kernels([k], jobs=1, root=tmp_path / "cache", timeout_s=900)
    assert result.ok, result.log[-3000:]
    assert not result.cached
    lib = ctypes.CDLL(str(result.so_path))
    assert all(hasattr(lib, s) for s in ("ucut_run", "ucut_workspace_size", "ucut_can_implement", "ucut_info"))
    loaded = ConvCompiledKernel(result.so_path, k)  # checks family, pointers and digest; no CUDA call
    assert loaded.info["family"] == "conv" and loaded.info["extents"] == ["N", "W", "C", "K", "S"]
    # CUTLASS's own can_implement, through the C ABI, with no tensors: the problem's extents pass, unaligned channels
    # (500 bf16: not 16 bytes) do not
    ext = {"N": 1, "W": 3000, "C": 512, "K": 512, "S": 3}
    assert loaded.can_implement(ext) == (True, "")
    assert not loaded.can_implement(dict(ext, C=500))[0]
    with pytest.raises(KernelRuntimeError, match="CUDA tensors"):
        loaded(a=torch.zeros(1, 3000, 512, dtype=torch.bfloat16), b=torch.zeros(512, 3, 512, dtype=torch.bfloat16),
               d=torch.zeros(1, 1500, 512, dtype=torch.bfloat16), bias=torch.zeros(512, dtype=torch.bfloat16))
    with pytest.raises(KernelRuntimeError, match="arguments are a, b, d, bias"):
        loaded(a=None, b=None, d=None)
