"""The JSON feedback (issue 18): what ``check``, ``compile``, ``grade`` and ``tune`` print with ``--json``, real
outputs of good and bad programs, validated against the shipped schema ucutlass/agents/feedback-v1.json; a wrong
record fails it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ucutlass.agents import SCHEMA_VERSION, FeedbackSchemaError, load_schema, schema_errors, tune_document, validate
from ucutlass.cli import main
from ucutlass.problem import find_problem

REPO = Path(__file__).resolve().parent.parent
PROBLEM = "qkv_proj_bias_qwen2_5_7b"
SPEC = REPO / "problems" / PROBLEM / "kernel.ucut"
GOOD = """
kernel qkv : gemm {
  a : bf16[M, K] row <- hidden_states
  b : bf16[N, K] row <- qkv_weight
  d : bf16[M, N] row -> qkv
  tile = 128x128x64   schedule = cooperative
  epilogue { bias : bf16[N] <- qkv_bias   d = acc + bias }
}
"""
# three errors: an unknown dtype, a misspelt setting, a rule (bf16 tile K 48)
BAD = """
kernel qkv : gemm {
  a : bf17[M, K] row <- hidden_states
  b : bf16[N, K] row <- qkv_weight
  d : bf16[M, N] row -> qkv
  tiles = 128x128x64
}
"""
RULE = GOOD.replace("128x128x64", "128x128x48")
WRONG_BIAS = GOOD.replace("d = acc + bias", "d = acc + bias + bias")


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main([*argv, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)


@pytest.fixture
def files(tmp_path):
    out = {}
    for name, text in {"good": GOOD, "bad": BAD, "rule": RULE, "wrong": WRONG_BIAS}.items():
        (tmp_path / f"{name}.ucut").write_text(text)
        out[name] = str(tmp_path / f"{name}.ucut")
    return out


def test_the_schema_is_package_data_and_closed():
    schema = load_schema()
    assert schema["$defs"]["schema"]["const"] == SCHEMA_VERSION

    def closed(node, path="#"):
        if isinstance(node, dict):
            if path != "#" and node.get("type") == "object" and "properties" in node:  # the root: its oneOf
                assert node.get("additionalProperties") is False, f"{path} is open"
            for k, v in node.items():
                closed(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                closed(v, f"{path}/{i}")

    closed(schema)


@pytest.mark.parametrize("which", ["good", "shipped", "bound"])
def test_check_good_programs(capsys, files, which):
    argv = {"good": ["check", files["good"]], "shipped": ["check", str(SPEC)],
            "bound": ["check", files["good"], "--problem", PROBLEM]}[which]
    rc, doc = run_json(capsys, *argv)
    assert rc == 0 and validate(doc)["ok"] and doc["command"] == "check"
    assert doc["kernels"][0]["legal_combinations"] >= 1


def test_check_bad_program_diagnostics(capsys, files):
    rc, doc = run_json(capsys, "check", files["bad"])
    assert rc == 1 and validate(doc)["ok"] is False
    by_code = {d["code"]: d for d in doc["diagnostics"]}
    assert (by_code["unknown-dtype"]["line"], by_code["unknown-dtype"]["column"]) == (3, 7)
    assert "bf16" in by_code["unknown-dtype"]["valid"]
    assert "tile" in by_code["unknown-setting"]["valid"]
    rc, doc = run_json(capsys, "check", files["rule"])
    assert rc == 1 and validate(doc)["ok"] is False
    rule = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert rule[0]["code"] == "sm90.tile-k" and rule[0]["line"] == 6 and rule[0]["valid"]


def test_check_binding_error_and_missing_file(capsys, files, tmp_path):
    wrong = tmp_path / "wrong_name.ucut"
    wrong.write_text(GOOD.replace("<- qkv_weight", "<- qkv_weights"))
    rc, doc = run_json(capsys, "check", str(wrong), "--problem", PROBLEM)
    assert rc == 1 and validate(doc)["diagnostics"][0]["code"].startswith("bind-")
    rc, doc = run_json(capsys, "check", str(tmp_path / "nope.ucut"))
    assert rc == 1 and "no such file" in validate(doc)["error"]


def test_compile_documents(capsys, files, tmp_path):
    rc, doc = run_json(capsys, "compile", files["good"], "--emit-only", "-o", str(tmp_path / "cu"))
    assert rc == 0 and validate(doc)["emit_only"] is True
    assert Path(doc["kernels"][0]["source_path"]).read_text().count("cutlass") > 10
    rc, doc = run_json(capsys, "compile", str(SPEC), "--emit-only")  # open choices: an error, no diagnostic
    assert rc == 1 and "open choices" in validate(doc)["error"]
    rc, doc = run_json(capsys, "compile", files["rule"], "--emit-only")
    assert rc == 1 and validate(doc)["diagnostics"][0]["code"] == "sm90.tile-k"


def test_grade_emulated_documents(capsys, files):
    rc, doc = run_json(capsys, "grade", files["good"], PROBLEM, "--emulate", "--workloads", "1")
    assert rc == 0 and validate(doc)["ok"] and doc["emulated"] and doc["summary"]["passed"] == 1
    record = doc["records"][0]
    assert record["evaluation"]["status"] == "PASSED" and record["evaluation"]["performance"]["latency_ms"] > 0
    # --no-timing: checked, never timed (no timing copies of a large workload's inputs)
    rc, doc = run_json(capsys, "grade", files["good"], PROBLEM, "--emulate", "--workloads", "1", "--no-timing")
    record = validate(doc)["records"][0]
    assert rc == 0 and record["evaluation"]["status"] == "PASSED" and record["evaluation"]["correctness"]["trials"] >= 1
    assert not record["evaluation"].get("performance")
    rc, doc = run_json(capsys, "grade", files["wrong"], PROBLEM, "--emulate", "--workloads", "1", "--no-timing")
    assert rc == 1 and doc["records"][0]["evaluation"]["status"] == "INCORRECT_NUMERICAL"
    rc, doc = run_json(capsys, "grade", files["good"], PROBLEM, "--emulate", "--workloads", "0")  # not "all of them"
    assert rc != 0 and "--workloads 0: grade at least 1 workload" in validate(doc)["error"]
    rc, doc = run_json(capsys, "grade", files["wrong"], PROBLEM, "--emulate", "--workloads", "1")
    assert rc == 1 and validate(doc)["ok"] is False
    assert doc["records"][0]["evaluation"]["status"] == "INCORRECT_NUMERICAL"
    rc, doc = run_json(capsys, "grade", files["bad"], PROBLEM, "--emulate")
    assert rc == 1 and validate(doc)["diagnostics"] and doc["records"] == []


def test_tune_documents(capsys, tmp_path):
    import torch

    if not torch.cuda.is_available():  # the CLI's answers without a GPU
        rc, doc = run_json(capsys, "tune", PROBLEM, "--out", str(tmp_path / "t"))
        assert rc == 2 and "GPU" in validate(doc)["error"]
        rc, doc = run_json(capsys, "grade", str(SPEC), PROBLEM)
        assert rc == 2 and "--emulate" in validate(doc)["error"]
    rc, doc = run_json(capsys, "tune", PROBLEM, "--dry-run")
    assert rc == 1 and "--dry-run" in validate(doc)["error"]
    # a finished tune (the tuner's fakes: no nvcc, no GPU)
    from search_fakes import FakeBuild, FakeMeasure, make_plan, make_tuner
    from ucutlass.search import TuneConfig
    from ucutlass.search.report import write_outputs

    result = make_tuner(make_plan(), FakeBuild(), FakeMeasure(),
                        config=TuneConfig(batch=4, seed=1, trials=8, sampler="brute")).run()
    doc = validate(tune_document(result, write_outputs(result, tmp_path), problem=PROBLEM, spec="spec.ucut"))
    assert doc["ok"] and doc["best"]["config"] == result.best.kernel.config_name()
    assert len(doc["workloads"]) == len(find_problem(PROBLEM).workloads)
    assert doc["geomean_speedup"] > 1 and "{" not in doc["best"]["source"].split("tile")[1].split("\n")[0]


def test_a_wrong_record_fails(capsys, files):
    rc, doc = run_json(capsys, "check", files["bad"])
    validate(doc)
    cases = []
    extra = copy.deepcopy(doc)
    extra["diagnostics"][0]["hint"] = "undeclared"
    cases.append(extra)
    no_line = copy.deepcopy(doc)
    del no_line["diagnostics"][0]["line"]
    cases.append(no_line)
    version = copy.deepcopy(doc)
    version["schema"] = "ucutlass.feedback/0"
    cases.append(version)
    severity = copy.deepcopy(doc)
    severity["diagnostics"][0]["severity"] = "fatal"
    cases.append(severity)
    command = copy.deepcopy(doc)
    command["command"] = "grade"  # a check document is not a grade document
    cases.append(command)
    for case in cases:
        assert schema_errors(case)
        with pytest.raises(FeedbackSchemaError):
            validate(case)
    status = {"schema": SCHEMA_VERSION, "command": "grade", "ok": True, "error": None, "file": "x", "problem": "p",
              "summary": None, "diagnostics": [],
              "records": [{"definition": "p", "workload": {"uuid": "u", "axes": {}}, "solution": "s",
                           "evaluation": {"status": "GREAT", "reason": "", "log": "", "environment": {},
                                          "timestamp": "", "correctness": None, "performance": None, "checks": {}}}]}
    assert any("GREAT" in e for e in schema_errors(status))


def test_compile_document_of_builds(capsys, files, tmp_path, monkeypatch):
    """The nvcc path's document (nvcc itself is tested in test_compile_nvcc.py): a build that worked and one that
    failed, from the builder's BuildResults."""
    import ucutlass.build
    from ucutlass.build import BuildResult

    state = {"fail": False}

    def fake_build(kernels, **kw):
        out = []
        for i, k in enumerate(kernels):
            so, cu = tmp_path / f"{k.config_name()}.so", tmp_path / f"{k.config_name()}.cu"
            so.write_bytes(b"\x7fELF")
            cu.write_text("// cu")
            failed = state["fail"]
            out.append(BuildResult(key=str(i), name=k.config_name(), entry=tmp_path, so_path=None if failed else so,
                                   source_path=cu, cached=False, seconds=61.5,
                                   log='error: static assertion failed with "tile"' if failed else "",
                                   error="nvcc exited 1" if failed else ""))
        return out

    monkeypatch.setattr(ucutlass.build, "build_kernels", fake_build)
    rc, doc = run_json(capsys, "compile", files["good"], "-o", str(tmp_path / "out"))
    entry = validate(doc)["kernels"][0]
    assert rc == 0 and doc["ok"] and entry["ok"] and entry["seconds"] == 61.5 and entry["so_path"].endswith(".so")
    assert (tmp_path / "out" / f"{entry['name']}.so").is_file()  # -o copies as without --json
    state["fail"] = True
    rc, doc = run_json(capsys, "compile", files["good"])
    entry = validate(doc)["kernels"][0]
    assert rc == 1 and not doc["ok"] and entry["so_path"] is None and "static assertion" in entry["log"]


@pytest.mark.parametrize("argv, command, message", [
    (["tune", "--json", "P", "--trials", "0"], "tune", "argument --trials: expected an integer >= 1, got 0"),
    (["tune", "P", "--json", "--time-limit", "-5"], "tune", "--time-limit: expected a number of seconds > 0"),
    (["grade", "--json", "F"], "grade", "the following arguments are required: problem"),
    (["compile", "F", "--json", "--jobs", "x"], "compile", "--jobs: expected an integer >= 1, got 'x'"),
    (["check", "--json"], "check", "the following arguments are required: file"),
])
def test_usage_errors_under_json_are_documents(capsys, argv, command, message):
    """With --json, a usage error is a feedback document on stdout as well as argparse's usage line on stderr
    (an agent parsing stdout got nothing after `tune --json --trials 0`); the exit status stays 2."""
    with pytest.raises(SystemExit) as usage:
        main(argv)
    out, err = capsys.readouterr()
    doc = validate(json.loads(out))
    assert usage.value.code == 2 and doc["ok"] is False and doc["command"] == command
    assert doc["error"] == f"ucutlass {command}: " + err.strip().splitlines()[-1].split(": error: ", 1)[1]
    assert message in doc["error"] and "usage:" in err


def test_usage_errors_without_json_print_no_document(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "P", "--trials", "0"])
    out, err = capsys.readouterr()
    assert out == "" and "--trials" in err
