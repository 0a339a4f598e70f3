"""Malformed input gets a clear error in bounded time (issue 19): the limits of ucutlass.lang.limits, bounded
diagnostics, the cap on combinations, `check` agreeing with `tune` and the run time, and the tuner's files.

Each test asserts where the message points (line:col) and what it says (the limit, the choices to narrow)."""

from __future__ import annotations

import time

import pytest

from ucutlass import arch, lang
from ucutlass.cli import main
from ucutlass.errors import MAX_DIAGNOSTICS, MAX_EXCERPT_CHARS, CheckError, UcutSyntaxError
from ucutlass.lang import limits
from ucutlass.search.space import SearchSpace

OPERANDS = "a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row"


def gemm(body: str = "", epilogue: str = "") -> str:
    """A gemm kernel on line 1 with ``body`` on line 2 and, when given, ``epilogue`` (``d = …``) on line 3."""
    text = f"kernel k : gemm {{ {OPERANDS}\n  {body}\n"
    if epilogue:
        text += f"  epilogue {{ {epilogue} }}\n"
    return text + "}\n"


def refused(text: str, file: str = "t.ucut") -> UcutSyntaxError:
    start = time.monotonic()
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse(text, file)
    assert time.monotonic() - start < 5, "a limit must be checked before the work it bounds"
    return e.value


def only(err: UcutSyntaxError):
    assert len(err.diagnostics) == 1, err.format()
    return err.diagnostics[0]


# --- step 1: limits at parse ------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, deep", [("-" * 490 + "acc", 491), ("relu(" * 300 + "acc" + ")" * 300, 301),
                                        ("relu(" * 33 + "acc" + ")" * 33, 34)])
def test_nesting_deeper_than_32_is_an_error_at_the_expression(expr, deep):
    d = only(refused(gemm(epilogue=f"d = {expr}")))
    assert (d.code, d.pos.line, d.pos.column) == ("too-deep", 3, 18)
    assert f"nests {deep} deep; at most {limits.MAX_DEPTH}" in d.message


def test_nesting_of_32_is_accepted():
    kernel = lang.parse(gemm(epilogue="d = " + "relu(" * 31 + "acc" + ")" * 31)).kernels[0]
    assert kernel.name == "k"


def test_a_sum_of_20000_terms_is_an_error_not_a_recursion_error():
    d = only(refused(gemm(epilogue="d = " + " + ".join(["acc"] * 20000))))
    assert d.code == "too-deep" and (d.pos.line, d.pos.column) == (3, 18)


def test_more_than_256_nodes_in_one_expression():
    wide = " + ".join("(" + " + ".join(["acc"] * 8) + ")" for _ in range(20))  # 319 nodes, 12 deep
    d = only(refused(gemm(epilogue=f"d = {wide}")))
    assert d.code == "too-large" and (d.pos.line, d.pos.column) == (3, 18)
    assert f"at most {limits.MAX_EXPRESSION_NODES}" in d.message


def test_inlined_intermediates_are_bounded_too():
    """h_i = h_(i-1) + h_(i-1): each statement is small, the inlined tree doubles (2^60 nodes unbounded)."""
    chain = "h0 = acc + acc  " + "  ".join(f"h{i} = h{i - 1} + h{i - 1}" for i in range(1, 60)) + "  d = h59"
    d = only(refused(gemm(epilogue=chain)))
    assert d.code == "too-large" and "intermediates inlined" in d.message
    assert d.pos.line == 3 and chain.startswith("h7 = ", d.pos.column - 14)  # h7 holds 511 nodes


@pytest.mark.parametrize("body, epilogue, code, column, words", [
    ("split_k = 99999999999", "", "bad-number", 13, "at most 2147483647"),
    ("tile = 128x128x99999999999", "", "bad-number", 10, "at most 2147483647"),
    ("", "d = acc * " + "9" * 4301, "bad-number", 24, "4301 characters; at most 40"),
    ("", "d = acc * 1e999", "bad-number", 24, "1e999 is not a finite f32 constant"),
    ("", "alpha : f32 = 1e39  d = acc * alpha", "bad-number", 28, "not a finite f32"),
])
def test_numbers_out_of_range(body, epilogue, code, column, words):
    d = only(refused(gemm(body, epilogue)))
    line = 2 if body else 3
    assert (d.code, d.pos.line, d.pos.column) == (code, line, column), d
    assert words in d.message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\r\n\t  \n"])
def test_an_empty_file_is_an_error(text):
    d = only(refused(text, "empty.ucut"))
    assert (d.code, str(d.pos), d.valid) == ("empty", "empty.ucut:1:1", ("kernel",))
    assert "no kernel" in d.message


def test_a_file_over_256_kib_is_refused_before_it_is_parsed(tmp_path):
    path = tmp_path / "big.ucut"
    path.write_text(gemm() + "# " + "x" * limits.MAX_FILE_BYTES + "\n")
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse_file(path)
    d = only(e.value)
    assert d.code == "too-large" and str(d.pos) == f"{path}:1:1" and "262144" in d.message
    d = only(refused(path.read_text()))
    assert d.code == "too-large"


def test_diagnostics_are_capped_and_excerpts_bounded():
    """48 KB of duplicate options printed 289 MB before: each error reprinted the whole line."""
    options = ",".join(["128x128x64"] * 5000)
    err = refused(gemm(f"tile = {{{options}}}"))
    assert len(err.diagnostics) == MAX_DIAGNOSTICS + 1
    assert all(d.code == "duplicate-option" for d in err.diagnostics[:-1])
    note = err.diagnostics[-1]
    assert note.code == "too-many" and note.severity == "note"
    assert f"{5000 - 1 - MAX_DIAGNOSTICS} more" in note.message
    text = err.format()
    assert len(text) < (MAX_DIAGNOSTICS + 1) * 3 * (MAX_EXCERPT_CHARS + 200)
    assert [(d.pos.line, d.pos.column) for d in err.diagnostics[:2]] == [(2, 22), (2, 33)]
    lines = text.splitlines()
    assert lines[1].startswith("  tile = {128x128x64,") and lines[1].endswith("…")  # cut after
    line, caret = lines[-5:-3]  # the 50th duplicate: cut on both sides
    assert len(line) <= MAX_EXCERPT_CHARS + 2 and line.startswith("…") and line.endswith("…")
    assert line[caret.index("^"):].startswith("128x128x64")  # the caret still under the option


def test_short_lines_are_shown_whole():
    err = refused(gemm("tiles = 128x128x64"))
    d = only(err)
    assert d.code == "unknown-setting" and (d.pos.line, d.pos.column) == (2, 3)
    assert err.format().splitlines()[1:3] == ["  tiles = 128x128x64", "  ^"]


# --- step 2: combinations counted before they are enumerated ------------------------------------------------

BOMB = """kernel k : gemm {
  a : {bf16, f16}[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row
  tile = {128x128x64, 128x256x64, 64x128x64, 64x256x64, 128x64x64, 256x128x64, 128x128x128, 64x64x64}
  cluster = {1x1x1, 2x1x1, 1x2x1, 2x2x1, 4x1x1, 1x4x1, 4x2x1, 2x4x1}
  schedule = {auto, cooperative, pingpong, warpspecialized}   stages = {auto, 2, 3, 4}
  swizzle = {1, 2, 4, 8}   raster = {auto, along_m, along_n}   split_k = {1, 2, 4, 8, 16, 32, 64, 128}
}
"""


def test_a_choice_bomb_is_refused_with_the_count_and_the_choices_to_narrow():
    kernel = lang.parse(BOMB, "bomb.ucut").kernels[0]
    assert arch.count_combinations(kernel) == 2 * 8 * 8 * 4 * 4 * 4 * 3 * 8
    start = time.monotonic()
    for run in (arch.legal_combinations, arch.check, lambda k: SearchSpace.of(lang.parse(BOMB), "k")):
        with pytest.raises(CheckError) as e:
            run(kernel)
        d = only(e.value)
        assert d.code == "too-large" and (d.pos.line, d.pos.column) == (3, 10)  # at tile, the largest choice
        assert "196608 combinations" in d.message and f"at most {arch.MAX_COMBINATIONS}" in d.message
        assert "tile 8 × cluster 8 × split_k 8 × schedule 4" in d.message
        assert d.valid == ("tile", "cluster") and "narrow tile, cluster (one option each leaves 3072)" in d.message
    assert time.monotonic() - start < 2  # counted, not enumerated (~0.5 ms a combination)


def test_the_limit_itself_is_counted_not_enumerated():
    text = BOMB.replace("split_k = {1, 2, 4, 8, 16, 32, 64, 128}", "").replace("{bf16, f16}", "bf16")
    text = text.replace("raster = {auto, along_m, along_n}", "")
    kernel = lang.parse(text).kernels[0]
    assert arch.require_countable(kernel) == arch.MAX_COMBINATIONS  # 8·8·4·4·4 = 4096: accepted


def test_check_cli_refuses_a_choice_bomb(tmp_path, capsys):
    path = tmp_path / "bomb.ucut"
    path.write_text(BOMB)
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr()
    out = err.out + err.err
    assert f"{path}:3:10: error: kernel k: its open choices make 196608 combinations" in out
    assert "(valid: tile, cluster)" in out
