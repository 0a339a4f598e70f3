"""ucutlass.lang: parsing every construct, lowering into the exact IR, diagnostics, resolve round-trip, check."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ucutlass import arch, lang
from ucutlass.lang import syntax
from ucutlass.errors import Diagnostic, UcutSyntaxError, did_you_mean
from ucutlass.ir import (Acc, Binary, Choice, Const, DType, EpilogueInput, EpilogueInputKind, GemmKernel, Layout, Math,
                         Operand, RasterOrder, ReductionMode, Ref, Schedule, Src, Target, TileScheduler, Unary, UNARY_OPS)

FULL = """\
# comments with '#'
kernel up_proj : gemm {
  target   = sm90                          # sm90
  a : bf16[M, K] row <- hidden_states      # operand: dtype[dims] layout binding
  b : bf16[N, K] row <- fc1_weight         # the nn.Linear weight: D = A·Bᵀ
  d : bf16[M, N] row -> output             # '->' binds an output, '<-' an input
  accum    = f32
  tile     = {128x128x64, 128x256x64}      # {…} = a search choice
  cluster  = {1x1x1, 2x1x1}
  schedule = {cooperative, pingpong}
  stages   = auto
  scheduler = persistent
  epilogue {
    bias : bf16[N] <- fc1_bias
    alpha : f32 = 0.5
    h = acc * alpha + bias
    d = gelu_tanh(h)
  }
}
"""

ABD = "a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row"


REPO = Path(__file__).resolve().parent.parent

def gemm(body: str = "", operands: str = ABD, name: str = "k") -> str:
    return f"kernel {name} : gemm {{\n  {operands}\n  {body}\n}}\n"


def kernel_of(body: str = "", operands: str = ABD) -> GemmKernel:
    return lang.parse(gemm(body, operands)).kernel()


def epilogue_of(epi: str, decls: str = "") -> GemmKernel:
    return kernel_of(f"epilogue {{ {decls} {epi} }}")


def diagnostics(text: str) -> tuple[Diagnostic, ...]:
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    diags = info.value.diagnostics
    for d in diags:
        assert d.code in lang.ERROR_CODES, d
        assert d.pos.file == "t.ucut"
    return diags


def diagnostic(text: str, code: str) -> Diagnostic:
    diags = diagnostics(text)
    found = [d for d in diags if d.code == code]
    assert found, "\n".join(d.format() for d in diags)
    return found[0]


# --- parsing and lowering ----------------------------------------------------------------------------------

def test_full_example_lowers_to_the_exact_ir():
    program = lang.parse(FULL, "up.ucut")
    expected = GemmKernel(
        name="up_proj", target=Target.sm90,
        a=Operand("a", DType.bf16, ("M", "K"), Layout.row, "hidden_states"),
        b=Operand("b", DType.bf16, ("N", "K"), Layout.row, "fc1_weight"),
        d=Operand("d", DType.bf16, ("M", "N"), Layout.row, "output"),
        c=None, accum=DType.f32,
        tile=Choice(((128, 128, 64), (128, 256, 64)), ("128x128x64", "128x256x64")),
        cluster=Choice(((1, 1, 1), (2, 1, 1)), ("1x1x1", "2x1x1")),
        schedule=Choice((Schedule.cooperative, Schedule.pingpong), ("cooperative", "pingpong")),
        stages=None, scheduler=TileScheduler.persistent,
        epilogue_inputs=(
            EpilogueInput("bias", EpilogueInputKind.row_vector, DType.bf16, ("N",), Layout.row, "fc1_bias"),
            EpilogueInput("alpha", EpilogueInputKind.scalar, DType.f32, (), Layout.row, None, 0.5),
        ),
        epilogue=Unary("gelu_tanh", Binary("+", Binary("*", Acc(), Ref("alpha")), Ref("bias"))),
    )
    assert program.kernels == (expected,)
    assert program.source == FULL and program.file == "up.ucut"
    k = program.kernel()
    assert k.pos.line == 2 and k.pos.file == "up.ucut"
    assert k.a.pos.line == 4 and k.epilogue_inputs[0].pos.line == 14
    assert k.epilogue.pos.line == 17


def test_defaults_fill_every_absent_setting():
    k = kernel_of()
    assert (k.target, k.accum, k.tile, k.cluster) == (Target.sm90, DType.f32, (128, 128, 64), (1, 1, 1))
    assert (k.schedule, k.stages, k.scheduler) == (Schedule.auto, None, TileScheduler.persistent)
    assert k.c is None and k.epilogue == Acc() and k.epilogue_inputs == ()
    assert k.a.binding is None and k.a.layout is Layout.row
    assert k.is_concrete()
    assert lang.DEFAULTS == {"target": Target.sm90, "accum": DType.f32, "tile": (128, 128, 64),
                            "cluster": (1, 1, 1), "schedule": Schedule.auto, "stages": None,
                            "scheduler": TileScheduler.persistent, "split_k": 1, "raster": RasterOrder.auto,
                            "swizzle": 1, "reduction_mode": ReductionMode.deterministic, "alignment": None,
                            "swap_ab": None, "math": Math.tf32}


def test_every_setting_value_lowers():
    k = kernel_of("target = sm100 accum = f16 tile = 64x256x128 cluster = 1x2x1 schedule = warpspecialized "
                  "stages = 3 scheduler = stream_k")
    assert (k.target, k.accum, k.tile, k.cluster) == (Target.sm100, DType.f16, (64, 256, 128), (1, 2, 1))
    assert (k.schedule, k.stages, k.scheduler) == (Schedule.warpspecialized, 3, TileScheduler.stream_k)


def test_newlines_are_not_significant_and_comments_are_ignored():
    one_line = "kernel k : gemm { a : bf16[M, K] row b : bf16[N, K] row d : bf16[M, N] row tile = 64x128x64 " \
               "schedule = pingpong }"
    spread = "kernel k\n:\ngemm # c\n{\na\n:\nbf16\n[\nM\n,\nK\n]\nrow # x\nb : bf16[N, K]\nd : bf16[M, N]\n" \
             "tile\n=\n64x128x64 schedule = pingpong\n}\n# end"
    assert lang.parse(one_line).kernels == lang.parse(spread).kernels


def test_empty_program_and_several_kernels():
    for text in ("", "# nothing\n", "  \n\t# only a comment\r\n"):  # an error, not a program of no kernels
        with pytest.raises(UcutSyntaxError) as e:
            lang.parse(text, "empty.ucut")
        (d,) = e.value.diagnostics
        assert (d.code, str(d.pos), d.valid) == ("empty", "empty.ucut:1:1", ("kernel",))
    program = lang.parse(gemm(name="one") + gemm("tile = 64x128x64", name="two"))
    assert [k.name for k in program.kernels] == ["one", "two"]
    assert program.kernel("two").tile == (64, 128, 64)


def test_operand_dims_layouts_and_bindings():
    k = kernel_of(operands="a : f16[K, M] col <- x   b : f16[K, N] row <- w   c : f32[N, M] col <- r  "
                           "d : f32[M, N] col -> y", body="epilogue { d = acc + c }")
    assert k.a == Operand("a", DType.f16, ("K", "M"), Layout.col, "x")
    assert k.a.contiguous_dim == "K"
    assert k.b.dims == ("K", "N") and k.b.contiguous_dim == "N"
    assert k.c == Operand("c", DType.f32, ("N", "M"), Layout.col, "r") and k.c.contiguous_dim == "N"
    assert k.d.binding == "y" and k.d.contiguous_dim == "M"
    assert k.epilogue == Binary("+", Acc(), Src())


@pytest.mark.parametrize("decl, kind, dims, layout", [
    ("e : bf16[N]", EpilogueInputKind.row_vector, ("N",), Layout.row),
    ("e : f32[M]", EpilogueInputKind.col_vector, ("M",), Layout.row),
    ("e : bf16[M, N]", EpilogueInputKind.matrix, ("M", "N"), Layout.row),
    ("e : bf16[M, N] col", EpilogueInputKind.matrix, ("M", "N"), Layout.col),
    ("e : f16[N, M] row", EpilogueInputKind.matrix, ("N", "M"), Layout.row),
    ("e : f32", EpilogueInputKind.scalar, (), Layout.row),
])
def test_epilogue_input_kinds(decl, kind, dims, layout):
    k = epilogue_of("d = acc + e", decl + " <- t")
    (inp,) = k.epilogue_inputs
    assert (inp.name, inp.kind, inp.dims, inp.layout, inp.binding) == ("e", kind, dims, layout, "t")
    assert k.epilogue == Binary("+", Acc(), Ref("e"))


def test_scalar_literal_values():
    k = epilogue_of("d = acc * alpha + beta", "alpha : f32 = -0.5  beta : f32 = 2e-3  ")
    assert [i.value for i in k.epilogue_inputs] == [-0.5, 0.002]
    assert [i.binding for i in k.epilogue_inputs] == [None, None]


@pytest.mark.parametrize("text, expected", [
    ("acc + 1 * 2", Binary("+", Acc(), Binary("*", Const(1.0), Const(2.0)))),
    ("acc * 2 - 1", Binary("-", Binary("*", Acc(), Const(2.0)), Const(1.0))),
    ("acc - 1 - 2", Binary("-", Binary("-", Acc(), Const(1.0)), Const(2.0))),
    ("(acc + 1) * 2", Binary("*", Binary("+", Acc(), Const(1.0)), Const(2.0))),
    ("-acc", Binary("*", Const(-1.0), Acc())),
    ("acc * -2.5", Binary("*", Acc(), Const(-2.5))),
    ("- -acc", Binary("*", Const(-1.0), Binary("*", Const(-1.0), Acc()))),
    ("relu(acc) + .5", Binary("+", Unary("relu", Acc()), Const(0.5))),
    ("tanh(sigmoid(acc))", Unary("tanh", Unary("sigmoid", Acc()))),
])
def test_expression_precedence_and_unary_minus(text, expected):
    assert epilogue_of(f"d = {text}").epilogue == expected


@pytest.mark.parametrize("op", UNARY_OPS)
def test_every_activation(op):
    assert epilogue_of(f"d = {op}(acc)").epilogue == Unary(op, Acc())


def test_intermediates_are_inlined_in_order():
    k = epilogue_of("h = acc + bias  g = relu(h) * h  d = g - 1", "bias : bf16[N]")
    h = Binary("+", Acc(), Ref("bias"))
    assert k.epilogue == Binary("-", Binary("*", Unary("relu", h), h), Const(1.0))


def test_choices_are_typed_in_every_setting_and_operand():
    k = kernel_of(
        "target = {sm90, sm100} accum = {f32, f16} tile = {128x128x64, 64x128x64} cluster = {1x1x1, 2x1x1,} "
        "schedule = {auto, pingpong} stages = {auto, 3} scheduler = {persistent, stream_k}",
        operands="a : {bf16, f16}[M, K] {row, col}  b : bf16[N, K] row  d : {bf16, f32}[M, N] row")
    choices = k.choices()
    assert list(choices) == ["target", "accum", "tile", "cluster", "schedule", "stages", "scheduler",
                             "a.dtype", "a.layout", "d.dtype"]
    assert choices["target"].options == (Target.sm90, Target.sm100)
    assert choices["accum"].options == (DType.f32, DType.f16)
    assert choices["tile"].options == ((128, 128, 64), (64, 128, 64))
    assert choices["cluster"].spellings == ("1x1x1", "2x1x1")
    assert choices["schedule"].options == (Schedule.auto, Schedule.pingpong)
    assert choices["stages"].options == (None, 3) and choices["stages"].spellings == ("auto", "3")
    assert choices["scheduler"].options == (TileScheduler.persistent, TileScheduler.stream_k)
    assert choices["a.dtype"].options == (DType.bf16, DType.f16)
    assert choices["a.layout"].options == (Layout.row, Layout.col)
    assert not k.is_concrete()


def test_choice_positions_cover_the_braces():
    program = lang.parse(FULL)
    for choice in program.choices().values():
        text = FULL[choice.pos.start:choice.pos.end]
        assert text.startswith("{") and text.endswith("}")
        assert text == "{" + ", ".join(choice.spellings) + "}"


def test_setting_pos_points_at_each_value():
    k = lang.parse(FULL, "up.ucut").kernel()
    lines = {key: pos.line for key, pos in k.setting_pos.items()}
    assert lines == {"target": 3, "a.dtype": 4, "a.layout": 4, "b.dtype": 5, "b.layout": 5, "d.dtype": 6,
                     "d.layout": 6, "accum": 7, "tile": 8, "cluster": 9, "schedule": 10, "stages": 11,
                     "scheduler": 12}
    assert FULL[k.setting_pos["stages"].start:k.setting_pos["stages"].end] == "auto"
    assert k.setting_pos["tile"].column == 14


def test_parse_file_names_the_file(tmp_path):
    path = tmp_path / "up.ucut"
    path.write_text(FULL)
    program = lang.parse_file(path)
    assert program.file == str(path) and program.kernel().pos.file == str(path)
    path.write_text(FULL.replace("bf16[N, K]", "bf17[N, K]"))
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse_file(path)
    assert info.value.diagnostics[0].pos.file == str(path)
    assert str(info.value).startswith(f"{path}:5:7: error: unknown dtype 'bf17'")


def test_parser_is_built_once_from_package_data():
    assert syntax.parser() is syntax.parser()
    assert syntax.parser().options.parser == "lalr"


# --- resolve round-trip ------------------------------------------------------------------------------------

def test_resolve_round_trip_of_every_combination():
    program = lang.parse(FULL)
    choices = program.choices()
    for combo in itertools.product(*(c.spellings for c in choices.values())):
        picks = dict(zip(choices, combo))
        resolved = program.resolve(picks)
        assert resolved.is_concrete()
        reparsed = lang.parse(resolved.source)
        assert reparsed.kernels == resolved.kernels
        assert "# comments with '#'" in resolved.source


def test_resolve_round_trip_with_operand_choices_and_partial_picks():
    text = gemm("tile = {128x128x64, 64x128x64}   stages = {auto, 4}",
                operands="a : {bf16, f16}[M, K] {row, col}  b : {bf16, f16}[N, K] row  d : bf16[M, N] row")
    program = lang.parse(text)
    partial = program.resolve({"k.a.layout": Layout.col, "k.stages": 4})
    assert set(partial.choices()) == {"k.tile", "k.a.dtype", "k.b.dtype"}
    assert lang.parse(partial.source).kernels == partial.kernels
    # the remaining choices' offsets refer to the original text: resolve the re-parsed program
    full = lang.parse(partial.source).resolve({"k.tile": (64, 128, 64), "k.a.dtype": "f16", "k.b.dtype": "f16"})
    assert lang.parse(full.source).kernels == full.kernels
    k = full.kernel()
    assert (k.tile, k.stages, k.a.dtype, k.a.layout) == ((64, 128, 64), 4, DType.f16, Layout.col)
    assert "a : f16[M, K] col" in full.source


# --- diagnostics -------------------------------------------------------------------------------------------

def test_syntax_error_missing_closing_brace():
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(FULL.rstrip().rstrip("}"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.code == "syntax" and d.valid == ("}",)
    assert "'}'" in d.message and (d.pos.line, d.pos.column) == (18, 4)
    assert info.value.context.endswith("  }\n   ^\n")
    assert d.format().startswith("t.ucut:18:4: error: the file ends before a block is closed")


def test_syntax_error_names_a_choice_left_open():
    """``cluster = {1x1x1, 2x1x1`` with no ``}``: the error names where the choice was opened (a new user got
    "expected ',' or '}', found name 'schedule' (valid: ,, })" at the next line)."""
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(gemm("tile = {128x128x64, 128x256x64}   cluster = {1x1x1, 2x1x1\n  schedule = pingpong"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.valid == ("}",) and (d.pos.line, d.pos.column) == (4, 3)
    assert d.message == ("the choice {…} opened at 3:47 is not closed: expected ',' or '}', found name 'schedule'")
    with pytest.raises(UcutSyntaxError) as info:  # on one line: a missing ',' as likely as a missing '}'
        lang.parse(gemm("tile = {128x128x64 128x256x64}"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.valid == (",", "}") and d.format().endswith("(valid: ',', })")


def test_syntax_error_bad_character_has_position_and_context():
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(gemm("tile = 128x128x64 @"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.code == "syntax" and (d.pos.line, d.pos.column) == (3, 21)
    assert "unexpected character '@'" in d.message and "expected" in d.message
    assert info.value.context.splitlines()[1].index("^") == 20


def test_every_lowering_error_shows_its_own_line_and_caret():
    text = ("kernel g : gemm {\n  target = sm90\n  a : bf16[M, K]\n  b : bf16[K, N]\n  d : bf16[M, N]\n"
            "  tile = 128x128x64\n  schedule = pingpng\n  stages = lots\n}\n")
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    lines = info.value.format().splitlines()
    assert [d.pos.line for d in info.value.diagnostics] == [7, 8]
    assert lines[0].startswith("t.ucut:7:14: error: schedule = pingpng")
    assert lines[1:3] == ["  schedule = pingpng", " " * 13 + "^"]
    assert lines[3].startswith("t.ucut:8:12: error: stages = lots")
    assert lines[4:6] == ["  stages = lots", " " * 11 + "^"]


def test_syntax_error_bad_token_says_what_was_expected():
    d = diagnostic(gemm("tile 128x128x64"), "syntax")
    assert (d.pos.line, d.pos.column) == (3, 8)
    assert "expected '='" in d.message and "':'" in d.message and "found shape '128x128x64'" in d.message
    assert set(d.valid) == {"=", ":"}


def test_syntax_error_unknown_layout():
    d = diagnostic(gemm(operands="a : bf16[M, K] rowmajor <- x  b : bf16[N, K]  d : bf16[M, N]"), "bad-layout")
    assert (d.pos.line, d.pos.column) == (2, 18) and d.valid == ("row", "col")
    assert "'rowmajor' is not a layout" in d.message


def test_syntax_error_unknown_block_and_unclosed_kernel():
    d = diagnostic(gemm("epilog { d = acc }"), "syntax")
    assert d.valid == ("epilogue",) and "'epilog'" in d.message
    d = diagnostic(gemm().rstrip().rstrip("}") + "\nkernel j : gemm { }", "syntax")
    assert d.valid == ("}",) and d.pos.line == 5 and "kernel" in d.message


def test_syntax_error_colon_and_equals_confused():
    assert "settings use '='" in diagnostic("kernel k : gemm { a = bf16[M, K] }", "syntax").message
    d = diagnostic(gemm("tile : 128x128x64"), "syntax")
    assert d.message == "tile is a setting: write tile = value"


def test_unknown_setting_with_suggestion():
    d = diagnostic(gemm("tiles = 128x128x64"), "unknown-setting")
    assert (d.pos.line, d.pos.column) == (3, 3)
    assert "'tiles'" in d.message and "did you mean 'tile'" in d.message
    assert d.valid == ("target", "accum", "tile", "cluster", "schedule", "stages", "scheduler", "split_k", "raster",
                       "swizzle", "reduction_mode", "alignment", "swap_ab", "math")


def test_unknown_dtype():
    d = diagnostic(gemm(operands="a : bf32[M, K]  b : bf16[N, K]  d : bf16[M, N]"), "unknown-dtype")
    assert (d.pos.line, d.pos.column) == (2, 7) and d.valid == lang.OPERAND_DTYPES
    assert d.valid[:3] == ("bf16", "f16", "f32") and "f8e4m3" in d.valid
    assert "ue8m0" not in d.valid and "ue4m3" not in d.valid  # scale-only dtypes are listed for scales
    assert diagnostic(gemm("accum = fp32"), "unknown-dtype").valid == lang.DTYPES
    assert diagnostic(gemm("epilogue { s : i8[N] d = acc + s }"), "unknown-dtype").pos.line == 3


def test_schedule_suggests_the_abbreviated_name_and_lists_only_the_targets_schedules():
    d = diagnostic(gemm("schedule = coop"), "bad-value")
    assert "did you mean 'cooperative'?" in d.message and "an sm90 schedule" in d.message
    assert d.valid == ("auto", "cooperative", "pingpong", "warpspecialized")  # a bf16 kernel: no fp8 fastaccum
    assert not any(v.endswith("sm") for v in d.valid)  # a new user was shown sm100's schedules for an sm90 kernel
    fp8 = "a : f8e4m3[M, K] row   b : f8e4m3[N, K] row   d : bf16[M, N] row"
    assert "pingpong_fp8_fastaccum" in diagnostic(gemm("schedule = coop", fp8), "bad-value").valid
    d = diagnostic(gemm("schedule = warpspec  target = sm100"), "bad-value")  # the target written after
    assert "did you mean 'warpspecialized_1sm'?" in d.message
    assert d.valid == ("auto", "warpspecialized_1sm", "warpspecialized_2sm")
    assert diagnostic(gemm("schedule = coop  target = {sm90, sm100}"), "bad-value").valid[:3] == lang.SCHEDULES[:3]
    assert did_you_mean("pi", ["pingpong"]) == ""  # two letters are too few to abbreviate


def test_unknown_activation():
    d = diagnostic(gemm("epilogue {\n d = gelu_tan(acc)\n}"), "unknown-function")
    assert (d.pos.line, d.pos.column) == (4, 6) and d.valid[:len(UNARY_OPS)] == UNARY_OPS  # then cast, reductions
    assert "did you mean 'gelu_tanh'" in d.message
    assert "one argument" in diagnostic(gemm("epilogue { d = relu(acc, acc) }"), "bad-call").message


def test_undefined_names():
    d = diagnostic(gemm("epilogue {\n bias : bf16[N]\n d = acc + bais\n}"), "undefined-name")
    assert (d.pos.line, d.pos.column) == (5, 12) and "'bais'" in d.message and "did you mean 'bias'" in d.message
    assert set(d.valid) == {"acc", "bias"}
    assert "c is not declared" in diagnostic(gemm("epilogue { d = acc + c }"), "undefined-name").message
    assert "before it is assigned" in diagnostic(gemm("epilogue { h = acc + g g = acc d = h + g }"),
                                                 "undefined-name").message
    assert "GEMM operand" in diagnostic(gemm("epilogue { d = acc + a }"), "undefined-name").message
    assert "call it" in diagnostic(gemm("epilogue { d = acc + relu }"), "undefined-name").message


def test_missing_operands_are_listed():
    d = diagnostic("kernel k : gemm {\n  a : bf16[M, K]\n}", "missing-operand")
    assert "missing: b, d" in d.message and (d.pos.line, d.pos.column) == (1, 8)
    assert d.valid == ("b : bf16[N, K] row", "d : bf16[M, N] row")


@pytest.mark.parametrize("operands, line_col", [
    ("a : bf16[M, N]  b : bf16[N, K]  d : bf16[M, N]", (2, 11)),
    ("a : bf16[M, K]  b : bf16[M, K]  d : bf16[M, N]", (2, 27)),
    ("a : bf16[M, K]  b : bf16[N, K]  d : bf16[M, N, K]", (2, 43)),
    ("a : bf16[M]  b : bf16[N, K]  d : bf16[M, N]", (2, 11)),
    ("a : bf16  b : bf16[N, K]  d : bf16[M, N]", (2, 7)),
])
def test_bad_operand_dims(operands, line_col):
    d = diagnostic(gemm(operands=operands), "bad-dims")
    assert (d.pos.line, d.pos.column) == line_col and len(d.valid) >= 1


def test_bad_epilogue_input_dims_and_layout():
    d = diagnostic(gemm("epilogue { e : bf16[K] d = acc + e }"), "bad-dims")
    assert "[N]" in d.valid and "[M, N]" in d.valid
    assert diagnostic(gemm("epilogue { e : bf16[N] col d = acc + e }"), "bad-layout")
    assert diagnostic(gemm("epilogue { e : bf16[M, N] diag d = acc + e }"), "bad-layout")
    assert diagnostic(gemm("epilogue { e : {bf16, f16}[N] d = acc + e }"), "choice-not-allowed")


def test_duplicates():
    d = diagnostic(gemm("tile = 128x128x64\n  tile = 64x128x64"), "duplicate-setting")
    assert d.pos.line == 4 and "first at line 3" in d.message
    assert diagnostic(gemm("a : bf16[M, K]"), "duplicate-operand").pos.line == 3
    assert diagnostic(gemm("epilogue { d = acc } epilogue { d = acc }"), "duplicate-epilogue")
    assert diagnostic(gemm("epilogue { e : f32 e : f32 d = acc * e }"), "duplicate-input")
    assert diagnostic(gemm("tile = {128x128x64, 128x128x64}"), "duplicate-option")
    assert diagnostic(gemm(name="k") + gemm(name="k"), "duplicate-kernel").pos.line == 5
    assert "twice" in diagnostic(gemm("epilogue { h = acc h = acc d = h }"), "bad-assignment").message


def test_unused_inputs_names_and_acc():
    d = diagnostic(gemm("epilogue {\n bias : bf16[N] <- fc1_bias\n d = acc\n}"), "unused-input")
    assert d.message == "bias is declared but the epilogue never reads it" and d.pos.line == 4
    d = diagnostic(gemm(operands=ABD + "  c : bf16[M, N]"), "unused-input")
    assert "c is declared" in d.message and d.pos.line == 2
    assert "c is declared" in diagnostic(gemm("epilogue { d = acc }", ABD + " c : bf16[M, N]"),
                                         "unused-input").message
    assert diagnostic(gemm("epilogue { h = acc * 2 d = acc }"), "unused-name").message == \
        "h is computed but never used"
    assert "never reads acc" in diagnostic(gemm("epilogue { e : f32 d = e * 2 }"), "unused-acc").message


def test_bindings_must_point_the_right_way():
    assert "'->'" in diagnostic(gemm(operands="a : bf16[M, K]  b : bf16[N, K]  d : bf16[M, N] <- y"),
                                "bad-binding").message
    assert "'<-'" in diagnostic(gemm(operands="a : bf16[M, K] -> x  b : bf16[N, K]  d : bf16[M, N]"),
                                "bad-binding").message
    assert diagnostic(gemm(operands="a : bf16[M, K] = 1  b : bf16[N, K]  d : bf16[M, N]"), "bad-binding")
    assert diagnostic(gemm("epilogue { e : bf16[N] = 1 d = acc + e }"), "bad-binding")
    # '->' in the epilogue declares an extra output (tests/test_evt.py); reading it before assigning it is an error
    assert "before it is assigned" in diagnostic(gemm("epilogue { e : bf16[M, N] -> pre d = acc + e }"),
                                                 "undefined-name").message


def test_epilogue_assignment_rules():
    assert "never assigns d" in diagnostic(gemm("epilogue { h = acc }"), "missing-output").message
    assert "last assignment" in diagnostic(gemm("epilogue { d = acc h = acc }"), "bad-assignment").message
    assert diagnostic(gemm("epilogue { acc = acc d = acc }"), "bad-assignment")
    assert diagnostic(gemm("epilogue { e : f32 e = acc d = acc * e }"), "bad-assignment")
    assert diagnostic(gemm("epilogue { acc : f32 d = acc }"), "bad-name")
    assert diagnostic(gemm("epilogue { relu : f32 d = acc }"), "bad-name")
    d = diagnostic(gemm("epilogue { d = acc / 2 }"), "unsupported")
    assert "'/'" in d.message and d.valid == ("+", "-", "*")


def test_bad_values():
    assert "M x N x K" in diagnostic(gemm("tile = 128x128"), "bad-value").message
    assert diagnostic(gemm("cluster = 0x1x1"), "bad-value")
    assert diagnostic(gemm("tile = cooperative"), "bad-value")
    d = diagnostic(gemm("schedule = coop"), "bad-value")
    assert set(d.valid) < set(lang.SCHEDULES) and "warpspecialized_2sm" not in d.valid  # sm90's only
    assert diagnostic(gemm("stages = 2.5"), "bad-value").valid[0] == "auto"
    assert diagnostic(gemm("scheduler = streamk"), "bad-value").valid == lang.SCHEDULERS
    assert diagnostic(gemm("target = sm80"), "bad-value").valid == ("sm90", "sm100")
    assert diagnostic(gemm(operands="a : bf16[M, K] {row, diag}  b : bf16[N, K]  d : bf16[M, N]"),
                      "bad-layout").valid == ("row", "col")


def test_unknown_family_and_operand():
    d = diagnostic("kernel c : layernorm { }", "unknown-family")
    assert d.message == "kernel family 'layernorm' is not supported yet" and "gemm" in d.valid and "conv" in d.valid
    assert (d.pos.line, d.pos.column) == (1, 12)
    d = diagnostic(gemm(operands=ABD + "  bias : bf16[N]"), "unknown-operand")
    assert "epilogue" in d.message and d.valid == ("a", "b", "c", "d")


def test_an_error_in_an_intermediate_does_not_cascade():
    diags = diagnostics(gemm("epilogue { h = foo(acc) d = h + 1 }"))
    assert [d.code for d in diags] == ["unknown-function"]


def test_several_errors_are_reported_at_once_in_source_order():
    text = gemm("tiles = 1x1x1\n  schedule = fast\n  epilogue { d = gelu_tan(acc) }",
                operands="a : bf17[M, K]  b : bf16[N, K]  d : bf16[M, N]")
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(text, "t.ucut")
    codes = [d.code for d in info.value.diagnostics]
    assert codes == ["unknown-dtype", "unknown-setting", "bad-value", "unknown-function"]
    text = str(info.value)
    assert text.startswith("t.ucut:2:7: error: unknown dtype 'bf17'")
    assert "(valid: bf16, f16, f32, f8e4m3" in text and text.rstrip().endswith("^")


def test_visit_errors_are_wrapped(monkeypatch):
    def boom(self, meta, children):
        raise ValueError("boom")
    monkeypatch.setattr(syntax.ToAst, "shape", boom)
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(gemm("tile = 128x128x64"), "t.ucut")
    (d,) = info.value.diagnostics
    assert d.code == "syntax" and "boom" in d.message and d.pos.line == 3


def test_errors_are_json_ready():
    with pytest.raises(UcutSyntaxError) as info:
        lang.parse(gemm("tiles = 1x1x1"), "t.ucut")
    record = info.value.diagnostics[0].to_json()
    assert record["code"] == "unknown-setting" and record["line"] == 3 and "tile" in record["valid"]


# --- check and legal_combinations ---------------------------------------------------------------------------

def test_check_concrete_kernel_and_program():
    program = lang.parse(gemm("tile = 128x256x64 cluster = 2x1x1 schedule = cooperative"))
    assert arch.check(program) == [] and arch.check(program.kernel()) == []
    bad = lang.parse(gemm("tile = 64x128x64 schedule = cooperative"))
    (d,) = arch.check(bad)
    assert d.code == "sm90.cooperative-tile-m" and d.pos.line == 3


def test_legal_combinations_counts():
    k = kernel_of("tile = {64x128x64, 128x128x64, 256x128x64} schedule = {cooperative, pingpong}")
    legal, rejected = arch.legal_combinations(k)
    assert len(legal) == 4 and len(rejected) == 2
    assert {(p["tile"][0], p["schedule"]) for p in legal} == {
        (128, Schedule.cooperative), (256, Schedule.cooperative), (64, Schedule.pingpong),
        (128, Schedule.pingpong)}
    assert [[d.code for d in errs] for _, errs in rejected] == [["sm90.cooperative-tile-m"],
                                                                ["sm90.pingpong-tile-m"]]
    assert rejected[0][0] == {"tile": (64, 128, 64), "schedule": Schedule.cooperative}
    (summary,) = arch.check(k)
    assert summary.severity == "note" and summary.code == "choices"
    assert summary.message.startswith("4 of 6 combinations of the open choices (tile, schedule)")
    assert "sm90.cooperative-tile-m (1)" in summary.message


def test_check_reports_rules_every_combination_breaks():
    k = kernel_of("tile = {64x128x64, 64x256x64} schedule = cooperative cluster = {1x1x1, 2x1x1}")
    diags = arch.check(k)
    assert [d.code for d in diags] == ["sm90.cooperative-tile-m", "choices"]
    assert all(d.severity == "error" for d in diags)
    assert "every combination" in diags[0].message and diags[0].pos.line == 3
    assert diags[1].message.startswith("0 of 4 combinations")


def test_check_reports_rule_errors_in_source_order():
    text = gemm("stages = 1\n  split_k = 2\n  tile = {128x128x64, 128x250x64}\n  schedule = cooperative")
    diags = arch.check(lang.parse(text.replace("tile = {128x128x64, 128x250x64}", "tile = 128x128x64")))
    assert [d.code for d in diags] == ["sm90.stages-min", "sm90.split-k-scheduler"]  # the rules run the other way
    assert diags[0].pos.line < diags[1].pos.line
    (dead,) = [d for d in arch.check(lang.parse(text.replace("split_k = 2", "").replace("stages = 1", "")))
               if d.severity == "warning"]
    assert dead.code == "dead-option" and dead.message.startswith("tile = 128x250x64 is in no legal combination")
    assert dead.valid == ("128x128x64",)


def test_check_with_extents_and_concrete_kernel_has_one_combination():
    k = kernel_of()
    assert arch.legal_combinations(k) == ([{}], [])
    diags = arch.check(k, {"M": 4096, "N": 4096, "K": 4095})
    assert [d.code for d in diags] == ["sm90.align", "sm90.align"]
    choosy = kernel_of("tile = {128x128x64, 64x128x64}")
    legal, rejected = arch.legal_combinations(choosy, {"K": 4095})
    assert legal == [] and len(rejected) == 2
    diags = arch.check(choosy, {"K": 4095})
    assert [(d.code, d.message[0]) for d in diags] == [("sm90.align", "a"), ("sm90.align", "b"), ("choices", "0")]


def _positions(value, out=None):
    """Every Pos in an IR value, in field order (positions do not take part in IR equality)."""
    import dataclasses as dc

    from ucutlass.ir import Pos

    out = [] if out is None else out
    if isinstance(value, Pos):
        out.append(value)
    elif dc.is_dataclass(value) and not isinstance(value, type):
        for f in dc.fields(value):
            _positions(getattr(value, f.name), out)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _positions(v, out)
    elif isinstance(value, dict):
        for k in sorted(value):
            _positions(value[k], out)
    return out


@pytest.mark.parametrize("path", sorted(str(p) for p in (REPO / "examples").glob("*.ucut"))
                         + sorted(str(p) for p in (REPO / "problems").glob("*/kernel.ucut")))
def test_resolve_moves_positions_as_parsing_the_new_text_would(path):
    """Program.resolve substitutes values in the IR (it does not parse again): the kernels and every position —
    of the choices left open and of every setting, operand and statement after a resolved one — equal those of
    parsing the resolved text. One choice of every two is picked (the last option), the others stay open."""
    program = lang.parse_file(path)
    keys = sorted(program.choices())
    picks = {k: program.choices()[k].options[-1] for k in keys[::2]}
    resolved = program.resolve(picks)
    again = lang.parse(resolved.source, program.file)
    assert resolved.kernels == again.kernels
    assert _positions(resolved.kernels) == _positions(again.kernels)
    assert sorted(resolved.choices()) == sorted(set(keys) - set(picks))
