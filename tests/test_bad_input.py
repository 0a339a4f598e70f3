"""Malformed input gets a clear error in bounded time (issue 19): the limits of ucutlass.lang.limits, bounded
diagnostics, the cap on combinations, `check` agreeing with `tune` and the run time, and the tuner's files.

Each test asserts where the message points (line:col) and what it says (the limit, the choices to narrow)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import optuna
import pytest
from search_fakes import SPEC, FakeBuild, FakeMeasure, make_plan, make_tuner  # tests/ is on sys.path

from ucutlass import arch, codegen, ir, lang
from ucutlass.bind import bind
from ucutlass.cli import main
from ucutlass.errors import MAX_DIAGNOSTICS, MAX_EXCERPT_CHARS, CheckError, UcutError, UcutSyntaxError
from ucutlass.grader import Grader, GraderError, solution_from_file
from ucutlass.lang import limits
from ucutlass.problem import load_problem
from ucutlass.search import TuneConfig
from ucutlass.search import report as report_module
from ucutlass.search.planning import plan
from ucutlass.search.report import write_outputs
from ucutlass.search.space import SearchSpace
from ucutlass.search.storage import StorageError

optuna.logging.set_verbosity(optuna.logging.WARNING)

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


@pytest.mark.parametrize("expr", ["relu(" * 31 + "acc" + ")" * 31,  # 32 deep: the limit
                                  " + ".join(["acc"] * 16),  # 31 nodes, 16 deep
                                  " + ".join("(" + " + ".join(["acc"] * 4) + ")" for _ in range(18))])  # 143 nodes
def test_what_the_limits_accept_compiles(expr):
    """Within the limits, check and compile --emit-only agree: the CUTLASS EVT tree renders (300 nested relu
    passed check and then failed in jinja2's recursion)."""
    kernel = lang.parse(gemm("tile = 128x128x64", epilogue=f"d = {expr}")).kernels[0]
    assert not [d for d in arch.check(kernel) if d.severity == "error"]
    assert "acc" in ir.expr_to_text(kernel.epilogue) and codegen.render(kernel, "t.ucut")


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


# --- step 3: `check` accepts what `tune` and the run time accept ------------------------------------------

def write_problem(root: Path, name: str, n: int, reference: str = "    return hidden_states @ weight.T\n") -> Path:
    """A one-GEMM problem (logits = hidden · weightᵀ, bf16) with vocabulary ``n`` and two workloads of M."""
    folder = root / name
    folder.mkdir(parents=True)
    definition = {
        "name": name, "description": "lm_head with a vocabulary of any size",
        "axes": {"M": {"type": "var"}, "vocab": {"type": "const", "value": n},
                 "hidden": {"type": "const", "value": 64}},
        "inputs": {"hidden_states": {"shape": ["M", "hidden"], "dtype": "bfloat16"},
                   "weight": {"shape": ["vocab", "hidden"], "dtype": "bfloat16"}},
        "outputs": {"output": {"shape": ["M", "vocab"], "dtype": "bfloat16"}},
        "reference": "import torch\n\ndef run(hidden_states, weight):\n" + reference,
    }
    (folder / "definition.json").write_text(json.dumps(definition))
    inputs = {"hidden_states": {"type": "random"}, "weight": {"type": "random"}}
    (folder / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"m{m}", "axes": {"M": m}, "inputs": inputs,
                    "tolerance": {"max_atol": 0.01, "max_rtol": 0.02}}) + "\n" for m in (128, 512)))
    return folder


LM_HEAD = """kernel lm_head : gemm {
  a : bf16[M, K] row <- hidden_states
  b : bf16[N, K] LAYOUT <- weight
  d : bf16[M, N] row -> output
  tile = {64x128x64, 128x128x64, 128x256x64}   schedule = {cooperative, pingpong}   scheduler = {persistent, stream_k}
}
"""


def test_check_and_tune_decide_alignment_auto_alike(tmp_path, capsys):
    """N = 50260 (a multiple of 4, not 8): `auto` is 4 elements. check said "6 of 12 pass" while tune --dry-run
    said no legal configuration (it checked 16-byte TMA)."""
    write_problem(tmp_path, "lm_head_ragged", 50260)
    spec = tmp_path / "lm_head.ucut"
    spec.write_text(LM_HEAD.replace("LAYOUT", "row"))
    assert main(["check", str(spec), "--problem", "lm_head_ragged", "--problems", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kernels"][0]["legal_combinations"] == 6
    problem = load_problem(tmp_path / "lm_head_ragged")
    tuned = plan(problem, lang.parse_file(spec))
    assert len(tuned.legal) == 6
    assert {tuned.space.concrete(p).alignment for p in tuned.legal} == {4}  # what a bound call loads
    assert bind(tuned.space.concrete(tuned.legal[0]), problem).kernel.alignment == 4


def test_check_and_tune_agree_when_nothing_is_legal(tmp_path, capsys):
    write_problem(tmp_path, "lm_head_odd", 50257)  # odd: alignment 1, below cp.async's 4 bytes
    spec = tmp_path / "lm_head.ucut"
    spec.write_text(LM_HEAD.replace("LAYOUT", "row"))
    assert main(["check", str(spec), "--problem", "lm_head_odd", "--problems", str(tmp_path)]) == 1
    assert "0 of 12 combinations" in capsys.readouterr().out
    with pytest.raises(UcutError, match="no legal configuration"):
        plan(load_problem(tmp_path / "lm_head_odd"), lang.parse_file(spec))


def test_a_col_operand_bound_to_a_contiguous_tensor_is_a_bind_layout_error(tmp_path, capsys):
    """It checked clean, then every workload failed at run time ("strides (K, 1) do not match a col-major")."""
    write_problem(tmp_path, "lm_head", 50304)
    spec = tmp_path / "lm_head.ucut"
    spec.write_text(LM_HEAD.replace("LAYOUT", "col"))
    with pytest.raises(CheckError) as e:
        bind(lang.parse_file(spec).kernels[0], load_problem(tmp_path / "lm_head"))
    d = only(e.value)
    assert (d.code, d.pos.line, d.pos.column, d.valid) == ("bind-layout", 3, 3, ("row",))
    assert d.message.startswith("b : [N, K] col <- weight: lm_head's tensors are contiguous")
    assert "declare b : [N, K] row" in d.message
    assert main(["check", str(spec), "--problem", "lm_head", "--problems", str(tmp_path)]) == 1
    assert f"{spec}:3:3: error: b : [N, K] col <- weight" in capsys.readouterr().out


def test_binding_messages_name_the_arrow_and_the_real_cause(tmp_path):
    write_problem(tmp_path, "lm_head", 50304)
    text = LM_HEAD.replace("LAYOUT", "row").replace("d : bf16[M, N] row -> output", "d : bf16[B, M, N] row -> output")
    text = text.replace("a : bf16[M, K] row", "a : bf16[B, M, K] row")  # batched a and d, one b
    with pytest.raises(CheckError) as e:
        bind(lang.parse(text, "t.ucut").kernels[0], load_problem(tmp_path / "lm_head"))
    messages = [d.message for d in e.value.diagnostics]
    assert any(m.startswith("d -> output: shape [128, 50304] cannot be read as [B, M, N] row (the tensor has 2 "
                            "dims, fewer than the 3 declared)") for m in messages), messages
    assert not any("d <- output" in m or "only row-major" in m for m in messages)


def test_an_all_nan_reference_is_a_grader_error(tmp_path):
    folder = write_problem(tmp_path, "lm_head_nan", 64, "    return (hidden_states @ weight.T) * float('nan')\n")
    candidate = tmp_path / "honest.py"
    candidate.write_text("import torch\n\ndef run(hidden_states, weight):\n    return hidden_states @ weight.T\n")
    problem = load_problem(folder)
    with Grader(problem, device="cpu", warmup_ms=2.0, rep=5.0, timeout_s=60.0) as grader:
        with pytest.raises(GraderError) as e:
            grader.grade(solution_from_file(candidate, problem), [0], timed=False)
    assert "lm_head_nan: the reference's 'output' is all NaN/Inf on workload" in str(e.value)
    assert "no candidate can match it" in str(e.value)


# --- step 4: the tuner's files and storage -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tune_plan():
    return make_plan()


def brute(trials: int = 4) -> TuneConfig:
    return TuneConfig(batch=4, seed=1, trials=trials, sampler="brute", epsilon=0.0, patience=100)


def test_tune_outputs_are_0644_and_written_atomically(tune_plan, tmp_path, monkeypatch):
    result = make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute()).run()
    paths = write_outputs(result, tmp_path)
    for key in ("best", "table", "json", "csv"):
        assert stat.S_IMODE(paths[key].stat().st_mode) == 0o644, key
    before = paths["csv"].read_text()
    assert before.count("\n") == len(result.trials) + 1

    def broken_replace(src, dst):  # the run dies between writing and renaming: the old trials.csv stays whole
        raise KeyboardInterrupt

    monkeypatch.setattr(report_module.os, "replace", broken_replace)
    with pytest.raises(KeyboardInterrupt):
        write_outputs(result, tmp_path)
    assert paths["best"].read_text() and paths["csv"].read_text() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_resuming_a_study_whose_choices_changed_is_refused(tune_plan, tmp_path):
    """An explicit --study over a changed choice list ended in a ValueError at the final verification."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()
    narrowed = plan(tune_plan.problem, lang.parse(SPEC.replace("128x192x64, ", ""), "spec.ucut"))
    with pytest.raises(UcutError) as e:
        make_tuner(narrowed, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()
    message = str(e.value)
    assert message.startswith("study 's' was made for other choices of kernel qkv_proj (tile was {64x128x64, "
                              "128x128x64, 128x192x64, 256x128x64}, is {64x128x64, 128x128x64, 256x128x64})")
    assert "--study s-2" in message
    # the same choices resume
    make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute(6), storage=storage, study_name="s").run()


def test_a_study_from_before_the_space_was_stored_is_checked_by_its_trials(tune_plan, tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()
    study = optuna.load_study(study_name="s", storage=storage)
    study._storage.set_study_user_attr(study._study_id, "space", None)  # as an older ucutlass left it
    narrowed = plan(tune_plan.problem, lang.parse(SPEC.replace("cluster   = {1x1x1, 2x1x1}", "cluster = 1x1x1"),
                                                  "spec.ucut"))
    with pytest.raises(UcutError, match=r"trial \d+ has cluster = \dx1x1, not an option now"):
        make_tuner(narrowed, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()


def _corrupt_sqlite(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 3])


def _corrupt_journal(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2] + "\n" + "".join(lines[4:]))


@pytest.mark.parametrize("name, corrupt", [("study.db", _corrupt_sqlite), ("study.log", _corrupt_journal)])
def test_a_corrupt_storage_is_a_storage_error_naming_the_file(tune_plan, tmp_path, name, corrupt):
    path = tmp_path / name
    storage = f"sqlite:///{path}" if name.endswith(".db") else f"journal://{path}"
    make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()
    corrupt(path)
    with pytest.raises(StorageError) as e:
        make_tuner(tune_plan, FakeBuild(), FakeMeasure(), config=brute(), storage=storage, study_name="s").run()
    message = str(e.value)
    assert f"in {path}: the storage is corrupt or truncated" in message
    assert f"mv {path} {path}.broken" in message and "--storage" in message


def test_inlined_extra_outputs_are_bounded_too():
    """An [M, N] output's value is inlined like an intermediate's: h6 holds 255 nodes, pre = h6 * h6 511."""
    chain = "  ".join(f"h{i} = h{i - 1} + h{i - 1}" for i in range(1, 7))
    epilogue = f"pre : f32[M, N] row -> pre_out  h0 = acc + acc  {chain}  pre = h6 * h6  d = pre"
    d = only(refused(gemm(epilogue=epilogue)))
    assert d.code == "too-large" and "511 terms" in d.message
    assert d.pos.line == 3 and epilogue.startswith("pre = h6", d.pos.column - 14)


def test_a_layout_choice_with_col_bound_to_a_contiguous_tensor_is_a_bind_layout_error(tmp_path):
    """The tuner would build the col option and see every workload fail: check refuses it first."""
    write_problem(tmp_path, "lm_head", 50304)
    text = LM_HEAD.replace("LAYOUT", "{row, col}")
    with pytest.raises(CheckError) as e:
        bind(lang.parse(text, "t.ucut").kernels[0], load_problem(tmp_path / "lm_head"))
    d = only(e.value)
    assert (d.code, d.pos.line, d.valid) == ("bind-layout", 3, ("row",))
    assert d.message.startswith("b : [N, K] {row, col} <- weight: lm_head's tensors are contiguous")


def test_a_file_without_a_size_is_read_only_up_to_the_limit():
    """/dev/zero (or a pipe) reports size 0: reading it whole never ends."""
    with pytest.raises(UcutSyntaxError) as e:
        lang.parse_file("/dev/zero")
    d = only(e.value)
    assert d.code == "too-large" and "more than 262144 bytes" in d.message and str(d.pos) == "/dev/zero:1:1"


def test_check_cli_exits_1_on_an_empty_or_huge_file(tmp_path, capsys):
    """Both exited 0 with no kernel (empty), or took all the memory (a 5 MB file of duplicate options)."""
    empty = tmp_path / "empty.ucut"
    empty.write_text("# a comment and nothing else\n")
    assert main(["check", str(empty)]) == 1
    assert f"{empty}:1:1: error: the file holds no kernel" in capsys.readouterr().err
    huge = tmp_path / "huge.ucut"
    huge.write_text(gemm("tile = {" + ",".join(["128x128x64"] * 500_000) + "}"))
    start = time.monotonic()
    assert main(["check", str(huge)]) == 1
    out = capsys.readouterr()
    assert time.monotonic() - start < 5 and len(out.err) < 1000
    assert f"{huge}:1:1: error: the file holds 5500" in out.err and "at most 262144" in out.err


def test_a_misspelt_input_in_an_open_program_is_named_by_grade(tmp_path, capsys):
    """`grade --emulate` of a program with open choices and a misspelt binding (`<- hiden_states`) said only that
    "no combination of kernel ffn_up's choices passes the rules and binds", and its --json had no diagnostics: every
    combination fails alike, so that error is the answer, positioned, in the feedback's diagnostics too."""
    from ucutlass.cli import main
    from ucutlass.problem import find_problem

    spec = find_problem("ffn_up_gelu_tanh_gpt2_xl").spec_path.read_text()
    bad = tmp_path / "bad.ucut"
    bad.write_text(spec.replace("<- hidden_states", "<- hiden_states"))
    assert main(["grade", str(bad), "ffn_up_gelu_tanh_gpt2_xl", "--emulate", "--json"]) != 0
    doc = json.loads(capsys.readouterr().out)
    assert any("no input 'hiden_states'; did you mean 'hidden_states'?" in d["message"] and d["line"] == 3
               for d in doc["diagnostics"]), doc["diagnostics"]
