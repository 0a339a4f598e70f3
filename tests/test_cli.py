"""The ``ucutlass`` command line on a CPU machine: what works without a GPU, and how errors look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ucutlass.cli import main

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "problems" / "o_proj_residual_llama3_1_8b" / "kernel.ucut"


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_check_reports_legal_combinations(capsys):
    rc, out, _ = run(capsys, "check", str(SPEC), "--problem", "o_proj_residual_llama3_1_8b")
    assert rc == 0
    assert "116 of 384 combinations" in out


def test_check_json_for_a_broken_program(capsys, tmp_path):
    bad = tmp_path / "bad.ucut"
    bad.write_text("kernel k : gemm {\n  a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row\n"
                   "  tile = 64x128x64  schedule = cooperative\n}\n")
    rc, out, _ = run(capsys, "check", str(bad), "--json")
    assert rc == 1
    doc = json.loads(out)
    assert not doc["ok"]
    (diag,) = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert diag["code"] == "sm90.cooperative-tile-m" and diag["line"] == 3
    assert diag["valid"] == ["128x128x64", "256x128x64"]  # the tile with each allowed M


def test_syntax_error_has_line_column_and_caret(capsys, tmp_path):
    bad = tmp_path / "typo.ucut"
    bad.write_text("kernel k : gemm {\n  a : bf16[M, K] rowmajor\n}\n")
    rc, out, err = run(capsys, "check", str(bad))
    assert rc == 1
    assert f"{bad}:2:" in err and "^" in err


def test_binding_errors_name_the_valid_problem_tensors(capsys, tmp_path):
    spec = tmp_path / "wrong.ucut"
    spec.write_text(SPEC.read_text().replace("<- residual", "<- resid"))
    rc, out, _ = run(capsys, "check", str(spec), "--problem", "o_proj_residual_llama3_1_8b")
    assert rc == 1
    assert "no input 'resid'" in out and "residual" in out


def test_binding_to_a_misspelt_problem_tensor_suggests_the_close_name(capsys, tmp_path):
    spec = tmp_path / "fc1.ucut"
    shipped = REPO / "problems" / "ffn_up_gelu_tanh_gpt2_xl" / "kernel.ucut"
    spec.write_text(shipped.read_text().replace("<- fc_weight", "<- fc1_weight"))
    rc, out, _ = run(capsys, "check", str(spec), "--problem", "ffn_up_gelu_tanh_gpt2_xl")
    assert rc == 1 and "has no input 'fc1_weight'; did you mean 'fc_weight'?" in out


def test_binding_errors_are_one_each_with_the_fix(capsys, tmp_path):
    """A misspelt binding is one error (its tensor is not also reported unused), shown under its line; a wrong
    dtype is named in .ucut spelling; a transposed operand is one error that shows the tensor's shape and the
    declaration that would agree (not one per mode and operand)."""
    shipped = (REPO / "problems" / "ffn_up_gelu_tanh_gpt2_xl" / "kernel.ucut").read_text()
    cases = {"typo": shipped.replace("<- fc_weight ", "<- fc_weights "),
             "dtype": shipped.replace("a : bf16[M, K] row", "a : f16[M, K] row"),
             "swap": shipped.replace("b : bf16[N, K] row", "b : bf16[K, N] row")}
    errors = {}
    for name, text in cases.items():
        spec = tmp_path / f"{name}.ucut"
        spec.write_text(text)
        rc, out, _ = run(capsys, "check", str(spec), "--problem", "ffn_up_gelu_tanh_gpt2_xl")
        assert rc == 1
        errors[name] = [line for line in out.splitlines() if ": error: " in line]
        assert len(errors[name]) == 1, out
    assert "has no input 'fc_weights'; did you mean 'fc_weight'?" in errors["typo"][0]
    assert "a is f16 but ffn_up_gelu_tanh_gpt2_xl.hidden_states is bf16 (torch.bfloat16) (valid: bf16)" \
        in errors["dtype"][0]
    assert ("b <- fc_weight has shape [6400, 1600]: read as [K, N] row that makes K = 6400, but a <- "
            "hidden_states gives K = 1600; declared as [N, K] it would agree") in errors["swap"][0]
    out = run(capsys, "check", str(tmp_path / "typo.ucut"), "--problem", "ffn_up_gelu_tanh_gpt2_xl")[1]
    assert "  b : bf16[N, K] row <- fc_weights" in out and "\n  ^" in out


def test_compile_emit_only_writes_cuda_for_picked_choices(capsys, tmp_path):
    rc, out, _ = run(capsys, "compile", str(SPEC), "--emit-only", "-o", str(tmp_path),
                     "--pick", "tile=128x256x64", "--pick", "cluster=2x1x1", "--pick", "schedule=cooperative",
                     "--pick", "scheduler=persistent", "--pick", "split_k=1", "--pick", "swap_ab=false")
    assert rc == 0
    (cu,) = tmp_path.glob("*.cu")
    text = cu.read_text()
    assert "Shape<_128, _256, _64>" in text and "Sm90SrcFetch" in text


TWO = """kernel k1 : gemm {
  a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row
  tile = 64x128x64  schedule = cooperative
}
kernel k2 : gemm {
  a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row
  tile = {128x128x64, 128x256x64}  schedule = cooperative
}
kernel k3 : gemm {
  a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row
  tile = 128x128x64  cluster = 3x1x1
}
"""


def test_compile_pick_without_kernel_name_applies_to_the_kernel_option(capsys, tmp_path):
    spec = tmp_path / "two.ucut"
    spec.write_text(TWO)
    rc, out, err = run(capsys, "compile", str(spec), "--kernel", "k2", "--pick", "tile=128x256x64", "--emit-only",
                       "-o", str(tmp_path))
    assert rc == 0, err
    (cu,) = tmp_path.glob("*.cu")
    assert cu.name.startswith("k2_") and "Shape<_128, _256, _64>" in cu.read_text()
    rc, _, err = run(capsys, "compile", str(spec), "--pick", "tile=128x256x64", "--emit-only")
    assert rc == 1 and "name the kernel (k1, k2, k3)" in err  # several kernels and no --kernel


def test_compile_reports_every_kernels_rule_errors(capsys, tmp_path):
    spec = tmp_path / "two.ucut"
    spec.write_text(TWO)
    rc, _, err = run(capsys, "compile", str(spec), "--emit-only", "--pick", "k2.tile=128x128x64", "-o", str(tmp_path))
    assert rc == 1 and not list(tmp_path.glob("*.cu"))
    assert "sm90.cooperative-tile-m" not in err  # messages, as check prints them
    assert f"{spec}:3:10: error: tile 64x128x64" in err and f"{spec}:11:32: error: cluster 3x1x1" in err
    rc, _, err = run(capsys, "compile", str(spec), "--emit-only", "-o", str(tmp_path))  # k2 left open
    assert rc == 1 and "tile 64x128x64" in err and "cluster 3x1x1" in err and "k2 has open choices" in err


def test_check_json_counts_a_concrete_kernel_as_one_combination(capsys, tmp_path):
    spec = tmp_path / "two.ucut"
    spec.write_text(TWO + "kernel k4 : gemm {\n  a : bf16[M, K] row  b : bf16[N, K] row  d : bf16[M, N] row\n}\n")
    rc, out, _ = run(capsys, "check", str(spec), "--json")
    counts = {k["name"]: (k["combinations"], k["legal_combinations"]) for k in json.loads(out)["kernels"]}
    assert rc == 1 and counts == {"k1": (1, 0), "k2": (2, 2), "k3": (1, 0), "k4": (1, 1)}


def test_compile_all_writes_each_distinct_kernel_once(capsys, tmp_path):
    # the attention problem's spec: 24 legal combinations, 18 kernels (pingpong with persistent auto or true)
    spec = REPO / "problems" / "gqa_attention_llama3_1_8b" / "kernel.ucut"
    rc, _, err = run(capsys, "compile", str(spec), "--all", "--emit-only", "-o", str(tmp_path))
    assert rc == 0, err
    assert len(list(tmp_path.glob("*.cu"))) == 18 and "24 legal combinations make 18 distinct kernels" in err


def test_a_missing_or_unreadable_file_is_one_line(capsys, tmp_path):
    rc, out, err = run(capsys, "check", str(tmp_path / "nope.ucut"))
    assert rc == 1 and err.strip() == f"error: {tmp_path / 'nope.ucut'}: no such file"
    rc, _, err = run(capsys, "check", str(tmp_path))
    assert rc == 1 and "is a folder" in err and "Traceback" not in err
    out_file = tmp_path / "no" / "dir" / "x.ucut"  # an output whose folder is missing: the folder is named
    rc, _, err = run(capsys, "init", str(REPO / "tests" / "data" / "init" / "tiny_gemm"), "-o", str(out_file),
                     "--no-check")
    assert rc == 1 and err.strip().endswith(f"no such folder {out_file.parent} (create it first, or write elsewhere)")
    (tmp_path / "bin.ucut").write_bytes(b"\xff\xfe\x00")
    rc, _, err = run(capsys, "check", str(tmp_path / "bin.ucut"))
    assert rc == 1 and "not a text file" in err
    rc, _, err = run(capsys, "problems", "--problems", str(tmp_path / "none"))
    assert rc == 1 and "no such folder" in err


def test_compile_with_open_choices_says_how_to_resolve(capsys):
    rc, _, err = run(capsys, "compile", str(SPEC), "--emit-only")
    assert rc == 1
    assert "open choices" in err and "--pick" in err and "--all" in err


def test_tune_without_gpu_says_so_and_what_works(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run(capsys, "tune", "o_proj_residual_llama3_1_8b")
    assert rc == 2
    assert "needs a CUDA GPU" in err
    for works in ("ucutlass check", "ucutlass compile", "ucutlass sol", "--dry-run"):
        assert works in err


def test_tune_dry_run_shows_space_and_sol(capsys):
    rc, out, _ = run(capsys, "tune", "o_proj_residual_llama3_1_8b", "--dry-run")
    assert rc == 0
    assert "legal under the sm90 rules: 116" in out and "T_SOL" in out
    # T_SOL as `ucutlass sol` writes it: microseconds below 1 ms
    from ucutlass.sol.report import format_time

    assert format_time(0.00055) == "0.55 µs" and "T_SOL 7.32 µs" in out and " ms\n" not in out


def test_tune_problem_without_spec(capsys, sol_execbench_dir, tmp_path, monkeypatch):
    # no kernel.ucut, no --spec: tune takes the program `ucutlass init` writes (issue 17), and says so
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run(capsys, "tune", "FlashInfer-Bench_007_gemm_n4096_k4096", "--problems", str(sol_execbench_dir),
                     "--out", str(tmp_path))
    assert "the program `ucutlass init` wrote" in err and (tmp_path / "init.ucut").is_file()
    assert rc == 2 and "needs a CUDA GPU" in err  # this machine has none


def test_unknown_problem_suggests_close_ids(capsys):
    rc, _, err = run(capsys, "sol", "o_proj_residual_llama3_8b")
    assert rc == 1 and "did you mean" in err and "o_proj_residual_llama3_1_8b" in err


def test_sol_json_and_problems_listing(capsys):
    rc, out, _ = run(capsys, "sol", "qkv_proj_bias_qwen2_5_7b", "--json", "--gpu", "h200")
    assert rc == 0
    doc = json.loads(out)
    text = json.dumps(doc)
    assert "t_sol_ms" in text and "datasheet" in text
    rc, out, _ = run(capsys, "problems")
    assert rc == 0 and out.count("kernel.ucut") >= 3


def test_problems_lists_a_broken_folder_beside_the_others(capsys, tmp_path):
    """One folder with a broken definition.json is listed as broken; the others are still listed; exit 1."""
    broken = tmp_path / "broken_problem"
    broken.mkdir()
    (broken / "definition.json").write_text("{ not json")
    (broken / "workload.jsonl").write_text("")
    rc, out, _ = run(capsys, "problems", "--problems", str(tmp_path))
    assert rc == 1
    assert "broken_problem" in out and "broken:" in out
    assert out.count("kernel.ucut") >= 3  # the shipped problems are still there


def test_grade_python_solution_on_cpu(capsys, tmp_path):
    """The grader also runs on the CPU: a Python solution of a shipped problem graded end to end."""
    sol = tmp_path / "mine.py"
    sol.write_text("import torch.nn.functional as F\n\n"
                   "def run(attn_output, o_proj_weight, residual):\n"
                   "    return F.linear(attn_output, o_proj_weight) + residual\n")
    rc, out, _ = run(capsys, "grade", str(sol), "o_proj_residual_llama3_1_8b", "--workloads", "1", "--json",
                     "--gpu", "h200")
    doc = json.loads(out)
    assert rc == 0, doc
    assert doc["records"][0]["evaluation"]["status"] == "PASSED"


def test_grade_ucut_without_gpu_says_so(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run(capsys, "grade", str(SPEC), "o_proj_residual_llama3_1_8b")
    assert rc == 2 and "CUDA GPU" in err


def test_tune_and_compile_name_the_kernels_of_a_file_with_several(capsys, tmp_path):
    """A dispatch is what tune writes: given one as a spec, tune says to name a kernel; a misspelt --kernel is
    refused by name in both commands (it used to end in a traceback, or in silence with exit 0)."""
    from test_dispatch import DISPATCH  # tests/ is on sys.path

    spec = tmp_path / "dispatch.ucut"
    spec.write_text(DISPATCH)
    rc, _, err = run(capsys, "tune", "o_proj_residual_llama3_1_8b", "--spec", str(spec), "--dry-run")
    assert rc == 1 and "Traceback" not in err
    assert "is a dispatch (kernels with when), which tune writes as best.ucut" in err
    assert "--kernel (decode, mid, large)" in err
    rc, _, err = run(capsys, "tune", "o_proj_residual_llama3_1_8b", "--spec", str(spec), "--kernel", "mdi",
                     "--dry-run")
    assert rc == 1 and "--kernel mdi" in err and "did you mean 'mid'?" in err
    rc, out, err = run(capsys, "compile", str(spec), "--kernel", "nope", "--emit-only")
    assert rc == 1 and "has no such kernel" in err and "kernels: decode, mid, large" in err


@pytest.mark.slow
def test_grade_keeps_the_workloads_graded_before_the_grader_stops(tmp_path, capsys):
    """A reference that fails on the second workload stops the grader (a broken problem, exit 1); the first
    workload's verdict is still printed and written to -o."""
    import shutil

    data = Path(__file__).parent / "grader" / "data"
    folder = tmp_path / "gemm_bias"
    shutil.copytree(data / "gemm_bias", folder)
    d = json.loads((folder / "definition.json").read_text())
    d["reference"] = ("import torch\n\n\ndef run(A, B, bias):\n    if A.shape[0] == 17:\n"
                      "        raise RuntimeError('the reference breaks at M = 17')\n    return A @ B.T + bias\n")
    (folder / "definition.json").write_text(json.dumps(d))
    out = tmp_path / "records.json"
    code = main(["grade", str(data / "solutions" / "gemm_honest.py"), str(folder), "--workloads", "2",
                 "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 1 and "the reference breaks at M = 17" in captured.err
    records = json.loads(out.read_text())
    assert [r["evaluation"]["status"] for r in records] == ["PASSED"]
    assert "M=1" in captured.out and "PASSED" in captured.out  # the table of what was graded
    assert "the grader stopped after 1 workload(s)" in captured.err


def test_grade_picks_workloads_by_index_uuid_or_smallest(capsys):
    """`--workload` (a new user had to copy a problem folder to grade its smallest workload alone)."""
    from ucutlass.cli import main
    from ucutlass.cli.grade import pick_workload
    from ucutlass.errors import UcutError
    from ucutlass.init.capture import smallest_workload
    from ucutlass.problem import find_problem

    p = find_problem("o_proj_residual_llama3_1_8b")
    small = smallest_workload(p)
    assert pick_workload(p, "smallest") == small and pick_workload(p, "2") == p.workloads[2]
    assert pick_workload(p, small.uuid) == small
    with pytest.raises(UcutError, match=r"--workload 999: o_proj_residual_llama3_1_8b has \d+ workloads"):
        pick_workload(p, "999")
    with pytest.raises(UcutError, match="no workload uuids .* match; give an index"):
        pick_workload(p, "no-such-uuid")
    src = REPO / "examples/pipeline_o_proj_residual.ucut"
    assert main(["grade", str(src), "o_proj_residual_llama3_1_8b", "--emulate", "--workload", "smallest",
                 "--workload", str(small.index)]) == 0  # the same workload named twice is graded once
    out = capsys.readouterr().out
    assert '"workloads": 1, "passed": 1' in out and small.label() in out, out
    # a bad --workload is an error before anything is bound or listed (the step listing came first before)
    assert main(["grade", str(src), "o_proj_residual_llama3_1_8b", "--emulate", "--workload", "999"]) != 0
    captured = capsys.readouterr()
    assert "has" in captured.err and "workloads" in captured.err and "pipeline" not in captured.out + captured.err


@pytest.mark.parametrize("argv, message", [
    (["tune", "P", "--time-limit", "-10"], "--time-limit: expected a number of seconds > 0, got -10"),
    (["tune", "P", "--time-limit", "nan"], "--time-limit: expected a number of seconds > 0, got nan"),
    (["tune", "P", "--trials", "0"], "--trials: expected an integer >= 1, got 0"),
    (["tune", "P", "--jobs", "0"], "--jobs: expected an integer >= 1, got 0"),
    (["tune", "P", "--max-workloads", "0"], "--max-workloads: expected an integer >= 1, got 0"),
    (["tune", "P", "--epsilon", "nan"], "--epsilon: expected a finite number, got nan"),
    (["tune", "P", "--batch", "0"], "--batch: expected an integer >= 1, got 0"),
    (["tune", "P", "--workers", "two"], "--workers: expected an integer >= 1, got 'two'"),
    (["tune", "P", "--patience", "0"], "--patience: expected an integer >= 1, got 0"),
    (["grade", "F", "P", "--timeout", "0"], "--timeout: expected a number of seconds > 0, got 0"),
    (["compile", "F", "--timeout", "inf"], "--timeout: expected a number of seconds > 0, got inf"),
    (["prompt", "P", "--max-tokens", "-5"], "--max-tokens: expected an integer >= 1, got -5"),
    (["campaign", "P", "--budget", "4", "--window", "0"], "--window: expected an integer >= 1, got 0"),
    (["campaign", "P", "--budget", "4", "--epsilon", "-0.5"], "--epsilon: expected a number >= 0, got -0.5"),
])
def test_counts_and_durations_out_of_range_are_usage_errors(argv, message, capsys):
    """A count or a duration out of range is refused by name before anything runs (a negative --time-limit used to
    skip the search silently and grade the first legal picks; --max-workloads 0 measured one workload)."""
    with pytest.raises(SystemExit) as usage:
        main(argv)
    assert usage.value.code == 2
    assert message in capsys.readouterr().err


def test_off_still_turns_a_campaign_rule_off():
    from ucutlass.cli import build_parser

    args = build_parser().parse_args(["campaign", "P", "--budget", "4", "--window", "off", "--epsilon", "off"])
    assert args.window is None and args.epsilon is None


def test_python_m_ucutlass_is_the_command_line():
    """``python -m ucutlass`` runs the same command line as the ``ucutlass`` script (a new user tried it and got
    "No module named ucutlass.__main__")."""
    import subprocess
    import sys

    from ucutlass import __version__

    for module in ("ucutlass", "ucutlass.cli"):
        run = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == f"ucutlass {__version__}"
