"""ucutlass.sol: counting, hardware, T_SOL, score, table — hand-computed checks, CPU only.

The comparison with NVIDIA's published bounds is in tests/test_sol_published.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ucutlass.problem import load_problem
from ucutlass.sol import (CalibrationError, HardwareError, SolError, analyze, calibrate, calibrate_command,
                          count_workload, format_table, hardware_command, list_hardware, load_hardware,
                          shared_counting_process, sol_command, sol_score)
from ucutlass.sol.flops import band_count
from ucutlass.sol.hardware import datasheet_for

SOLAR_BF16 = 1.8113e15
SOLAR_BW = 7.672e12
SOLAR_OVERHEAD_S = 0.406e-6


@pytest.fixture(scope="module", autouse=True)
def one_counting_process():
    """These tests are about what is counted: one counting process serves the whole module (the process itself,
    one per call by default, is tested in test_sol_isolation.py)."""
    with shared_counting_process():
        yield


def make_problem(tmp_path: Path, name: str, axes: dict, inputs: dict, outputs: dict, reference: str,
                 workloads: list[dict], custom: str | None = None):
    """A problem folder in the SOL-ExecBench format, loaded."""
    folder = tmp_path / name
    folder.mkdir()
    d = {"name": name, "axes": axes, "inputs": inputs, "outputs": outputs, "reference": reference}
    if custom:
        d["custom_inputs_entrypoint"] = custom
    (folder / "definition.json").write_text(json.dumps(d))
    (folder / "workload.jsonl").write_text("\n".join(
        json.dumps({"uuid": f"w{i}", "axes": w, "inputs": {}}) for i, w in enumerate(workloads)))
    return load_problem(folder)


def t(shape, dtype="bfloat16"):
    return {"shape": shape, "dtype": dtype}


def by_label(problem, label):
    return next(w for w in problem.workloads if w.label() == label)


# --- hand-computed counts on real SOL-ExecBench problems -------------------------------------------------

def test_gemm_flops_and_bytes_by_hand(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "FlashInfer-Bench_007_gemm_n4096_k4096")
    w = by_label(p, "M=256")
    r = analyze(p, w, "b200-solar")
    assert r.flops_by_precision == {"fp16": 2 * 256 * 4096 * 4096}
    assert r.bytes == 2 * (256 * 4096 + 4096 * 4096 + 256 * 4096)
    assert [(o.op, o.precision, o.calls) for o in r.per_op] == [("aten.mm", "fp16", 1)]
    t_c, t_m = 2 * 256 * 4096 ** 2 / SOLAR_BF16, r.bytes / SOLAR_BW
    assert r.t_sol_ms == pytest.approx((max(t_c, t_m) + SOLAR_OVERHEAD_S) * 1e3, rel=1e-9)
    assert r.bound == "memory" and r.hardware == "b200-solar" and r.hardware_method == "solar"
    assert r.intensity == pytest.approx(r.flops / r.bytes)


def test_matmul_plus_residual_counts_the_residual_once(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "L1_030_attention_output_projection_with_residual")
    w = by_label(p, "batch_size=4,seq_len=128")
    r = analyze(p, w, "h200")
    m, h = 4 * 128, 2560
    assert r.flops_by_precision == {"bf16": 2 * m * h * h}
    assert r.bytes_by_tensor == {"attn_output": 2 * m * h, "residual": 2 * m * h, "o_proj_weight": 2 * h * h,
                                 "output": 2 * m * h}
    assert r.bytes == 2 * (3 * m * h + h * h)
    assert r.t_sol_ms == pytest.approx(max(2 * m * h * h / 989.4e12, r.bytes / 4.8e12) * 1e3)


def test_fp32_matmul_is_tf32_priced_per_entry(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "L1_037_flux_feedforward_gelu_approximate")
    w = by_label(p, "batch_size=32,seq_len=256")
    flops = 2 * 2 * (32 * 256) * 3072 * 12288
    h200, solar = analyze(p, w, "h200"), analyze(p, w, "b200-solar")
    assert h200.flops_by_precision == solar.flops_by_precision == {"tf32": flops}
    assert h200.t_compute_ms == pytest.approx(flops / 494.7e12 * 1e3)  # TF32 rate
    assert solar.t_compute_ms == pytest.approx(flops / SOLAR_BF16 * 1e3)  # SOLAR: fp32 as 16-bit
    assert solar.rates_used["tf32"][1] == "bf16"


def test_fp8_dequantize_then_matmul_counts_at_fp8(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "Quant_001_fp8_attention_output_projection")
    w = by_label(p, "batch_size=1,seq_len=256")
    r = analyze(p, w, "b200-solar")
    assert r.flops_by_precision == {"fp8": 2 * 256 * 7680 * 7680}  # reference runs it in fp32 after dequant
    # inputs are bf16 in DRAM: read as bf16, whatever the kernel quantizes to
    assert r.bytes == 2 * (256 * 7680 + 7680 * 7680 + 7680 + 256 * 7680)


def test_custom_inputs_never_materialise(sol_execbench_dir):
    # the MoE generator would allocate 22.5 GB of expert weights; on meta nothing is allocated
    p = load_problem(sol_execbench_dir / "L1_044_moe_expert_computation")
    counts = count_workload(p, p.workloads[0])
    assert counts.input_bytes["gate_proj_weights"] == 256 * 2048 * 7168 * 2
    assert counts.data_dependent


def test_nvfp4_scaled_mm_uses_logical_k(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "Quant_020_nvfp4_linear_layer")
    r = analyze(p, by_label(p, "batch_size=1,seq_len=128"), "b200-solar")
    assert r.flops_by_precision == {"fp4": 2 * 128 * 8192 * 8192}  # packed fp4x2: K = 2 × 4096
    assert r.bytes_by_tensor["weight_fp4"] == 8192 * 4096 and r.bytes_by_tensor["weight_global_decode_scale"] == 0
    assert any(".item()" in n for n in r.notes)  # the generator's .item() on meta got a placeholder


def test_causal_mask_built_by_hand_counts_lower_triangle(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "L1_067_flash_attention_gqa_ultralong")
    r = analyze(p, by_label(p, "batch_size=2,seq_len=128"), "b200")
    s, bh, d = 128, 2 * 32, 128
    proj = 2 * (2 * s) * 4096 * (4096 + 1024 + 1024 + 4096)
    attn = 2 * bh * (s * (s + 1) // 2) * d * 2  # QK^T and PV over the lower triangle incl. diagonal
    assert r.flops_by_precision == {"tf32": proj + attn}
    assert any("causal" in o.note and o.calls == 2 for o in r.per_op)


def test_all_sol_execbench_problems_count_on_meta(sol_execbench_dir):
    for folder in sorted(sol_execbench_dir.iterdir()):
        if (folder / "definition.json").is_file() and "L1_044" not in folder.name:
            p = load_problem(folder)
            c = count_workload(p, p.workloads[0])
            # something is counted: tensor-core FLOPs, or (FlashInfer-Bench_003, an RMSNorm) elementwise work only
            assert (c.flops > 0 or c.other_flops > 0) and c.bytes > 0, folder.name


# --- synthetic problems: attention, masks, data-dependent routing, bytes rules ------------------------

SDPA_REF = """
import torch
import torch.nn.functional as F
def run(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal={causal})
"""


@pytest.mark.parametrize("sq,sk,causal,kept", [
    (100, 160, True, 5050),               # Σ_{i<100} (i+1): rows never reach the last 60 keys
    (160, 100, True, 5050 + 60 * 100),    # rows 100..159 see all 100 keys
    (128, 128, True, 128 * 129 // 2),
    (100, 160, False, 100 * 160),
])
def test_sdpa_flops_with_causal_halving(tmp_path, sq, sk, causal, kept):
    p = make_problem(tmp_path, "sdpa", {"Sq": {"type": "var"}, "Sk": {"type": "var"}},
                     {"q": t([2, 4, "Sq", 64]), "k": t([2, 4, "Sk", 64]), "v": t([2, 4, "Sk", 32])},
                     {"o": t([2, 4, "Sq", 32])}, SDPA_REF.format(causal=causal), [{"Sq": sq, "Sk": sk}])
    c = count_workload(p, p.workloads[0])
    assert c.flops_by_precision == {"bf16": 2 * 8 * kept * (64 + 32)}
    assert [o.op for o in c.per_op if o.precision != "simt"] == ["scaled_dot_product_attention"]
    assert c.bytes == 2 * 8 * (sq * 64 + sk * 64 + sk * 32 + sq * 32)


def test_band_count_matches_brute_force():
    for rows, cols, c in [(5, 7, 0), (7, 5, 0), (6, 6, -2), (4, 9, 5)]:
        brute = sum(1 for i in range(rows) for j in range(cols) if j - i <= c)
        assert band_count(rows, cols, lower_to=c) == brute
        brute_up = sum(1 for i in range(rows) for j in range(cols) if j - i >= c)
        assert band_count(rows, cols, upper_from=c) == brute_up


MASKED_REF = """
import torch
def run(q, k, v):
    s = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
    {mask}
    p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(p, v)
"""


@pytest.mark.parametrize("mask", [
    "scores = scores + torch.triu(torch.full((s, s), float('-inf'), device=q.device, dtype=q.dtype), diagonal=1)",
    "scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), diagonal=1),"
    " float('-inf'))",
    "scores = torch.where(torch.tril(torch.ones(s, s, dtype=torch.bool, device=q.device)), scores,"
    " float('-inf'))",
])
def test_explicit_causal_masks_are_recognised(tmp_path, mask):
    s, bh, d = 96, 2 * 3, 32
    p = make_problem(tmp_path, "masked", {"S": {"type": "var"}},
                     {"q": t([2, 3, "S", d]), "k": t([2, 3, "S", d]), "v": t([2, 3, "S", d])},
                     {"o": t([2, 3, "S", d])}, MASKED_REF.format(mask=mask), [{"S": s}])
    c = count_workload(p, p.workloads[0])
    assert c.flops_by_precision == {"bf16": 2 * 2 * bh * (s * (s + 1) // 2) * d}


def test_random_mask_input_is_not_causal(tmp_path):
    ref = "import torch\ndef run(q, k, m):\n    return torch.matmul(q, k.transpose(-1, -2)) + m\n"
    p = make_problem(tmp_path, "rnd", {"S": {"type": "var"}},
                     {"q": t(["S", 16]), "k": t(["S", 16]), "m": t(["S", "S"])}, {"o": t(["S", "S"])}, ref,
                     [{"S": 64}])
    assert count_workload(p, p.workloads[0]).flops == 2 * 64 * 64 * 16


MOE_REF = """
import torch
def run(x, ids, w):
    out = torch.zeros_like(x)
    for e in range(w.shape[0]):
        rows = torch.where((ids == e).any(dim=1))[0]
        if rows.numel() == 0:
            continue
        out[rows] += x[rows] @ w[e].t()
    return out
"""


def moe_problem(tmp_path):
    return make_problem(tmp_path, "moe", {"T": {"type": "var"}, "E": {"type": "const", "value": 64},
                                          "H": {"type": "const", "value": 4096}},
                        {"x": t(["T", "H"]), "ids": t(["T", 2], "int64"), "w": t(["E", "H", "H"])},
                        {"out": t(["T", "H"])}, MOE_REF, [{"T": 3}])


def test_moe_bound_loads_only_experts_with_tokens(tmp_path):
    p = moe_problem(tmp_path)
    h = 4096
    inputs = {"x": torch.empty(3, h, dtype=torch.bfloat16, device="meta"),
              "ids": torch.tensor([[5, 9], [5, 1], [9, 5]]),
              "w": torch.empty(64, h, h, dtype=torch.bfloat16, device="meta")}  # 2 GiB: never allocated
    r = analyze(p, p.workloads[0], "h200", inputs=inputs)
    assert r.bytes_by_tensor["w"] == 3 * h * h * 2  # experts 1, 5, 9 only
    assert r.flops_by_precision == {"bf16": 2 * (3 + 2 + 1) * h * h}  # expert 5: 3 rows, 9: 2, 1: 1
    assert r.data_dependent and any("analyze(..., inputs=...)" in n for n in r.notes)


def test_moe_generated_inputs_are_seeded_and_modest(tmp_path):
    p = moe_problem(tmp_path)
    a = count_workload(p, p.workloads[0], seed=1)
    b = count_workload(p, p.workloads[0], seed=1)
    assert a.input_bytes == b.input_bytes and a.flops_by_precision == b.flops_by_precision
    experts = a.input_bytes["w"] // (4096 * 4096 * 2)
    assert 1 <= experts <= 6 and a.data_dependent  # 3 tokens × 2 slots touch at most 6 of 64 experts


def test_bytes_rules_scalars_slices_unused_and_integer_outputs(tmp_path):
    ref = """
import torch
def run(x, table, unused, scale):
    last = x[:, -4:, :]                     # only the last 4 positions are read
    top = torch.topk(last.float().sum(-1), 2, dim=-1).indices
    return last * scale, top
"""
    p = make_problem(tmp_path, "rules", {"S": {"type": "var"}},
                     {"x": t([2, "S", 8]), "table": t([100, 8]), "unused": t([1000, 8]),
                      "scale": {"shape": None, "dtype": "float32"}},
                     {"y": t([2, 4, 8]), "top": t([2, 2], "int64")}, ref, [{"S": 32}])
    c = count_workload(p, p.workloads[0])
    assert c.input_bytes == {"x": 2 * 4 * 8 * 2, "table": 0, "unused": 0, "scale": 0}
    assert c.output_bytes == {"y": 2 * 4 * 8 * 2, "top": 2 * 2 * 8}  # int64 indices: 8 bytes each
    assert c.flops == 0
    assert any("'unused' is never read" in n for n in c.notes)


def test_conv2d_flops(tmp_path):
    ref = "import torch.nn.functional as F\ndef run(x, w):\n    return F.conv2d(x, w, padding=1, groups=2)\n"
    p = make_problem(tmp_path, "conv", {"N": {"type": "var"}},
                     {"x": t(["N", 8, 16, 16], "float16"), "w": t([6, 4, 3, 3], "float16")},
                     {"y": t(["N", 6, 16, 16], "float16")}, ref, [{"N": 2}])
    c = count_workload(p, p.workloads[0])
    assert c.flops_by_precision == {"fp16": 2 * (2 * 6 * 16 * 16) * (4 * 3 * 3)}


def test_huge_custom_generator_with_item_runs_on_meta(tmp_path):
    ref = """
import torch
def make(axes, device):
    w = torch.randn(1 << 20, 1 << 16, device=device)          # 256 GiB if it were real
    s = (w.abs().amax() / 448.0).item()                      # data-dependent scalar
    return {"x": torch.randn(axes["M"], 1 << 16, device=device), "w": w, "s": s}
def run(x, w, s):
    return (x @ w.t()) * s
"""
    p = make_problem(tmp_path, "huge", {"M": {"type": "var"}},
                     {"x": t(["M", 65536], "float32"), "w": t([1048576, 65536], "float32"),
                      "s": {"shape": None, "dtype": "float32"}},
                     {"y": t(["M", 1048576], "float32")}, ref, [{"M": 4}], custom="make")
    c = count_workload(p, p.workloads[0])
    assert c.flops_by_precision == {"tf32": 2 * 4 * (1 << 20) * (1 << 16)}
    assert c.input_bytes["w"] == 4 << 36 and c.input_bytes["s"] == 0


def test_custom_generator_with_its_own_generator_on_meta(tmp_path):
    # torch.Generator(device="meta") raises in torch; while counting, it is a CPU generator (L2_015, L2_078)
    ref = """
import torch
def make(axes, device):
    g = torch.Generator(device=device)
    g.manual_seed(42)
    assert isinstance(g, torch.Generator)
    return {"x": torch.randn(axes["M"], 32, device=device, generator=g),
            "w": torch.randn(16, 32, device=device, generator=g)}
def run(x, w):
    return x @ w.t()
"""
    p = make_problem(tmp_path, "own_generator", {"M": {"type": "var"}},
                     {"x": t(["M", 32], "float32"), "w": t([16, 32], "float32")}, {"y": t(["M", 16], "float32")},
                     ref, [{"M": 8}], custom="make")
    generator = torch.Generator
    assert count_workload(p, p.workloads[0]).flops_by_precision == {"tf32": 2 * 8 * 16 * 32}
    assert torch.Generator is generator
    with pytest.raises(RuntimeError, match="not an accelerator"):  # as before, outside counting
        torch.Generator(device="meta")


def test_counting_leaves_the_callers_rng_alone(tmp_path):
    p = moe_problem(tmp_path)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    count_workload(p, p.workloads[0], seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_unknown_values_in_an_op_without_meta_kernel_are_reported(tmp_path):
    ref = "import torch\ndef run(x):\n    return torch.unique(x)\n"
    p = make_problem(tmp_path, "uniq", {"N": {"type": "var"}}, {"x": t(["N"], "float32")},
                     {"y": t(["N"], "float32")}, ref, [{"N": 1 << 22}])  # 16 MiB float: no CPU shadow
    with pytest.raises(SolError, match="unique"):
        count_workload(p, p.workloads[0])


# --- hardware ----------------------------------------------------------------------------------------------

def test_hardware_entries_have_sources_and_methods():
    names = {h.name for h in list_hardware()}
    assert {"h100-sxm", "h200-sxm", "b200", "gb200", "b200-solar"} <= names
    for h in list_hardware():
        if h.method == "calibrated":
            continue
        assert h.method in ("datasheet", "solar")
        for key in ("flops", "dram_bytes_per_s", "l2_bytes", "sm_count"):
            assert h.sources.get(key), (h.name, key)
    solar = load_hardware("b200-solar")
    assert solar.flops["bf16"] == pytest.approx(1.811e15, rel=1e-3)
    assert (solar.flops["fp8"], solar.flops["fp4"], solar.flops["tf32"]) == (3.623e15, 7.245e15, 0.906e15)
    assert solar.dram_bytes_per_s == pytest.approx(7.67e12, rel=1e-3) and solar.overhead_s == pytest.approx(0.4e-6, rel=0.05)
    h200 = load_hardware("h200")
    assert (h200.name, h200.flops["bf16"], h200.dram_bytes_per_s, h200.sm_count, h200.l2_bytes) == \
        ("h200-sxm", 989.4e12, 4.8e12, 132, 60 << 20)
    assert load_hardware("h100").flops["bf16"] == 989.4e12 and load_hardware("h100").dram_bytes_per_s == 3.35e12


def test_rate_fallbacks_and_errors():
    h200 = load_hardware("h200-sxm")
    assert h200.rate("fp4") == (h200.flops["fp8"], "fp8")  # no fp4 tensor cores on Hopper
    assert h200.rate("tf32") == (494.7e12, "tf32")
    with pytest.raises(HardwareError, match="valid: .*b200-solar"):
        load_hardware("a100")
    assert datasheet_for("NVIDIA GB200").name == "gb200" and datasheet_for("NVIDIA B200").name == "b200"
    assert datasheet_for("NVIDIA H100 80GB HBM3").name == "h100-sxm"


def test_local_hardware_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(HardwareError, match="needs a CUDA GPU"):
        load_hardware("local")
    with pytest.raises(CalibrationError, match="needs a CUDA GPU"):
        calibrate()


def test_local_prefers_calibrated_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("UCUTLASS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert load_hardware("local").name == "h200-sxm"  # no calibration yet: the datasheet
    entry = {"name": "calibrated:NVIDIA H200", "gpu": "NVIDIA H200", "method": "calibrated",
             "flops": {"bf16": 700e12}, "dram_bytes_per_s": 4.1e12, "sources": {"flops": "test"}}
    (tmp_path / "hardware-calibrated.json").write_text(json.dumps({"NVIDIA H200": entry}))
    local = load_hardware("local")
    assert (local.method, local.flops["bf16"], local.dram_bytes_per_s) == ("calibrated", 700e12, 4.1e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A10")
    with pytest.raises(HardwareError, match="run `ucutlass calibrate`"):
        load_hardware("local")


def test_cache_dir_order(monkeypatch, tmp_path):
    from ucutlass.sol.hardware import cache_dir

    monkeypatch.delenv("UCUTLASS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "ucutlass"
    monkeypatch.setenv("UCUTLASS_CACHE_DIR", str(tmp_path / "u"))
    assert cache_dir() == tmp_path / "u"
    monkeypatch.delenv("UCUTLASS_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "ucutlass"


# --- score, cache, table -----------------------------------------------------------------------------

def test_sol_score():
    assert sol_score(1.0, 3.0, 1.0) == 1.0
    assert sol_score(3.0, 3.0, 1.0) == 0.5
    assert sol_score(2.0, 3.0, 1.0) == pytest.approx(2 / 3)
    assert sol_score(1e6, 3.0, 1.0) < 1e-5
    assert math.isnan(sol_score(0.9, 3.0, 1.0))   # faster than light: flagged, never rewarded
    assert math.isnan(sol_score(2.0, 0.9, 1.0))   # a baseline under T_SOL: the bound is wrong
    assert sol_score(2.0, 1.0, 1.0) == 0.0        # baseline exactly at T_SOL
    with pytest.raises(ValueError):
        sol_score(float("nan"), 1.0, 1.0)
    with pytest.raises(ValueError):
        sol_score(1.0, 1.0, 0.0)


def test_analyze_is_cached_and_table_states_hardware_once(sol_execbench_dir):
    p = load_problem(sol_execbench_dir / "L1_083_attention_score_value_matmul")
    assert analyze(p, 0, "h200") is analyze(p, p.workloads[0], "h200")
    text = sol_command(p, "h200")
    lines = text.splitlines()
    assert text.count("h200-sxm") == 1 and "method datasheet" in lines[0]
    assert sum(1 for line in lines if line.startswith("batch_size=")) == len(p.workloads)
    assert "T_SOL" in text and "memory" in text
    data = json.loads(sol_command(p, "b200-solar", as_json=True))
    assert data["hardware"]["method"] == "solar" and len(data["workloads"]) == len(p.workloads)
    w0 = data["workloads"][0]
    assert w0["t_sol_ms"] == pytest.approx(max(w0["t_compute_ms"], w0["t_memory_ms"]) + w0["t_overhead_ms"])
    assert format_table([]) == "(no workloads)"
    listing = hardware_command()
    assert "b200-solar" in listing and "method solar" in listing and "local" in listing
    assert {h["name"] for h in json.loads(hardware_command(as_json=True))} >= {"h200-sxm", "b200-solar"}


# --- GPU: calibrate ------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_calibrate_on_the_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("UCUTLASS_CACHE_DIR", str(tmp_path))
    hw = calibrate(n=4096, iters=5, bandwidth_bytes=1 << 30)
    assert "TFLOP/s" in calibrate_command(save=False)
    name = torch.cuda.get_device_name()
    stored = json.loads((tmp_path / "hardware-calibrated.json").read_text())
    assert name in stored and stored[name]["method"] == "calibrated"
    assert load_hardware("local").digest() == hw.digest()
    sheet = datasheet_for(name)
    assert 0.2e12 < hw.dram_bytes_per_s < (1.1 * sheet.dram_bytes_per_s if sheet else 20e12)
    for p in ("bf16", "fp16", "tf32"):
        assert hw.flops[p] > 10e12, p
        if sheet:
            assert hw.flops[p] < 1.1 * sheet.flops[p], p  # nothing beats the datasheet
    print({p: f"{r / 1e12:.0f} TFLOP/s" for p, r in hw.flops.items()}, f"{hw.dram_bytes_per_s / 1e12:.2f} TB/s")
