"""Per-shape dispatch (ucutlass.lang.dispatch, ucutlass.runtime.dispatch, ucutlass.solution): `when` in the language, its errors, the per-call kernel choice, the
dispatch program the tuner writes, the grader's loader and the command line on one. CPU only: compiled kernels
are faked (tests/test_dispatch_gpu.py runs a real dispatch on the H200)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from ucutlass import arch, lang, runtime
from ucutlass.bind import bind
from ucutlass.cli import main
from ucutlass.codegen import abi_of, render
from ucutlass.lang import kernel_block, render_dispatch
from ucutlass.errors import KernelRuntimeError, UcutSyntaxError
from ucutlass.problem import find_problem
from ucutlass.runtime import describe, dispatch_callable, pick
from ucutlass.solution import LOADER, dispatch_solution

REPO = Path(__file__).resolve().parents[1]
PROBLEM = "o_proj_residual_llama3_1_8b"  # output = attn_output · o_proj_weightᵀ + residual, M = batch·seq
SPEC = REPO / "problems" / PROBLEM / "kernel.ucut"

OPERANDS = """a : bf16[M, K] row <- attn_output   b : bf16[N, K] row <- o_proj_weight
  c : bf16[M, N] row <- residual   d : bf16[M, N] row -> output"""
DISPATCH = f"""\
kernel decode : gemm when M <= 64 {{
  {OPERANDS}
  tile = 64x128x64   schedule = pingpong
  epilogue {{ d = acc + c }}
}}
kernel mid : gemm when M <= 1024 {{
  {OPERANDS}
  tile = 128x128x64   schedule = cooperative   scheduler = stream_k
  epilogue {{ d = acc + c }}
}}
kernel large : gemm {{
  {OPERANDS}
  tile = 128x256x64   cluster = 2x1x1   schedule = cooperative
  epilogue {{ d = acc + c }}
}}
"""


def diagnostic(text: str, code: str):
    """The first diagnostic with ``code`` that parsing ``text`` raises (every one carries a known code)."""
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    diags = info.value.diagnostics
    assert all(d.code in lang.ERROR_CODES and d.pos.file == "t.ucut" for d in diags), diags
    found = [d for d in diags if d.code == code]
    assert found, "\n".join(d.format() for d in diags)
    return found[0]


# --- the language ------------------------------------------------------------------------------------------

def test_when_lowers_into_the_kernels_and_dispatch_lists_them_in_file_order():
    program = lang.parse(DISPATCH, "d.ucut")
    chain = program.dispatch()
    assert [(k.name, k.when) for k in chain] == [("decode", ("M", 64)), ("mid", ("M", 1024)), ("large", None)]
    assert chain == program.kernels
    pos = chain[0].setting_pos["when"]
    assert (pos.line, pos.column) == (1, 22) and DISPATCH[pos.start:pos.end] == "when M <= 64"
    assert arch.check(program) == []  # every kernel passes the sm90 rules


def test_a_program_without_when_is_no_dispatch():
    assert lang.parse(SPEC.read_text()).dispatch() == ()
    assert lang.parse(DISPATCH.replace(" when M <= 64", "").replace(" when M <= 1024", "")
                     .replace("kernel mid", "kernel mid2")).dispatch() == ()


def test_when_changes_neither_the_digest_nor_the_rendered_code():
    """With every setting written, a kernel's when only says which calls it serves: the build is the same."""
    decode = lang.parse(DISPATCH.replace("schedule = pingpong", "schedule = pingpong swap_ab = false")).kernel("decode")
    alone = dataclasses.replace(decode, when=None)
    assert decode == alone
    assert decode.digest() == alone.digest() and decode.build_digest() == alone.build_digest()
    assert decode.config_name() == alone.config_name()
    assert render(decode, "d.ucut") == render(alone, "d.ucut")  # the build cache key hashes this text


def test_swap_ab_auto_swaps_a_kernel_for_small_m_only():
    """swap_ab = auto (the default) is true in a kernel `when M <= 64` (or less) and false elsewhere: the when then
    changes the code, and the built kernel's identity (arch.canonical, ucut_info's digest) tells the two apart."""
    from ucutlass import arch

    program = lang.parse(DISPATCH)
    decode, mid, large = program.dispatch()
    assert decode.swap_ab is None and [arch.resolve_swap_ab(k) for k in (decode, mid, large)] == [True, False, False]
    alone = dataclasses.replace(decode, when=None)
    assert decode.digest() == alone.digest()  # the kernels as written: the same
    assert arch.canonical(decode).build_digest() != arch.canonical(alone).build_digest()  # as built: not
    swapped, plain = render(decode, "d.ucut"), render(alone, "d.ucut")
    assert "swap AB" in swapped and "swap AB" not in plain
    assert abi_of(decode).extents == ("N", "M", "K") and abi_of(alone).extents == ("M", "N", "K")
    assert arch.resolve_swap_ab(dataclasses.replace(decode, when=("M", 65))) is False
    assert arch.resolve_swap_ab(dataclasses.replace(decode, when=("N", 64))) is False  # M is not known small


def test_dispatch_kernels_may_differ_in_every_setting():
    text = DISPATCH.replace("scheduler = stream_k", "split_k = 1 raster = along_n swizzle = 2 stages = 3")
    assert [k.when for k in lang.parse(text).dispatch()] == [("M", 64), ("M", 1024), None]
    n_only = DISPATCH.replace("when M <= 64", "when N <= 256").replace("when M <= 1024", "when N <= 1024")
    assert [k.when for k in lang.parse(n_only).dispatch()] == [("N", 256), ("N", 1024), None]


def test_when_is_a_keyword_only_in_a_kernel_header():
    """The contextual lexer reads `when` as a name wherever a name is expected: a kernel or input may be called so."""
    program = lang.parse("kernel when : gemm { a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row\n"
                        "  epilogue { when : bf16[N]   d = acc + when } }")
    assert program.kernel().name == "when" and program.kernel().epilogue_inputs[0].name == "when"
    assert "when" in lang.KEYWORDS


@pytest.mark.parametrize("old,new,code,line,col,message", [
    ("when M <= 64", "when M < 64", "bad-when", 1, 29, "unexpected character '<': a dispatch condition is when MODE "
                                                       "<= NUMBER, MODE one of M, N, K"),
    ("when M <= 64", "when M >= 64", "bad-when", 1, 29, "unexpected character '>'"),
    ("when M <= 64", "when M = 64", "bad-when", 1, 29, "found '=': a dispatch condition is when MODE <= NUMBER"),
    ("when M <= 64", "when 64 <= M", "bad-when", 1, 27, "found number '64'"),
    ("when M <= 64", "when {", "bad-when", 1, 27, "found '{'"),
    ("when M <= 64", "when X <= 64", "bad-when", 1, 27, "when X <= 64: 'X' is not a GEMM mode"),
    ("when M <= 64", "when m <= 64", "bad-when", 1, 27, "'m' is not a GEMM mode; did you mean 'M'?"),
    ("when M <= 64", "when M <= 0", "bad-when", 1, 32, "the bound is a whole number ≥ 1"),
    ("when M <= 64", "when M <= 6.5", "bad-when", 1, 32, "the bound is a whole number ≥ 1"),
    ("when M <= 1024", "when M <= 64", "dispatch-order", 7, 19, "kernel mid can never run: every call with M <= 64 "
                                                                "goes to kernel decode (when M <= 64, line 1)"),
    ("when M <= 1024", "when M <= 32", "dispatch-order", 7, 19, "kernel mid can never run"),
    ("kernel mid : gemm when M <= 1024", "kernel mid : gemm", "dispatch-order", 7, 8,
     "kernel mid has no when, so it serves every call and the kernels after it (large) can never run"),
    ("kernel large : gemm", "kernel large : gemm when M <= 8192", "dispatch-order", 13, 21,
     "the last kernel of a dispatch, large, has a when: a call with M > 8192 would find no kernel"),
    ("when M <= 1024", "when N <= 1024", "dispatch-order", 7, 19,
     "kernel mid splits on N, but kernel decode splits on M: a dispatch splits one mode into ranges"),
    ("tile = 128x128x64   schedule = cooperative", "target = sm100   tile = 128x128x64",
     "dispatch-mismatch", 10, 12, "kernel mid has target = sm100, but kernel decode has target = sm90"),
    ("<- o_proj_weight\n  c : bf16[M, N] row <- residual   d : bf16[M, N] row -> output\n  tile = 128x128x64",
     "<- w2\n  c : bf16[M, N] row <- residual   d : bf16[M, N] row -> output\n  tile = 128x128x64",
     "dispatch-mismatch", 8, 39, "kernel mid declares b : bf16[N, K] row <- w2, but kernel decode declares b : "
                                 "bf16[N, K] row <- o_proj_weight"),
    ("cluster = 2x1x1   schedule = cooperative\n  epilogue { d = acc + c }",
     "cluster = 2x1x1   schedule = cooperative\n  epilogue { d = acc - c }",
     "dispatch-mismatch", 17, 18, "kernel large computes d = (acc - c), but kernel decode computes d = (acc + c)"),
    ("cluster = 2x1x1   schedule = cooperative\n  epilogue { d = acc + c }",
     "cluster = 2x1x1   schedule = cooperative\n  epilogue { s : f32[M] <- s   d = acc * s + c }",
     "dispatch-mismatch", 17, 36, "the kernels of a dispatch bind the same tensors, compute the same epilogue and have one target"),
])
def test_dispatch_errors_say_where_and_why(old, new, code, line, col, message):
    assert old in DISPATCH
    d = diagnostic(DISPATCH.replace(old, new, 1), code)
    assert message in d.message, d.format()
    assert (d.pos.line, d.pos.column) == (line, col), d.format()


def test_only_gemm_kernels_take_when_and_a_dispatch_holds_only_gemms():
    grouped = ("kernel g : grouped_gemm when M <= 64 { a : bf16[M, K] row   b : bf16[G, N, K] row   "
               "d : bf16[M, N] row   m_sizes : i32[G] }\n")
    d = diagnostic(grouped + DISPATCH, "bad-when")
    assert d.message.startswith("only gemm kernels take when; kernel g is a grouped_gemm") and d.pos.column == 25
    attention = ("kernel attn : attention { q : bf16[B, Sq, Hq, 64]   k : bf16[B, Sk, Hkv, 64]   "
                 "v : bf16[B, Sk, Hkv, 64]   o : bf16[B, Sq, Hq, 64] }\n")
    text = DISPATCH.replace("kernel large : gemm", "kernel large : gemm when M <= 4096") + attention
    d = diagnostic(text, "dispatch-mismatch")
    assert d.message == "every kernel of a dispatch is a gemm; kernel attn is an attention" and d.pos.line == 19


# --- choosing the kernel of a call ---------------------------------------------------------------------------

def test_pick_takes_the_first_condition_that_holds():
    whens = [("M", 64), ("N", 256), ("M", 1024), None]
    assert pick(whens, {"M": 64, "N": 4096, "K": 1}) == 0
    assert pick(whens, {"M": 65, "N": 256, "K": 1}) == 1
    assert pick(whens, {"M": 65, "N": 257, "K": 1}) == 2
    assert pick(whens, {"M": 1025, "N": 4096, "K": 1}) == 3
    assert pick(whens, {"M": 0, "N": 0, "K": 0}) == 0  # an empty call goes to the first kernel (it runs nothing)
    with pytest.raises(ValueError, match="no kernel serves"):
        pick([("M", 64)], {"M": 65})


def test_dispatch_callable_runs_the_kernel_of_each_shape_and_caches_the_choice():
    torch = pytest.importorskip("torch")
    ran, asked = [], []

    def run_of(i):
        return lambda *args: ran.append(i)

    def modes_of(a, b, out):
        asked.append(tuple(a.shape))
        return {"M": math.prod(a.shape[:-1]), "N": b.shape[0], "K": a.shape[-1]}

    fn = dispatch_callable([run_of(0), run_of(1), run_of(2)], [("M", 64), ("M", 1024), None], modes_of)
    w = torch.empty(16, 8)
    for m in (1, 64, 65, 1024, 1025, 1, 65, 1025):
        fn(torch.empty(1, m, 8), w, None)
    assert ran == [0, 0, 1, 1, 2, 0, 1, 2]
    assert asked == [(1, 1, 8), (1, 64, 8), (1, 65, 8), (1, 1024, 8), (1, 1025, 8)]  # once per set of shapes
    assert fn.choose(torch.empty(2, 40, 8), w, None) == 1 and fn.whens[-1] is None and len(fn.runs) == 3
    with pytest.raises(ValueError, match="one when per kernel"):
        dispatch_callable([run_of(0)], [], modes_of)


def test_describe_names_the_chain_and_the_workloads_each_kernel_serves():
    chain = lang.parse(DISPATCH).dispatch()
    assert describe(chain) == "dispatch on M: decode (M ≤ 64), mid (M ≤ 1024), large"
    extents = [{"M": m} for m in (1, 8, 64, 65, 4096)]
    assert describe(chain, extents) == ("dispatch on M: decode (M ≤ 64; 3 workloads), mid (M ≤ 1024; 1 workload), "
                                        "large (1 workload)")


# --- writing a dispatch program ------------------------------------------------------------------------------

def test_render_dispatch_round_trips_tuned_kernels():
    spec = lang.parse_file(SPEC)
    picks = [{"tile": "64x128x64", "cluster": "1x1x1", "schedule": "pingpong", "scheduler": "persistent",
              "split_k": "1"},
             {"tile": "128x128x64", "cluster": "1x1x1", "schedule": "cooperative", "scheduler": "stream_k",
              "split_k": "2"},
             {"tile": "128x256x64", "cluster": "2x1x1", "schedule": "cooperative", "scheduler": "persistent",
              "split_k": "1"}]
    tuned = [spec.resolve({f"o_proj.{k}": v for k, v in p.items()}) for p in picks]
    blocks = [(kernel_block(t.source, "o_proj"), name, when)
              for t, name, when in zip(tuned, ("decode", "mid", "large"), (("M", 64), ("M", 1024), None))]
    assert blocks[0][0].startswith("kernel o_proj : gemm {") and blocks[0][0].endswith("}")
    text = render_dispatch(blocks)
    assert "kernel decode : gemm when M <= 64 {" in text and "kernel large : gemm {" in text
    chain = lang.parse(text).dispatch()
    assert [(k.name, k.when) for k in chain] == [("decode", ("M", 64)), ("mid", ("M", 1024)), ("large", None)]
    for k, t in zip(chain, tuned):
        assert dataclasses.replace(k, name="o_proj") == t.kernel()  # the same kernel but for its name (and when)
    assert text.count("# split-K needs stream_k") == 3  # comments inside the blocks survive


def test_render_dispatch_refuses_what_is_no_dispatch():
    block = kernel_block(DISPATCH, "mid")
    assert block.startswith("kernel mid : gemm when M <= 1024 {")
    with pytest.raises(UcutSyntaxError, match="can never run"):
        render_dispatch([(block, "a", ("M", 64)), (block, "b", ("M", 64)), (block, "c", None)])
    with pytest.raises(ValueError, match="the block for a holds 0 kernel headers"):
        render_dispatch([("tile = 64x128x64", "a", None)])
    with pytest.raises(ValueError, match="the block for b holds 2 kernel headers"):
        render_dispatch([(block, "a", ("M", 64)), (DISPATCH.split("kernel large")[0], "b", None)])


# --- the runtime and the grader's loader -----------------------------------------------------------------------

class FakeKernel(runtime.CompiledKernel):
    """A compiled GEMM without a library: the argument checks of the real plan, on CPU tensors; calls are recorded."""

    def __init__(self, so_path, kernel):
        self.so_path, self.kernel, self.abi = so_path, kernel, abi_of(kernel)
        self._plans, self.planned, self.calls = {}, 0, []

    def _plan(self, values):
        import torch

        extents, tensors = {}, dict(zip(self.abi.ptr_names, values))
        for op in self.kernel.operands:  # the real per-operand checks (they fold [batch, seq, K] into M)
            self._matrix(op.name, tensors[op.name], op.dims, op.layout, op.dtype, extents, torch.device("cpu"))
        self.planned += 1
        return None, None, 0, (extents["M"], extents["N"], extents["K"])

    def call(self, values):
        self.calls.append(self.modes(values)["M"])


@pytest.fixture
def fake_kernels(monkeypatch):
    loaded = {}

    def load(so_path, kernel):
        loaded[kernel.name] = FakeKernel(so_path, kernel)
        return loaded[kernel.name]

    monkeypatch.setattr(runtime, "load_kernel", load)
    return loaded


def _args(torch, m: int):
    """attn_output, o_proj_weight, residual, output of the problem for M = m tokens (one sequence)."""
    bf16 = torch.bfloat16
    return (torch.empty(1, m, 4096, dtype=bf16), torch.empty(4096, 4096, dtype=bf16),
            torch.empty(1, m, 4096, dtype=bf16), torch.empty(1, m, 4096, dtype=bf16))


def test_load_solution_runs_the_kernel_of_each_m(fake_kernels):
    torch = pytest.importorskip("torch")
    problem = find_problem(PROBLEM)
    ref = dispatch_solution({"decode": "/k/decode.so", "mid": Path("/k/mid.so"), "large": "/k/large.so"}, DISPATCH,
                            "d.ucut", "o_proj dispatch")
    assert ref.loader == LOADER == "ucutlass.runtime:load_solution" and ref.destination_passing
    assert ref.payload == {"so_paths": {"decode": "/k/decode.so", "mid": "/k/mid.so", "large": "/k/large.so"},
                           "source": DISPATCH, "file": "d.ucut"}
    json.dumps(ref.to_json())  # a picklable, JSON-able recipe for the grader's worker
    fn = runtime.load_solution(ref.payload, problem)
    assert {k.so_path for k in fake_kernels.values()} == {"/k/decode.so", "/k/mid.so", "/k/large.so"}
    for m in (1, 64, 300, 1024, 1025, 8192, 1, 300):
        fn(*_args(torch, m))
    assert fake_kernels["decode"].calls == [1, 64, 1]
    assert fake_kernels["mid"].calls == [300, 1024, 300]
    assert fake_kernels["large"].calls == [1025, 8192]
    assert fn.choose(*_args(torch, 65)) == 1
    assert fn.runs[0].modes(*_args(torch, 7)) == {"M": 7, "N": 4096, "K": 4096}
    # modes come from the fallback's plan, computed once per set of shapes (6 called, 65 chosen) and reused by
    # its own calls
    assert fake_kernels["large"].planned == 7 and fake_kernels["decode"].planned == 3


def test_load_solution_keeps_the_one_kernel_form(fake_kernels):
    torch = pytest.importorskip("torch")
    source = DISPATCH.split("kernel mid")[0].replace(" when M <= 64", "")
    payload = {"so_path": "/k/one.so", "source": source, "file": "one.ucut", "kernel": None}
    fn = runtime.load_solution(payload, find_problem(PROBLEM))
    fn(*_args(torch, 3))
    assert fake_kernels["decode"].calls == [3] and fn.modes(*_args(torch, 5))["M"] == 5
    one = runtime.load_solution({"so_path": "/k/mid.so", "source": DISPATCH, "kernel": "mid"}, find_problem(PROBLEM))
    one(*_args(torch, 2))  # one kernel of a dispatch, graded alone: it serves every call
    assert fake_kernels["mid"].calls == [2]


def test_load_solution_refuses_an_incomplete_dispatch_payload(fake_kernels):
    problem = find_problem(PROBLEM)
    with pytest.raises(KernelRuntimeError, match="no .so for kernel\\(s\\) mid, large of the dispatch"):
        runtime.load_solution({"so_paths": {"decode": "/k/d.so"}, "source": DISPATCH}, problem)
    with pytest.raises(KernelRuntimeError, match="no kernel has a when"):
        runtime.load_solution({"so_paths": {"o_proj": "/k/o.so"}, "source": SPEC.read_text()}, problem)
    assert not fake_kernels


def test_binding_modes_fold_leading_dims_and_read_sliced_views():
    torch = pytest.importorskip("torch")
    binding = bind(lang.parse(DISPATCH).kernel("large"), find_problem(PROBLEM))
    fake = FakeKernel("/k/large.so", binding.kernel)
    run = binding.callable(fake)
    bf16 = torch.bfloat16
    args = (torch.empty(3, 5, 4096, dtype=bf16), torch.empty(4096, 4096, dtype=bf16),
            torch.empty(3, 5, 4096, dtype=bf16), torch.empty(3, 5, 4096, dtype=bf16))
    assert run.modes(*args) == {"M": 15, "N": 4096, "K": 4096}
    with pytest.raises(TypeError, match="expected 4 arguments"):
        run.modes(*args[:3])


# --- the command line ----------------------------------------------------------------------------------------

def test_check_reports_the_chain_and_the_workloads_of_each_kernel(capsys, tmp_path):
    path = tmp_path / "d.ucut"
    path.write_text(DISPATCH)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: dispatch on M: decode (M ≤ 64), mid (M ≤ 1024), large" in out
    assert main(["check", str(path), "--problem", PROBLEM]) == 0
    out = capsys.readouterr().out
    workloads = [binding_m for binding_m in (bind(lang.parse(DISPATCH).kernel("large"), find_problem(PROBLEM))
                                             .extents(w)["M"] for w in find_problem(PROBLEM).workloads)]
    n = [sum(m <= 64 for m in workloads), sum(64 < m <= 1024 for m in workloads), sum(m > 1024 for m in workloads)]
    assert all(n)
    assert (f"dispatch on M: decode (M ≤ 64; {n[0]} workloads), mid (M ≤ 1024; {n[1]} workload"
            f"{'' if n[1] == 1 else 's'}), large ({n[2]} workloads)") in out
    total = len(workloads)
    assert (f"kernel decode binds to {PROBLEM} (serves {n[0]} of the {total} workloads in the dispatch; "
            f"M from {min(workloads)} to {max(m for m in workloads if m <= 64)},") in out
    assert f"kernel large binds to {PROBLEM} (serves {n[2]} of the {total} workloads in the dispatch; " in out
    assert main(["check", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dispatch"] == [{"name": "decode", "when": ["M", 64]}, {"name": "mid", "when": ["M", 1024]},
                               {"name": "large", "when": None}]


def test_check_shows_dispatch_errors_with_line_and_column(capsys, tmp_path):
    path = tmp_path / "d.ucut"
    path.write_text(DISPATCH.replace("when M <= 1024", "when M <= 16"))
    assert main(["check", str(path)]) == 1
    assert f"{path}:7:19: error: kernel mid can never run" in capsys.readouterr().err


def test_compile_emits_every_kernel_of_a_dispatch(capsys, tmp_path):
    path = tmp_path / "d.ucut"
    path.write_text(DISPATCH)
    assert main(["compile", str(path), "--emit-only", "-o", str(tmp_path / "out")]) == 0
    names = sorted(p.name.split("_sm90")[0] for p in (tmp_path / "out").glob("*.cu"))
    assert names == ["decode", "large", "mid"]


def test_grade_builds_every_kernel_and_grades_the_dispatch_as_one_solution(monkeypatch, tmp_path):
    import ucutlass.build
    from ucutlass.build import BuildResult
    from ucutlass.cli.grade import solution_for_file

    built = []

    def fake_build(kernels, source_file, sources, **_):
        built.extend(kernels)
        return [BuildResult(key=k.name, name=k.config_name(), entry=tmp_path, so_path=tmp_path / f"{k.name}.so",
                            source_path=tmp_path / f"{k.name}.cu", cached=True, seconds=0.0) for k in kernels]

    monkeypatch.setattr(ucutlass.build, "build_kernels", fake_build)
    path = tmp_path / "d.ucut"
    path.write_text(DISPATCH)
    problem = find_problem(PROBLEM)
    ref = solution_for_file(str(path), problem, argparse.Namespace(pick=[], kernel=None))
    assert [k.name for k in built] == ["decode", "mid", "large"]
    assert [k.when for k in built] == [("M", 64), ("M", 1024), None]
    assert ref.loader == LOADER and ref.name == "d (decode, mid, large)"
    assert ref.payload["so_paths"] == {n: str(tmp_path / f"{n}.so") for n in ("decode", "mid", "large")}
    assert "so_path" not in ref.payload and ref.payload["source"] == DISPATCH
    one = solution_for_file(str(path), problem, argparse.Namespace(pick=[], kernel="mid"))
    assert one.payload["kernel"] == "mid" and one.payload["so_path"] == str(tmp_path / "mid.so")


def test_when_on_an_attention_kernel_gets_one_error_not_a_cascade():
    text = ("kernel attn : attention when Sq <= 64 { q : bf16[B, Sq, Hq, 64]   k : bf16[B, Sk, Hkv, 64]   "
            "v : bf16[B, Sk, Hkv, 64]   o : bf16[B, Sq, Hq, 64] }\n")
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    codes = [d.code for d in info.value.diagnostics]
    assert set(codes) == {"bad-when"}, [d.format() for d in info.value.diagnostics]
    assert any("only gemm kernels take when" in d.message for d in info.value.diagnostics)
