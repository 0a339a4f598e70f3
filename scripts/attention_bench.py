"""Attention on the GPU: ucutlass FMHA kernels (CUTLASS example 88) against torch SDPA's backends.

``--variants`` times the attention variants of issue 20 instead (bias, soft-capping, window, scalar scale, head dims
96 and 192, eager scores), each against SDPA given the same mask / scale (a bias or window as ``attn_mask``; SDPA has
no soft-capping, so a soft-capped row's SDPA time is that of the same attention uncapped).

Run by scripts/device_attention_bench.sh (on the H200). Each side gets the layout it is fed in real use, and the
table says which: ucutlass reads BSHD ([B, S, H, D], what a fused QKV projection writes), SDPA contiguous BHSD;
the ``*_bhsd`` variants give ucutlass SDPA's BHSD inputs (GQA in one launch; BSHD needs min(B, Hq/Hkv)).
Timing: ``triton.testing.do_bench`` (median, L2 flushed between calls) when triton is importable, else CUDA
events around single calls with an L2 flush before each (median of 50). TFLOP/s counts 4·B·Hq·Sq·Sk·D
and, for causal, only the lower triangle with the diagonal (a fraction (S+1)/(2S)), like ``ucutlass sol``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from ucutlass.build import build_kernels
from ucutlass.lang import parse, parse_file
from ucutlass.runtime import load_kernel

ROWS = [  # (B, S, Hq, Hkv, causal)
    (4, 4096, 32, 8, True), (1, 16384, 32, 8, True), (16, 1024, 32, 8, True), (4, 4000, 32, 8, True),
    (4, 4096, 32, 32, True), (1, 16384, 32, 32, True), (16, 1024, 32, 32, True), (4, 4000, 32, 32, True),
    (4, 4096, 32, 32, False),
]
D = 128

VARIANTS = {  # name -> settings of a fixed sm90 kernel
    "coop128": "tile = 128x128   schedule = cooperative   persistent = false",
    "coop128_persist": "tile = 128x128   schedule = cooperative   persistent = true",
    "coop64": "tile = 128x64   schedule = cooperative",
    "pingpong128": "tile = 128x128   schedule = pingpong",
}
#: Variants that read SDPA's own BHSD inputs: GQA in one launch for any B (BSHD needs min(B, Hq/Hkv) launches).
BHSD_VARIANTS = {"coop128_bhsd": VARIANTS["coop128"]}


def source(name: str, settings: str, causal: bool, bhsd: bool = False) -> str:
    def shape(s, h):
        return f"[B, {h}, {s}, {D}]" if bhsd else f"[B, {s}, {h}, {D}]"
    return (f"kernel {name} : attention {{\n  target = sm90\n  q : bf16{shape('Sq', 'Hq')}\n  k : bf16{shape('Sk', 'Hkv')}\n"
            f"  v : bf16{shape('Sk', 'Hkv')}\n  o : bf16{shape('Sq', 'Hq')}\n  mask = {'causal' if causal else 'none'}\n"
            f"  {settings}\n}}\n")


def bench(fn) -> float:
    """Median milliseconds of ``fn()``."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))
    except ImportError:
        flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
        for _ in range(5):
            fn()
        times = []
        for _ in range(50):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)


def flops(b, s, hq, causal) -> float:
    return 4.0 * b * hq * s * s * D * ((s + 1) / (2 * s) if causal else 1.0)


def default_backend(q, k, v, causal, gqa) -> str:
    """The backend SDPA picks for these inputs: torch's own choice (``torch._fused_sdp_choice``) and, as a check
    that does not depend on that private API, the CUDA kernels a profiled call launched."""
    try:
        from torch.nn.attention import SDPBackend

        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=None, enable_gqa=gqa)
        picked = SDPBackend(choice).name
    except Exception as e:  # noqa: BLE001 - report, don't fail the run
        picked = f"unknown ({type(e).__name__}: {str(e)[:80]})"
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        launched = next((n for n in names if any(w in n.lower() for w in ("cudnn", "flash", "fmha", "sdpa"))),
                        names[0] if names else "none")
    except Exception as e:  # noqa: BLE001
        launched = f"unknown ({type(e).__name__})"
    return f"{picked}; kernel {launched[:60]}"


#: --variants: name -> (B, S, Hq, Hkv, D, kernel lines (operands beyond q, k, v, o; settings), SDPA arguments maker)
VARIANT_ROWS = {
    "bias_shared": (4, 4096, 32, 8, 128, "bias : bf16[Sq, Sk]   mask = none", "bias"),
    "bias_batched_causal": (4, 4096, 32, 8, 128, "bias : bf16[B, 1, Sq, Sk]   mask = causal", "bias_causal"),
    "softcap_causal": (4, 4096, 32, 8, 128, "softcap = 50.0   mask = causal", "causal"),
    "window1024_causal": (4, 4096, 32, 8, 128, "window = 1024   mask = causal", "window"),
    "scale_scalar_causal": (4, 4096, 32, 8, 128, "scale : f32 <- scale   mask = causal", "scale"),
    "d96_causal": (4, 4096, 32, 8, 96, "mask = causal", "causal"),
    "d192_causal": (4, 4096, 32, 8, 192, "mask = causal   tile = 128x64   stages = 4", "causal"),
    "l1_047_eager": (4, 2056, 24, 8, 128, "bias : bf16[B, 1, Sq, Sk]   softcap : f32 <- softcap   scores = eager",
                     "bias"),
}


def variants_main(out: Path, build_only: bool = False) -> int:
    """Time each :data:`VARIANT_ROWS` kernel and SDPA (default backend, its pick) with the same arguments
    (``build_only``: only build them into the kernel cache)."""
    kernels = {}
    for name, (_, _, _, _, d, lines, _) in VARIANT_ROWS.items():
        text = (f"kernel {name} : attention {{\n  target = sm90\n"
                f"  q : bf16[B, Sq, Hq, {d}]   k : bf16[B, Sk, Hkv, {d}]\n"
                f"  v : bf16[B, Sk, Hkv, {d}]   o : bf16[B, Sq, Hq, {d}]\n  {lines}\n}}\n")
        kernels[name] = parse(text).kernel()
    results = build_kernels(list(kernels.values()), timeout_s=900)
    if build_only:
        print(f"{sum(r.ok for r in results)} of {len(results)} variant kernels built")
        return 0 if all(r.ok for r in results) else 1
    records, table = [], ["| variant | B×S | Hq/Hkv | D | ucutlass ms | SDPA ms (backend) | ratio | max abs err |",
                          "|---|---|---|---|---|---|---|---|"]
    torch.manual_seed(0)
    for (name, kernel), r in zip(kernels.items(), results):
        b, s, hq, hkv, d, _, sdpa_kind = VARIANT_ROWS[name]
        rec = {"variant": name, "B": b, "S": s, "Hq": hq, "Hkv": hkv, "D": d, "sdpa_args": sdpa_kind}
        if not r.ok:
            rec["error"] = f"build: {r.error}"
            records.append(rec)
            continue
        kern = load_kernel(r.so_path, kernel)
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        args = dict(q=q, k=k, v=v, o=o)
        i = torch.arange(s, device="cuda").unsqueeze(1)
        j = torch.arange(s, device="cuda").unsqueeze(0)
        sdpa = {"is_causal": sdpa_kind in ("causal", "scale")}
        if kernel.bias is not None:
            args["bias"] = torch.randn(*(b, 1, s, s) if kernel.bias.dims[0] == "B" else (s, s), device="cuda",
                                       dtype=torch.bfloat16)
            mask = args["bias"]
            if sdpa_kind == "bias_causal":
                mask = mask.masked_fill(j > i, float("-inf"))
            sdpa["attn_mask"] = mask
        if sdpa_kind == "window":
            sdpa = {"attn_mask": (j <= i) & (j >= i - kernel.window)}
        if kernel.scalar("scale") is not None:
            args["scale"] = sdpa["scale"] = 0.1
        if kernel.scalar("softcap") is not None:
            args["softcap"] = 50.0
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        try:
            kern(**args)
            torch.cuda.synchronize()
            rec["ucutlass_ms"] = bench(lambda: kern(**args))
            ref = F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True, **sdpa).transpose(1, 2)
            if not kernel.has_softcap:
                rec["max_abs_err"] = (o.float() - ref.float()).abs().max().item()
            rec["sdpa_ms"] = bench(lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True, **sdpa))
            rec["sdpa_backend"] = default_backend(qh, kh, vh, sdpa.get("is_causal", False), True) \
                if "attn_mask" not in sdpa else "with attn_mask"
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        records.append(rec)
        print(json.dumps(rec), flush=True)
        um, sm = rec.get("ucutlass_ms"), rec.get("sdpa_ms")
        table.append(f"| {name} | {b}×{s} | {hq}/{hkv} | {d} | {um and f'{um:.3f}'} | {sm and f'{sm:.3f}'} "
                     f"({rec.get('sdpa_backend')}) | {f'{sm / um:.3f}' if um and sm else 'n/a'} | "
                     f"{rec.get('max_abs_err', 'n/a (softcap)')} |")
        del q, k, v, o, qh, kh, vh, args
        torch.cuda.empty_cache()
    lines = [f"# Attention variants on the {torch.cuda.get_device_name()}: ucutlass vs torch SDPA with the same "
             "mask / scale", "",
             f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16, BSHD for ucutlass, contiguous BHSD "
             "for SDPA; ratio = SDPA ms / ucutlass ms. SDPA has no soft-capping: a capped row's SDPA time is "
             "uncapped.", "", *table]
    errors = [f"- {r['variant']}: {r['error']}" for r in records if "error" in r]
    if errors:
        lines += ["", "Errors:", *errors]
    (out / "attention_variants_bench.md").write_text("\n".join(lines) + "\n")
    (out / "attention_variants_bench.json").write_text(json.dumps(records, indent=2))
    print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tuned", help="a concrete .ucut (e.g. tune's best.ucut) to time as 'tuned'")
    ap.add_argument("--build-only", action="store_true", help="only build the fixed variants into the kernel cache")
    ap.add_argument("--sdpa-only", action="store_true", help="time SDPA alone (and name the backend torch picks)")
    ap.add_argument("--variants", action="store_true", help="time the attention variants (issue 20) vs SDPA")
    args = ap.parse_args()
    out = Path(args.out)
    if args.variants:
        return variants_main(out, args.build_only)

    kernels = []
    for causal in (True, False):
        for name, settings in VARIANTS.items():
            if not causal and name not in ("coop128", "coop128_persist"):
                continue
            kernels.append((name, causal, parse(source(name, settings, causal)).kernel()))
        for name, settings in BHSD_VARIANTS.items():
            kernels.append((name, causal, parse(source(name, settings, causal, bhsd=True)).kernel()))
    if args.tuned:
        k = parse_file(args.tuned).kernel()
        kernels.append(("tuned", k.mask == "causal", k))
    if args.sdpa_only:
        kernels = []
    results = build_kernels([k for _, _, k in kernels], timeout_s=900) if kernels else []
    if args.build_only:
        print(f"{sum(r.ok for r in results)} of {len(results)} variants built")
        return 0 if all(r.ok for r in results) else 1
    compiled = {}
    for (name, causal, k), r in zip(kernels, results):
        if r.ok:
            compiled[(name, causal)] = load_kernel(r.so_path, k)
        else:
            print(f"build failed: {name} causal={causal}: {r.error}", file=sys.stderr)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    records = []
    torch.manual_seed(0)
    for b, s, hq, hkv, causal in ROWS:
        gqa = hq != hkv
        q = torch.randn(b, s, hq, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, D, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # SDPA: contiguous BHSD
        rec = {"B": b, "S": s, "Hq": hq, "Hkv": hkv, "D": D, "causal": causal, "flops": flops(b, s, hq, causal),
               "ucutlass_ms": {}, "sdpa_ms": {}}
        ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=gqa).transpose(1, 2)
        oh = torch.empty_like(qh)
        for (name, kc), kern in compiled.items():
            if kc != causal:
                continue
            args = dict(q=qh, k=kh, v=vh, o=oh) if name in BHSD_VARIANTS else dict(q=q, k=k, v=v, o=o)
            try:
                kern(**args)
                torch.cuda.synchronize()
                got = oh.transpose(1, 2) if name in BHSD_VARIANTS else o
                err = (got.float() - ref.float()).abs().max().item()
                rec["ucutlass_ms"][name] = bench(lambda: kern(**args))
                rec.setdefault("ucutlass_maxerr", {})[name] = err
            except Exception as e:  # noqa: BLE001
                rec["ucutlass_ms"][name] = None
                rec.setdefault("errors", []).append(f"{name}: {e}")
        rec["default_backend"] = default_backend(qh, kh, vh, causal, gqa)
        for label, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def call():
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=gqa)
            try:
                if backend is None:
                    rec["sdpa_ms"][label] = bench(call)
                else:
                    with sdpa_kernel([backend]):
                        call()
                        rec["sdpa_ms"][label] = bench(call)
            except Exception as e:  # noqa: BLE001 - a backend that does not take these inputs
                rec["sdpa_ms"][label] = None
                rec.setdefault("errors", []).append(f"sdpa {label}: {type(e).__name__}: {str(e)[:120]}")
        records.append(rec)
        print(json.dumps(rec), flush=True)
        del q, k, v, o, qh, kh, vh, oh, ref
        torch.cuda.empty_cache()

    def tf(ms, f):
        return f"{f / (ms * 1e-3) / 1e12:.0f}" if ms else "n/a"

    lines = ["# Attention on the H200: ucutlass (CUTLASS example 88 FMHA) vs torch SDPA", "",
             f"torch {torch.__version__}, {torch.cuda.get_device_name()}, d = {D}, bf16. ucutlass fed BSHD "
             "[B, S, H, D] (the *_bhsd variants: BHSD); SDPA fed contiguous BHSD. TFLOP/s counts the causal lower triangle (with the diagonal). "
             "ratio = SDPA time (default; best of its backends) / best ucutlass time (> 1: ucutlass faster).", "",
             "| B×S | Hq/Hkv | mask | best ucutlass (config) | ucutlass TFLOP/s | SDPA default (picked) | flash | cuDNN | "
             "ratio to default | ratio to best |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        times = {n: t for n, t in r["ucutlass_ms"].items() if t}
        best = min(times, key=times.get) if times else None
        bt = times.get(best) if best else None
        sd = r["sdpa_ms"]
        ratio = f"{sd['default'] / bt:.3f}" if bt and sd.get("default") else "n/a"
        sdpa_best = min((t for t in sd.values() if t), default=None)
        ratio_best = f"{sdpa_best / bt:.3f}" if bt and sdpa_best else "n/a"
        lines.append(f"| {r['B']}×{r['S']} | {r['Hq']}/{r['Hkv']} | {'causal' if r['causal'] else 'none'} | "
                     f"{bt and f'{bt:.3f} ms'} ({best}) | {tf(bt, r['flops'])} | "
                     f"{tf(sd.get('default'), r['flops'])} ({r['default_backend']}) | {tf(sd.get('flash'), r['flops'])} | "
                     f"{tf(sd.get('cudnn'), r['flops'])} | {ratio} | {ratio_best} |")
    lines += ["", "All ucutlass variants (ms): " + "; ".join(
        f"{r['B']}×{r['S']} {r['Hq']}/{r['Hkv']} {'c' if r['causal'] else 'n'}: " +
        ", ".join(f"{n} {t:.3f}" if t else f"{n} failed" for n, t in r["ucutlass_ms"].items()) for r in records)]
    errors = [e for r in records for e in r.get("errors", [])]
    if errors:
        lines += ["", "Errors:", *[f"- {e}" for e in errors]]
    (out / "attention_bench.md").write_text("\n".join(lines) + "\n")
    (out / "attention_bench.json").write_text(json.dumps(records, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
