"""The guards' and checks' pieces without worker processes: input distributions, unlisted shapes, input
rescaling, accuracy against a ground truth, integrity and thread snapshots, aliasing, the wall-clock
verdict, and the replay of a timing reply."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch
from grader_helpers import DATA
from grader_helpers import gemm_problem  # noqa: F401  (fixtures)

from ucutlass.grader import GUARD_STATUSES, Status, summarize
from ucutlass.grader.accuracy import check_accuracy, ground_truth, normalized_errors
from ucutlass.grader.grader import Grader
from ucutlass.grader.timed import replay_timing_loop
from ucutlass.grader.trials import modified_inputs
from ucutlass.grader.guards import Integrity, ThreadWatch, aliasing, wall_chargeable, wall_verdict
from ucutlass.grader.inputs import (
    ADVERSARIAL_ROUTING,
    BASE_VARIANTS,
    HEAVY_TAILED,
    ROUTED_VARIANTS,
    SKEWED_ROUTING,
    STRUCTURED,
    apply_variant,
    rescale,
    rescale_factor,
    routing_inputs,
    unlisted_workload,
    variants_for,
)
from ucutlass.grader.timing import BenchParams, bench, reps_for
from ucutlass.grader.worker import _Failure, write_returned
from ucutlass.problem import load_problem

ADV = DATA.parents[1] / "adversarial" / "data"


# --- input distributions -------------------------------------------------------------------------------

def test_variants_heavy_tailed_and_structured_keep_ints_and_scale_rows():
    x = torch.randn(256, 64)
    idx = torch.arange(10)
    inputs = {"x": x, "idx": idx, "eps": 1e-5}
    heavy = apply_variant(inputs, HEAVY_TAILED, 7)
    assert heavy["idx"] is idx and heavy["eps"] == 1e-5 and inputs["x"] is x  # originals untouched
    ratio = heavy["x"].pow(2).mean().sqrt() / x.pow(2).mean().sqrt()
    assert 0.6 < float(ratio) < 1.7                                              # RMS preserved (roughly)
    assert float((heavy["x"] / x).abs().max()) > 10                              # with heavy tails
    s = apply_variant(inputs, STRUCTURED, 7)["x"]
    row_scale = (s / x).abs().median(dim=1).values
    tiny = row_scale < 1e-1
    assert 0.1 < float(tiny.double().mean()) < 0.45 and float(row_scale[tiny].max()) <= 1e-2 * 1.001
    assert torch.equal(apply_variant(inputs, STRUCTURED, 7)["x"], s)              # deterministic per seed
    with pytest.raises(ValueError, match="unknown input distribution"):
        apply_variant(inputs, "uniform", 0)


def test_variants_of_a_large_input_are_made_piece_by_piece(monkeypatch):
    """A bf16 input made in pieces (L2_024's 4 GiB expert weights once ran the GPU out of memory as one float64
    copy): every piece gets its own factors (heavy tails in each), the whole stays deterministic, and the
    structured rows are scaled across the pieces' boundaries."""
    from ucutlass.grader import inputs as inputs_module

    monkeypatch.setattr(inputs_module, "CHUNK_ELEMENTS", 1000)  # 16 384 elements: 17 pieces
    x = torch.randn(256, 64, dtype=torch.bfloat16)
    heavy = apply_variant({"x": x}, HEAVY_TAILED, 7)["x"]
    assert heavy.dtype == torch.bfloat16 and heavy.shape == x.shape
    factors = (heavy.float() / x.float()).reshape(-1)[:16000].reshape(16, 1000)
    assert bool((factors.abs().amax(dim=1) > 3).all())                          # each piece has its tail
    assert not torch.equal(factors[0], factors[1])                               # ...of its own draws
    assert torch.equal(apply_variant({"x": x}, HEAVY_TAILED, 7)["x"], heavy)     # deterministic per seed
    s = apply_variant({"x": x}, STRUCTURED, 7)["x"]
    row_scale = (s.float() / x.float()).abs().median(dim=1).values
    assert 0.1 < float((row_scale < 1e-1).double().mean()) < 0.45


def test_routing_variants_skew_expert_load():
    logits = torch.randn(2048, 8)
    def load(l):
        return torch.bincount(torch.topk(l, 2, dim=-1).indices.reshape(-1), minlength=8)
    normal = load(logits)
    skewed = load(apply_variant({"router_logits": logits}, SKEWED_ROUTING, 3, ["router_logits"])["router_logits"])
    adv = load(apply_variant({"router_logits": logits}, ADVERSARIAL_ROUTING, 3, ["router_logits"])["router_logits"])
    assert int(normal.min()) > 300
    assert int(skewed.min()) < 50 and int(skewed.max()) > 1000
    assert int(adv.topk(2).values.sum()) > 0.95 * 2 * 2048
    # value variants leave routing inputs alone, routing variants leave the others alone
    x = torch.randn(16, 4)
    out = apply_variant({"x": x, "router_logits": logits}, HEAVY_TAILED, 1, ["router_logits"])
    assert out["router_logits"] is logits and not torch.equal(out["x"], x)
    out = apply_variant({"x": x, "router_logits": logits}, SKEWED_ROUTING, 1, ["router_logits"])
    assert out["x"] is x


def test_routing_inputs_declared_or_guessed(gemm_problem):
    moe = load_problem(ADV / "adv_moe")
    assert routing_inputs(moe) == ["router_logits"] and variants_for(moe) == ROUTED_VARIANTS
    assert routing_inputs(gemm_problem) == [] and variants_for(gemm_problem) == BASE_VARIANTS


def test_unlisted_workload_moves_a_var_axis_off_the_list(gemm_problem):
    listed = {w.axes["M"] for w in gemm_problem.workloads}
    for w in gemm_problem.workloads:
        u = unlisted_workload(gemm_problem, w)
        assert u.axes["M"] not in listed and abs(u.axes["M"] - w.axes["M"]) <= 3 and u.tolerance == w.tolerance
    assert unlisted_workload(gemm_problem, gemm_problem.workloads[0]).axes["M"] == 2  # M=1 → 2


def test_unlisted_workload_keeps_the_common_divisor_of_the_listed_values():
    """Every listed sequence length of the attention problem is a multiple of 8 (an sm90 FMHA needs it): the
    unlisted one is too, so the check tests hard-coding, not a promise the problem never made."""
    from ucutlass.problem import find_problem

    attn = find_problem("gqa_attention_llama3_1_8b")
    assert math.gcd(*[w.axes["seq_len"] for w in attn.workloads]) == 8
    for w in attn.workloads:
        u = unlisted_workload(attn, w)
        assert u.axes["seq_len"] % 8 == 0 and u.axes["seq_len"] != w.axes["seq_len"]
    first = next(w for w in attn.workloads if w.axes == {"batch_size": 1, "seq_len": 128})
    assert unlisted_workload(attn, first).axes["seq_len"] == 136


def test_rescale_factor_alternates_bands_and_rescale_is_reproducible():
    fs = [rescale_factor(11, 2, k) for k in range(20)]
    assert all(0.8 <= f <= 0.95 for f in fs[0::2]) and all(1.05 <= f <= 1.25 for f in fs[1::2])
    assert fs == [rescale_factor(11, 2, k) for k in range(20)] and fs != [rescale_factor(12, 2, k) for k in range(20)]
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn):
        base = torch.randn(64, 64).clamp(-2, 2).to(dt)
        out = torch.empty_like(base)
        rescale(base, 0.9123, out=out)
        assert torch.equal(out.view(torch.uint8), rescale(base, 0.9123).view(torch.uint8)), dt
        assert not torch.equal(out.view(torch.uint8), base.view(torch.uint8))


# --- accuracy against the ground truth -----------------------------------------------------------------

def _bf16_case(seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(128, 512, generator=g).bfloat16()
    w = (torch.randn(256, 512, generator=g) / 512 ** 0.5).bfloat16()
    r = torch.randn(128, 256, generator=g).bfloat16()
    truth = a.double() @ w.double().T + r.double()
    ref = torch.matmul(a, w.T) + r                                  # torch's path: two roundings
    fused = (a.float() @ w.float().T + r.float()).bfloat16()        # fp32 accumulate, one rounding
    return a, w, r, truth, ref, fused


def test_accuracy_admits_honest_kernels_and_rejects_shortcuts():
    a, w, r, truth, ref, fused = _bf16_case()
    ok = check_accuracy(fused, ref, truth)
    assert ok.ok and ok.ratio < 1.0, ok                    # a fused epilogue is more accurate than torch
    assert check_accuracy(ref.clone(), ref, truth).ok
    fp8 = (a.to(torch.float8_e4m3fn).float() @ w.float().to(torch.float8_e4m3fn).float().T + r.float()).bfloat16()
    bad = check_accuracy(fp8, ref, truth)
    assert not bad.ok and bad.ratio > 10 and "ground truth" in bad.reason
    rows = ref.clone()
    rows[:1] = 0                                            # 1 row of 128: 0.8%, inside a 99% ratio
    sparse = check_accuracy(rows, ref, truth)
    assert not sparse.ok and sparse.sparse_fraction > 1e-3
    # fp32: bf16 arithmetic is ~10^4 times the reference's own error
    x, y = torch.randn(64, 256), torch.randn(128, 256)
    t = x.double() @ y.double().T
    assert check_accuracy(x @ y.T + 0.0, x @ y.T, t).ok
    low = check_accuracy((x.bfloat16() @ y.bfloat16().T).float(), x @ y.T, t)
    assert not low.ok and low.ratio > 1000


def test_accuracy_is_skipped_when_it_cannot_judge():
    i = torch.arange(10)
    assert check_accuracy(i, i, i.double()).skipped == "not a floating output"
    x = torch.randn(32, 32)
    assert check_accuracy(x, x, None).skipped == "no ground truth"
    assert "no more precise" in check_accuracy(x + 1e-3, x, x.double()).skipped  # the truth is the reference
    e = normalized_errors(torch.tensor([[1.0, float("inf")] * 8]), torch.tensor([[1.0, float("inf")] * 8]))
    assert float(e.max()) == 0.0                           # non-finite truth is left to the tolerance


def test_ground_truth_upcasts_and_falls_back(gemm_problem):
    mod = gemm_problem.reference_module()
    inputs = gemm_problem.make_inputs(gemm_problem.workloads[1], seed=0, module=mod)
    truth, how = ground_truth(gemm_problem, mod, inputs)
    assert how == "float64" and truth["C"].dtype is torch.float64

    class Picky:  # a reference that only takes bfloat16
        @staticmethod
        def run(A, B, bias):
            assert A.dtype is torch.bfloat16, "bf16 only"
            return A @ B.T + bias

    bf = {k: v.bfloat16() for k, v in inputs.items()}
    truth, how = ground_truth(gemm_problem, Picky, bf)
    assert truth is None and "bf16 only" in how


def test_ground_truth_falls_back_when_the_upcast_itself_runs_out_of_memory(gemm_problem):
    """L2_024 on the H100: the float64 copy of its 4 GiB bf16 expert weights (16 GiB) ran out of memory in the
    upcast, before the reference ran, and the error escaped the float64 -> float32 fallback, failing the grade."""
    mod = gemm_problem.reference_module()
    inputs = gemm_problem.make_inputs(gemm_problem.workloads[1], seed=0, module=mod)

    class NoRoomForFloat64(torch.Tensor):
        def to(self, *args, **kwargs):
            if torch.float64 in args or kwargs.get("dtype") is torch.float64:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
            return super().to(*args, **kwargs)

    big = {k: v.bfloat16().as_subclass(NoRoomForFloat64) for k, v in inputs.items()}
    truth, how = ground_truth(gemm_problem, mod, big)
    assert how == "float32" and truth["C"].dtype is torch.float32
    assert torch.allclose(truth["C"].as_subclass(torch.Tensor),
                          mod.run(*[v.as_subclass(torch.Tensor).float() for v in big.values()]))


def test_ground_truth_keeps_precision_through_the_references_own_casts(gemm_problem):
    """A reference that rounds to bf16 on purpose (L2_055's layer norm: ``.to(torch.bfloat16)`` before a linear)
    failed in float64 on the H200, leaving no truth; its casts are now kept at float64, and fp8 casts (quantization)
    are not touched."""
    mod = gemm_problem.reference_module()
    inputs = gemm_problem.make_inputs(gemm_problem.workloads[1], seed=0, module=mod)
    bf = {k: v.bfloat16() for k, v in inputs.items()}

    class Casting:
        @staticmethod
        def run(A, B, bias):
            h = torch.softmax(A.float(), dim=-1, dtype=torch.float32).to(torch.bfloat16)
            h = (h * torch.ones_like(h, dtype=torch.float16).bfloat16()).half().to(A.dtype)
            q = bias.to(torch.float8_e4m3fn).to(bias.dtype)           # quantization: kept
            return torch.nn.functional.linear(h, B, q)

    truth, how = ground_truth(gemm_problem, Casting, bf)
    assert how == "float64" and truth["C"].dtype is torch.float64
    exact = torch.nn.functional.linear(torch.softmax(bf["A"].double(), dim=-1), bf["B"].double(),
                                       bf["bias"].to(torch.float8_e4m3fn).double())
    assert torch.allclose(truth["C"], exact, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(Casting.run(**bf).double(), exact, rtol=1e-6, atol=1e-6)  # the reference rounds


# --- guards --------------------------------------------------------------------------------------------

def test_integrity_sees_patched_timers_grader_functions_and_trace_hooks():
    import ucutlass.grader.timing as timing

    g = Integrity()
    assert g.changes() == []
    real = time.perf_counter
    time.perf_counter = lambda: 0.0
    try:
        assert g.changes() == ["time.perf_counter"]
    finally:
        time.perf_counter = real
    bench_fn = timing.bench
    timing.bench = lambda *a, **k: None
    try:
        assert "ucutlass.grader.timing.bench" in g.changes()
    finally:
        timing.bench = bench_fn
    old_code = timing.reps_for.__code__
    timing.reps_for.__code__ = (lambda estimate_ms, params: 1).__code__
    try:
        assert "ucutlass.grader.timing.reps_for" in g.changes()
    finally:
        timing.reps_for.__code__ = old_code
    elapsed = torch.cuda.Event.elapsed_time
    torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
    try:
        assert "torch.cuda.Event.elapsed_time" in g.changes()
    finally:
        torch.cuda.Event.elapsed_time = elapsed
    assert g.changes() == []
    value = [1]
    extra = Integrity(extra=[("the list", lambda: tuple(value), (1,))])
    value.append(2)
    assert extra.changes() == ["the list"]


def test_integrity_sees_a_trace_hook():
    g = Integrity()
    old = __import__("sys").gettrace()
    import sys

    sys.settrace(lambda *a: None)
    try:
        assert "sys.settrace" in g.changes()
    finally:
        sys.settrace(old)


def test_thread_watch_sees_a_new_thread():
    w = ThreadWatch()
    if not w.available:
        pytest.skip("no /proc/self/task")
    base = w.snapshot()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        new = w.new_since(base)
        assert len(new) == 1 and new[0].split()[0].isdigit()
    finally:
        stop.set()
        t.join()
    assert w.new_since(base) == []


def test_aliasing_and_write_returned_layout_checks():
    a = torch.randn(4, 4)
    b = torch.randn(4, 4)
    assert aliasing([("C", a.clone())], [("A", a)]) == ""
    assert "shares memory with input 'A'" in aliasing([("C", a[1:])], [("A", a)])
    assert "outputs 'y' and 'z' share memory" in aliasing([("y", b), ("z", b.view(16))], [])
    bufs = [torch.full((4, 4), float("nan"))]
    with pytest.raises(_Failure) as e:
        write_returned(a, bufs, ["C"], [a], ["A"])
    assert e.value.status == "OUTPUT_ALIASED" and "input 'A'" in e.value.reason
    with pytest.raises(_Failure) as e:
        write_returned(b.T, bufs, ["C"], [a], ["A"])
    assert e.value.status == "INCORRECT_SHAPE" and "not contiguous" in e.value.reason
    with pytest.raises(_Failure) as e:
        write_returned(torch.zeros(1, 4).expand(4, 4), bufs, ["C"])
    assert e.value.status == "INCORRECT_SHAPE"
    assert torch.isnan(bufs[0]).all()


def test_a_reference_may_return_views_of_one_tensor_a_candidate_may_not():
    """L2_030's reference returns two slices of one projection (and a reference may return an input as it is): the
    grader copies them into the output buffers instead of failing the problem's own code with OUTPUT_ALIASED."""
    x = torch.randn(6, 4)
    halves = (x[:2], x[2:])  # contiguous views of one tensor
    bufs = [torch.full((2, 4), float("nan")), torch.full((4, 4), float("nan"))]
    with pytest.raises(_Failure) as e:
        write_returned(halves, bufs, ["head", "tail"], [x], ["x"])
    assert e.value.status == "OUTPUT_ALIASED"
    write_returned(halves, bufs, ["head", "tail"], [x], ["x"], strided=True)  # the reference
    assert torch.equal(bufs[0], x[:2]) and torch.equal(bufs[1], x[2:])


def test_wall_verdict_bounds():
    assert wall_verdict(0.0105, 0.010, "cuda")[0]             # 0.5 µs over a 10 µs kernel: noise
    ok, escaped, allowed = wall_verdict(0.060, 0.002, "cuda")  # a side-stream GEMM the events missed
    assert not ok and math.isclose(escaped, 0.058) and allowed < 0.01
    assert not wall_verdict(1.5, 1.0, "cuda")[0] and wall_verdict(1.15, 1.0, "cuda")[0]
    assert wall_verdict(1.8, 1.0, "cpu")[0] and not wall_verdict(3.0, 1.0, "cpu")[0]


def test_wall_charge_zone():
    # Quant_005 on an H100: a 19.3 µs graph replay, 27.8 µs per call by the wall clock: charged, not failed
    ok, escaped, allowed = wall_verdict(0.02778, 0.01926, "cuda")
    assert not ok and wall_chargeable(escaped, allowed, 0.01926)
    # a side-stream GEMM behind an empty call: far more than the events saw, still UNTIMED_WORK
    ok, escaped, allowed = wall_verdict(0.060, 0.002, "cuda")
    assert not ok and not wall_chargeable(escaped, allowed, 0.002)
    assert wall_chargeable(*wall_verdict(1.9, 1.0, "cuda")[1:], 1.0)
    assert not wall_chargeable(*wall_verdict(2.3, 1.0, "cuda")[1:], 1.0)


def test_a_charged_latency_pays_what_escaped():
    from ucutlass.grader.timed import charge_escaped
    from ucutlass.grader.results import Performance

    perf = Performance(latency_ms=0.019, latency_p20_ms=0.018, latency_p80_ms=0.021, reference_latency_ms=0.138,
                       speedup_factor=0.138 / 0.019, t_sol_ms=None, sol_score=None, timed_calls=100)
    c = charge_escaped(perf, 0.0085)
    assert math.isclose(c.latency_ms, 0.0275) and math.isclose(c.latency_p20_ms, 0.0265)
    assert math.isclose(c.latency_p80_ms, 0.0295) and math.isclose(c.speedup_factor, 0.138 / 0.0275)


def test_a_charged_row_says_so_in_the_table():
    from ucutlass.grader import WorkloadResult, format_table

    r = WorkloadResult("p", "u", {"M": 1408}, "M=1408", "s", Status.PASSED, checks={"wall": {"charged_ms": 0.0085}})
    assert "M=1408: latency includes 0.0085 ms per call the wall clock saw outside the events" in format_table([r])


def test_inputs_modified_compares_bits():
    e = {"x": torch.tensor([1.0, float("nan")]), "n": 3}
    assert modified_inputs(e, [torch.tensor([1.0, float("nan")]), 3]) == []
    assert modified_inputs(e, [torch.tensor([1.0, 2.0]), 3]) == ["x"]
    assert modified_inputs(e, [torch.tensor([-0.0 + 1.0, float("nan")]).neg().neg(), 3]) == []
    assert modified_inputs({"x": torch.tensor([0.0])}, [torch.tensor([-0.0])]) == ["x"]  # -0.0 is another input


# --- the timing reply must agree with the loop ---------------------------------------------------------

def test_replay_of_a_timing_reply():
    p = BenchParams(warmup_ms=1, rep_ms=5, min_reps=10, max_reps=100)
    n = reps_for(0.4, p)
    good = {"times_ms": [0.4] * n, "warmup_calls": 3, "estimate_ms": 0.4,
            "counts": [len(range(k, 3, 4)) + len(range(k, n, 4)) for k in range(4)],
            "snapshots": [[0, 4], [1, 1], [2, 2], [3, 7]]}
    uses, bad = replay_timing_loop(good, 4, p)
    assert bad == "" and uses["snapshots"] == {0: 1 + 1, 1: 1 + 0, 2: 1 + 0, 3: 0 + 1}  # warm-up used sets 0-2
    assert uses["final"] == {k: good["counts"][k] - 1 for k in range(4)}
    for change, words in [({"counts": None}, "fields missing"), ({"times_ms": [0.4] * (n - 1)}, "timed calls"),
                          ({"warmup_calls": 1}, "warm-up"), ({"snapshots": [[0, 1]]}, "not a timed call"),
                          ({"snapshots": [[0, 4]]}, "no checked call"), ({"counts": [1, 1, 1, 1]}, "preparations")]:
        _, bad = replay_timing_loop({**good, **change}, 4, p)
        assert words in bad, (change, bad)


def test_bench_checks_one_random_timed_call_per_set():
    seen = []
    flush = torch.empty(1024, dtype=torch.int32)
    out = bench(lambda i: None, 3, torch.device("cpu"), flush, BenchParams(warmup_ms=0.0, rep_ms=0.0, min_reps=10),
                after=lambda j, i: seen.append((j, i)))
    assert sorted(i for _, i in seen) == [0, 1, 2] and all(j % 3 == i for j, i in seen)
    assert sorted(map(tuple, out["snapshots"])) == sorted((i, j) for j, i in seen)


# --- seeds, records ------------------------------------------------------------------------------------

def test_each_solution_and_grade_gets_its_own_inputs(gemm_problem):
    g = Grader(gemm_problem, device="cpu")
    try:
        w = gemm_problem.workloads[0]
        assert g.seed_of(0, w) == g.seed_of(0, w, "check", None)  # the old seeds stay
        assert len({g.seed_of(0, w, "check", s) for s in ("a/1", "a/2", "b/1")}) == 3
        assert g.trials == 3 and g.variants == BASE_VARIANTS
        with pytest.raises(Exception, match="unknown input distributions"):
            Grader(gemm_problem, device="cpu", variants=["gaussian"])
    finally:
        g.close()


def test_guard_statuses_are_named_and_counted():
    assert {s.value for s in GUARD_STATUSES} == {"FASTER_THAN_SOL", "INPUT_MODIFIED", "OUTPUT_ALIASED",
                                                  "UNTIMED_WORK", "THREAD_SPAWNED", "PROCESS_SPAWNED",
                                                  "TAMPERED"}
    from ucutlass.grader import WorkloadResult

    rs = [WorkloadResult("p", "u", {}, "l", "s", st, reason="x") for st in (Status.TAMPERED, Status.PASSED)]
    assert summarize(rs)["guarded"] == 1
    d = rs[0].to_json()
    assert d["evaluation"]["checks"] == {} and d["evaluation"]["status"] == "TAMPERED"
