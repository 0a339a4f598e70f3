"""FMHA speed (issue 20 item 3): what each option of CUTLASS example 88's FMHA buys, on the H200, against SDPA.

Each variant is the sm90 template (``templates/sm90_fmha.cu.j2``) rendered with one or more of the options the
language does not spell yet, on top of a legal kernel's values:

- ``mma_warpgroups``: 88's ``Tag::kNumMmaWarpGroups`` with BlockQ = 64 x that (1: 64x128, 3: 192x128);
- ``wg_order``: ``Tag::kIsMainloopLocked`` + ``kIsEpilogueLocked`` (the MMA warpgroups take turns at the softmax and
  epilogue, so one warpgroup's GEMMs overlap the other's softmax: FlashAttention-3's ping-pong);
- ``longest_first``: causal q tiles in reverse order (the longest first, the shortest in the last wave);
- the settings the language has (tile, schedule, persistent, stages).

Every output is checked against SDPA before it is timed (max |err| reported). Timing: ``triton.testing.do_bench``
(median, L2 flushed), as scripts/attention_bench.py. Writes OUT/fmha_explore.md and OUT/fmha_explore.json.

    python scripts/fmha_explore.py --out DIR [--build-only] [--rows NAME,...] [--variants NAME,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

#: rows: name -> (B, S, Hq, Hkv, D, causal)
ROWS = {
    "gqa_16x1024_c": (16, 1024, 32, 8, 128, True),
    "mha_16x1024_c": (16, 1024, 32, 32, 128, True),
    "gqa_8x512_c": (8, 512, 32, 8, 128, True),
    "gqa7_16x1024_c": (16, 1024, 28, 4, 128, True),
    "gqa_4x4096_c": (4, 4096, 32, 8, 128, True),
    "gqa_1x16384_c": (1, 16384, 32, 8, 128, True),
    "mha_4x4096_n": (4, 4096, 32, 32, 128, False),
    "mha_16x1024_n": (16, 1024, 32, 32, 128, False),
    "d64_16x1024_c": (16, 1024, 32, 8, 64, True),
    "d64_4x4096_c": (4, 4096, 32, 32, 64, True),
    "d96_16x1024_c": (16, 1024, 32, 8, 96, True),
    "d96_4x4096_c": (4, 4096, 32, 8, 96, True),
}

#: variants: name -> (settings line of the legal base kernel, template value overrides)
VARIANTS = {
    "base": ("tile = 128x128   schedule = cooperative   persistent = false", {}),
    "lf": ("tile = 128x128   schedule = cooperative   persistent = false", {"longest_first": True}),
    "lock": ("tile = 128x128   schedule = cooperative   persistent = false", {"wg_order": True}),
    "lock_lf": ("tile = 128x128   schedule = cooperative   persistent = false",
                {"wg_order": True, "longest_first": True}),
    "persist_lf": ("tile = 128x128   schedule = cooperative   persistent = true", {"longest_first": True}),
    "pp_lf": ("tile = 128x128   schedule = pingpong", {"longest_first": True}),
    "pp_lock_lf": ("tile = 128x128   schedule = pingpong", {"longest_first": True, "wg_order": True}),
    "wg3": ("tile = 128x128   schedule = cooperative   persistent = false", {"block_q": 192, "mma_warpgroups": 3}),
    "wg3_lf": ("tile = 128x128   schedule = cooperative   persistent = false",
               {"block_q": 192, "mma_warpgroups": 3, "longest_first": True}),
    "wg1": ("tile = 128x128   schedule = cooperative   persistent = false", {"block_q": 64, "mma_warpgroups": 1}),
    "kv64_lf": ("tile = 128x64   schedule = cooperative   persistent = false", {"longest_first": True}),
}

#: the variants tried per head dim (the whole list at 128; fewer at 64 and 96, where the device time goes further)
VARIANTS_BY_D = {128: tuple(VARIANTS), 64: ("base", "lf", "lock", "lock_lf", "pp_lf", "wg3", "wg3_lf"),
                 96: ("base", "lf", "lock", "pp_lf")}


def kernel_text(name: str, d: int, causal: bool, settings: str) -> str:
    return (f"kernel {name} : attention {{\n  target = sm90\n  q : bf16[B, Sq, Hq, {d}]   k : bf16[B, Sk, Hkv, {d}]\n"
            f"  v : bf16[B, Sk, Hkv, {d}]   o : bf16[B, Sq, Hq, {d}]\n"
            f"  mask = {'causal' if causal else 'none'}\n  {settings}\n}}\n")


def plan(rows, variants):
    """(row, variant) -> (kernel, rendered source); a variant applies to the rows it can serve."""
    from ucutlass.codegen import environment
    from ucutlass.codegen.attention import template_values
    from ucutlass.lang import parse

    out, sources = {}, {}
    for rname in rows:
        b, s, hq, hkv, d, causal = ROWS[rname]
        for vname in variants:
            settings, over = VARIANTS[vname]
            if (over.get("longest_first") and not causal) or vname not in VARIANTS_BY_D[d] \
                    or (not causal and vname not in ("base", "lock", "wg3", "wg1")):
                continue
            key = (d, causal, vname)
            if key not in sources:
                kernel = parse(kernel_text(f"x_{vname}", d, causal, settings)).kernel()
                values = {**template_values(kernel), **over}
                src = environment().get_template("sm90_fmha.cu.j2").render(**values)
                sources[key] = (kernel, src)
            out[(rname, vname)] = key
    return out, sources


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, variants = args.rows.split(","), args.variants.split(",")
    cells, sources = plan(rows, variants)
    from ucutlass.build import build_many

    keys = sorted(sources, key=str)
    results = build_many([(sources[k][1], f"fmha_{k[0]}_{'c' if k[1] else 'n'}_{k[2]}", "sm90",
                           {"family": "attention"}) for k in keys], timeout_s=args.timeout)
    built = {k: r for k, r in zip(keys, results)}
    failed = {f"d{k[0]} {'causal' if k[1] else 'none'} {k[2]}": (r.error or "")[:300]
              for k, r in built.items() if not r.ok}
    for what, why in failed.items():
        print(f"build failed: {what}: {why}", file=sys.stderr, flush=True)
    print(f"{sum(r.ok for r in results)} of {len(results)} built", flush=True)
    if args.build_only:
        (out / "fmha_explore_builds.json").write_text(json.dumps(failed, indent=2))
        return 0

    import torch
    import torch.nn.functional as F
    from attention_bench import bench

    from ucutlass.runtime import load_kernel

    records = []
    torch.manual_seed(0)
    for rname in rows:
        b, s, hq, hkv, d, causal = ROWS[rname]
        q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        gqa = hq != hkv
        flops = 4.0 * b * hq * s * s * d * ((s + 1) / (2 * s) if causal else 1.0)
        rec = {"row": rname, "B": b, "S": s, "Hq": hq, "Hkv": hkv, "D": d, "causal": causal, "flops": flops,
               "ms": {}, "maxerr": {}, "errors": {}}

        def sdpa():
            return F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=gqa)

        ref = sdpa().transpose(1, 2)
        rec["sdpa_ms"] = bench(sdpa)
        for vname in variants:
            key = cells.get((rname, vname))
            if key is None or not built[key].ok:
                continue
            try:
                kern = load_kernel(built[key].so_path, sources[key][0])
                kern(q=q, k=k, v=v, o=o)
                torch.cuda.synchronize()
                rec["maxerr"][vname] = (o.float() - ref.float()).abs().max().item()
                rec["ms"][vname] = bench(lambda: kern(q=q, k=k, v=v, o=o))
            except Exception as e:  # noqa: BLE001 - one variant failing must not stop the others
                rec["errors"][vname] = f"{type(e).__name__}: {str(e)[:200]}"
        records.append(rec)
        print(json.dumps(rec), flush=True)
        del q, k, v, o, qh, kh, vh, ref
        torch.cuda.empty_cache()

    def tf(ms, f):
        return f"{f / (ms * 1e-3) / 1e12:.0f}" if ms else "—"

    head = "| row | B×S | Hq/Hkv | D | mask | SDPA ms (TFLOP/s) | " + " | ".join(variants) + " | best / SDPA |"
    lines = ["# FMHA options on the H200 (scripts/fmha_explore.py)", "",
             f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16, ucutlass BSHD, SDPA contiguous BHSD "
             "(default backend). Cells: ms (TFLOP/s); — = not applicable or not built. Last column: SDPA ms / best "
             "ucutlass ms (> 1: ucutlass faster).", "", head, "|" + "---|" * (len(variants) + 7)]
    for r in records:
        cells_txt = [f"{r['ms'][v]:.3f} ({tf(r['ms'][v], r['flops'])})" if v in r["ms"] else "—" for v in variants]
        best = min(r["ms"].values()) if r["ms"] else None
        lines.append(f"| {r['row']} | {r['B']}×{r['S']} | {r['Hq']}/{r['Hkv']} | {r['D']} | "
                     f"{'causal' if r['causal'] else 'none'} | {r['sdpa_ms']:.3f} ({tf(r['sdpa_ms'], r['flops'])}) | "
                     + " | ".join(cells_txt) + (f" | {r['sdpa_ms'] / best:.3f} |" if best else " | n/a |"))
    errs = [f"- {r['row']} {v}: {e}" for r in records for v, e in r["errors"].items()]
    errs += [f"- build {w}: {e}" for w, e in failed.items()]
    bad = [f"- {r['row']} {v}: max |err| {e:.4f}" for r in records for v, e in r["maxerr"].items() if e > 0.02]
    lines += (["", "Errors:", *errs] if errs else []) + (["", "Large errors (> 0.02):", *bad] if bad else [])
    (out / "fmha_explore.md").write_text("\n".join(lines) + "\n")
    (out / "fmha_explore.json").write_text(json.dumps(records, indent=2))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
