"""`check` accepts what the run time accepts, on the H200 (issue 19): the two cases where they disagreed.

Run on the H200: ``pytest -m gpu tests/test_bad_input_gpu.py`` (two nvcc builds, 1-3 minutes each, into the
session's kernel cache; align_mn_major is shared with tests/test_batched_gpu.py).

- A GEMM whose N (a vocabulary of 50260) is a multiple of 4 but not 8: `alignment = auto` is 4 elements. `check`
  and `tune --dry-run` now agree on the legal configurations, and the first of them, built as the tuner builds it
  (:meth:`SearchSpace.concrete`), passes the grader on every workload.
- A column-major operand bound to a contiguous tensor: `check` (the binding) says ``bind-layout``, and the compiled
  kernel does refuse such a tensor at run time, which is why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_build import build_and_load, poisoned, randn, rel_err  # tests/ is on sys.path for its own modules
from test_bad_input import LM_HEAD, write_problem

from ucutlass import lang
from ucutlass.bind import bind
from ucutlass.build import build_kernels
from ucutlass.errors import CheckError, KernelRuntimeError
from ucutlass.problem import load_problem
from ucutlass.search.planning import plan

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

REPO_KERNELS = Path(__file__).resolve().parent / "kernels"


def test_a_ragged_vocabulary_that_check_accepts_passes_the_grader(tmp_path, kernel_cache):
    from ucutlass.grader import Grader
    from ucutlass.solution import solution_for

    write_problem(tmp_path, "lm_head_ragged", 50260)
    problem = load_problem(tmp_path / "lm_head_ragged")
    program = lang.parse(LM_HEAD.replace("LAYOUT", "row"), "lm_head.ucut")
    tuned = plan(problem, program)
    params = next(p for p in tuned.legal if p["schedule"] == "cooperative" and p["scheduler"] == "persistent")
    kernel = tuned.space.concrete(params)
    assert kernel.alignment == 4 and bind(kernel, problem).kernel == kernel  # what a bound call loads
    result = build_kernels([kernel], root=kernel_cache, timeout_s=900)[0]
    assert result.ok, result.log[-2000:]
    concrete = tuned.space.concrete_program(params)
    ref = solution_for(result.so_path, concrete.source, "lm_head.ucut", kernel.name, kernel.config_name())
    with Grader(problem) as grader:
        records = grader.grade(ref, problem.workloads)
    assert len(records) == 2 and all(r.passed for r in records), [(r.label, r.status, r.reason) for r in records]


def test_a_col_operand_on_a_contiguous_tensor_is_refused_by_check_and_by_the_run_time(tmp_path, kernel_cache):
    kernel = lang.parse_file(REPO_KERNELS / "align_mn_major.ucut").kernel()  # a : bf16[M, K] col, alignment 4
    run = build_and_load([kernel], kernel_cache)["align_mn_major"]
    m, n, k = 256, 512, 128
    contiguous = randn(m, k)  # what a problem's input is: [M, K], K contiguous
    b = randn(k, n, std=k ** -0.5)
    d = poisoned(m, n, dtype=torch.float32)
    with pytest.raises(KernelRuntimeError, match="do not match a col-major"):
        run(a=contiguous, b=b, d=d)
    a = contiguous.t().contiguous().t()  # the same values, M contiguous: what col means
    run(a=a, b=b, d=d)
    assert rel_err(d, a.double() @ b.double()) < 1e-4

    folder = tmp_path / "mn_major"
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps({
        "name": "mn_major", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": n},
                                     "K": {"type": "const", "value": k}},
        "inputs": {"x": {"shape": ["M", "K"], "dtype": "bfloat16"}, "w": {"shape": ["K", "N"], "dtype": "bfloat16"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "float32"}},
        "reference": "import torch\n\ndef run(x, w):\n    return (x @ w).float()\n"}))
    (folder / "workload.jsonl").write_text('{"uuid": "m256", "axes": {"M": 256}, "inputs": {"x": {"type": "random"}, '
                                           '"w": {"type": "random"}}}\n')
    text = (REPO_KERNELS / "align_mn_major.ucut").read_text()
    text = text.replace("a : bf16[M, K] col", "a : bf16[M, K] col <- x").replace("b : bf16[K, N] row",
                                                                                 "b : bf16[K, N] row <- w")
    text = text.replace("d : f32[M, N] row", "d : f32[M, N] row -> y")
    with pytest.raises(CheckError) as e:
        bind(lang.parse(text, "mn.ucut").kernel(), load_problem(folder))
    assert [d.code for d in e.value.diagnostics] == ["bind-layout"]
    assert e.value.diagnostics[0].message.startswith("a : [M, K] col <- x")
