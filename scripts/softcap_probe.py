"""Which tanh for the FMHA soft cap (templates/sm90_fmha.cu.j2 ``tanh_impl``): time and error of each, with SDPA.

For each implementation ("approx": tanh.approx.f32; "exp": 1 - 2/(e^2x+1) with fast exp and reciprocal; "libm":
tanhf) the soft-capped causal kernels of ``attention_bench.py --variants`` (f32 scores, and L1_047's eager scores
with a per-batch bias) are built and timed against uncapped SDPA (cuDNN / with the same bias), with the max abs
error against an fp32 formula of the same attention. Usage (GPU): python3 scripts/softcap_probe.py --out DIR
[--build-only]. Outputs DIR/softcap_probe.md and .json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

IMPLS = ("approx", "exp", "libm")
#: name -> (B, S, Hq, Hkv, kernel lines beyond q, k, v, o)
ROWS = {
    "softcap_causal": (4, 4096, 32, 8, "softcap = 50.0   mask = causal"),
    "l1_047_eager": (4, 2056, 24, 8, "bias : bf16[B, 1, Sq, Sk]   softcap : f32 <- softcap   scores = eager   "
                                     "mask = none"),
}


def sources():
    from ucutlass.codegen import environment
    from ucutlass.codegen.attention import template_values
    from ucutlass.lang import parse

    out = {}
    for name, (*_, lines) in ROWS.items():
        text = (f"kernel {name} : attention {{\n  target = sm90\n  q : bf16[B, Sq, Hq, 128]   k : bf16[B, Sk, Hkv, 128]\n"
                f"  v : bf16[B, Sk, Hkv, 128]   o : bf16[B, Sq, Hq, 128]\n  {lines}\n}}\n")
        kernel = parse(text).kernel()
        for impl in IMPLS:
            src = environment().get_template("sm90_fmha.cu.j2").render(**{**template_values(kernel), "tanh_impl": impl})
            out[(name, impl)] = (kernel, src)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--build-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from ucutlass.build import build_many

    srcs = sources()
    keys = list(srcs)
    results = dict(zip(keys, build_many([(srcs[k][1], f"softcap_{k[0]}_{k[1]}", "sm90", {"family": "attention"})
                                         for k in keys], timeout_s=900)))
    print(f"{sum(r.ok for r in results.values())} of {len(keys)} built", flush=True)
    if args.build_only:
        return 0
    import torch
    import torch.nn.functional as F
    from attention_bench import bench

    from ucutlass.runtime import load_kernel

    table = ["| row | tanh | ucutlass ms | SDPA ms (uncapped) | ratio | max abs err vs fp32 |", "|---|---|---|---|---|---|"]
    records = []
    torch.manual_seed(0)
    for name, (b, s, hq, hkv, _) in ROWS.items():
        q = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16) * 3  # large scores: the cap bites
        k = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, 128, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        kargs = dict(q=q, k=k, v=v, o=o)
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        cap, causal = 50.0, "causal" in ROWS[name][4]
        sd = {"is_causal": causal}
        bias = None
        if "bias" in ROWS[name][4]:
            bias = torch.randn(b, 1, s, s, device="cuda", dtype=torch.bfloat16)
            kargs.update(bias=bias, softcap=cap)
            sd = {"attn_mask": bias}
        sdpa_ms = bench(lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True, **sd))
        # fp32 formula on one batch (memory): s = c tanh(q k^T scale / c) (+ bias), causal mask, softmax, @ v
        qf, kf, vf = (t[:1].float().transpose(1, 2) for t in (q, k, v))
        kf, vf = kf.repeat_interleave(hq // hkv, 1), vf.repeat_interleave(hq // hkv, 1)
        sc = torch.tanh(qf @ kf.transpose(-1, -2) / math.sqrt(128) / cap) * cap
        if bias is not None:
            sc = sc + bias[:1].float()
        if causal:
            sc = sc.masked_fill(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
        ref = (sc.softmax(-1) @ vf).transpose(1, 2)
        del sc, qf, kf, vf
        for impl in IMPLS:
            rec = {"row": name, "tanh": impl, "sdpa_ms": sdpa_ms}
            r = results[(name, impl)]
            if not r.ok:
                rec["error"] = (r.error or "")[:300]
            else:
                kern = load_kernel(r.so_path, srcs[(name, impl)][0])
                kern(**kargs)
                torch.cuda.synchronize()
                rec["max_abs_err"] = (o[:1].float() - ref).abs().max().item()
                rec["ms"] = bench(lambda: kern(**kargs))
            records.append(rec)
            print(json.dumps(rec), flush=True)
            ms = rec.get("ms")
            table.append(f"| {name} | {impl} | {ms and f'{ms:.3f}'} | {sdpa_ms:.3f} | "
                         f"{f'{sdpa_ms / ms:.3f}' if ms else rec.get('error', '')[:80]} | {rec.get('max_abs_err')} |")
        del q, k, v, o, qh, kh, vh, kargs, ref
        torch.cuda.empty_cache()
    lines = [f"# Soft-cap tanh on the {torch.cuda.get_device_name()} (scripts/softcap_probe.py)", "",
             f"torch {torch.__version__}, bf16, B×S×Hq/Hkv×D as in attention_bench.py --variants; SDPA uncapped "
             "(it has no soft cap), with the bias as attn_mask where the row has one.", "", *table]
    (out / "softcap_probe.md").write_text("\n".join(lines) + "\n")
    (out / "softcap_probe.json").write_text(json.dumps(records, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
