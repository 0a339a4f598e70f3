"""L1_044 (DeepSeek-V3 MoE experts, SwiGLU, top-8 routing) as a pipeline: examples/pipeline_moe_experts.ucut.

Its smallest workload holds about 23 GB of expert weights, so on the CPU the problem is shrunk: a copy of its
definition with the const axes made small (experts, hidden and intermediate sizes; the same reference ``run`` and
``get_inputs``), bound and emulated (kernels as torch ops) on small tensors. The emulated pipeline matches the
reference computed from the problem file, with experts that get no tokens; routing that drops the weights or
scatters to the wrong tokens is far off. The real grader's emulated grade of the shrunk problem and the GPU grades
are in tests/test_pipeline_programs.py (SHRUNK, GPU_PIPELINES).
"""

from __future__ import annotations

import json

import pytest
import torch
from shared_data import REPO, SHARED_SOL_EXECBENCH

from ucutlass.emulate import GroupedEmulator, emulate_kernel, emulate_pipeline
from ucutlass.lang import parse, parse_file
from ucutlass.problem import find_problem

PID = "L1_044_moe_expert_computation"
PATH = REPO / "examples" / "pipeline_moe_experts.ucut"
#: Small const axes (the real ones: 256 experts, hidden 7168, intermediate 2048, top 8).
SMALL = {"num_experts": 16, "hidden_size": 128, "intermediate_size": 64, "num_experts_per_tok": 4}


def _shrunk(tmp_path, consts=SMALL, tokens=(5, 40)):
    """A copy of L1_044 with ``consts`` as its const axes and workloads of ``tokens`` tokens."""
    folder = SHARED_SOL_EXECBENCH / PID
    if not folder.is_dir():
        pytest.skip(f"{PID} not found beside this clone")
    definition = json.loads((folder / "definition.json").read_text())
    for axis, value in consts.items():
        assert definition["axes"][axis]["type"] == "const"
        definition["axes"][axis]["value"] = value
    out = tmp_path / PID
    out.mkdir()
    (out / "definition.json").write_text(json.dumps(definition))
    first = json.loads((folder / "workload.jsonl").read_text().splitlines()[0])
    rows = [{**first, "uuid": f"{first['uuid']}-{n}", "axes": {"num_tokens": n}} for n in tokens]
    (out / "workload.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return find_problem(str(out))


def _run(fn, problem, inputs):
    names = list(problem.inputs)
    out = torch.empty_like(inputs["hidden_states"])
    fn(*[inputs[n] for n in names], out)
    return out


@pytest.mark.parametrize("workload", [0, 1])
def test_emulated_moe_pipeline_matches_the_reference_on_small_tensors(tmp_path, workload):
    problem = _shrunk(tmp_path)
    w = problem.workloads[workload]
    inputs = problem.make_inputs(w, device="cpu", seed=workload)
    if workload == 0:  # 5 tokens x 4 of 16 experts: some experts get none (empty groups)
        assert len(torch.unique(inputs["expert_ids"])) < SMALL["num_experts"]
    fn = emulate_pipeline(parse_file(PATH), problem)
    got = _run(fn, problem, inputs)
    (want,) = problem.run_reference(inputs).values()
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    # Each step is rounded to bf16 as the reference rounds it; only the GEMMs' f32 sums differ in order: a few
    # elements differ by a bf16 ulp (the outputs of these small sizes are about 0.01: the tolerance is relative).
    err = (got.float() - want.float()).abs()
    scale = want.float().abs().max()
    assert err.max() <= scale / 64 and (err == 0).float().mean() > 0.5


def test_wrong_routing_is_far_from_the_reference(tmp_path):
    """The same pipeline without the routing weights, or summed into the wrong tokens, is far off (the test above
    would catch a routing mistake)."""
    problem = _shrunk(tmp_path, tokens=(40,))
    inputs = problem.make_inputs(problem.workloads[0], device="cpu", seed=1)
    (want,) = problem.run_reference(inputs).values()
    text = PATH.read_text()
    unweighted = text.replace("d = cast(acc, bf16) * w", "d = cast(acc, bf16) * w * 0.0 + cast(acc, bf16)")
    misplaced = text.replace("torch.zeros_like(hidden_states), 0, token, y)",
                             "torch.zeros_like(hidden_states), 0, (token + 1) % num_tokens, y)")
    assert unweighted != text and misplaced != text
    for bad in (unweighted, misplaced):
        program = parse(bad, str(PATH))
        got = _run(emulate_pipeline(program, problem), problem, inputs)
        assert (got.float() - want.float()).abs().max() > want.float().abs().max() / 4


def test_expert_counts_are_m_sizes_in_expert_order(tmp_path):
    """The routing steps give the grouped GEMMs what they read: m_sizes[e] = pairs routed to expert e (int32 on the
    inputs' device), and the gathered rows sorted by expert, each expert's rows in token order (a stable sort)."""
    problem = _shrunk(tmp_path, tokens=(40,))
    inputs = problem.make_inputs(problem.workloads[0], device="cpu", seed=2)
    fn = emulate_pipeline(parse_file(PATH), problem)
    seen = {}
    binding = fn.pipeline
    gate = next(kc for kc in binding.kernel_calls() if kc.call.target == "gate")
    run = binding.callable(lambda kernel: _Recording(kernel, seen) if kernel.name == gate.kernel.name
                           else emulate_kernel(kernel))
    _run(run, problem, inputs)
    ids = inputs["expert_ids"].flatten()
    m_sizes = seen["m_sizes"]
    assert m_sizes.dtype == torch.int32 and m_sizes.tolist() == torch.bincount(ids, minlength=16).tolist()
    order = torch.argsort(ids, stable=True)
    assert torch.equal(seen["a"], inputs["hidden_states"][order // SMALL["num_experts_per_tok"]])


class _Recording(GroupedEmulator):
    """The grouped GEMM emulator, keeping the arguments of its last call by name in ``seen``."""

    def __init__(self, kernel, seen):
        super().__init__(kernel)
        self.seen = seen

    def call(self, values):
        self.seen.update(self.named(values))
        super().call(values)
