"""Write examples/pipeline_conv_resblock_final.ucut with its two 3x3 conv kernels on another tile, one file per
variant of scripts/conv_bench.py (into DIR), and with ``--pick BENCH.json`` print the file of the variant that ran
L2_078's two 3x3 rows fastest in that bench (the original file when the base tile won or the bench is missing).

Usage: python3 l2_078_variants.py DIR [--pick BENCH.json]

Call 2 ran it on the program of commit 41c2e82 (both 3x3 kernels on 128x128x64); the example now carries the tile
it picked (64x256x64, cluster 2x1x1), so this script's assertion no longer holds on later commits.
"""
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
from conv_bench import VARIANTS  # noqa: E402

BASE = REPO / "examples/pipeline_conv_resblock_final.ucut"
CANDIDATES = ("128x192", "128x128x128", "64x256_c2")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
text = BASE.read_text()
assert text.count("padding = 1   tile = 128x128x64\n") == 2
files = {}
for v in CANDIDATES:
    f = out / f"pipeline_conv_resblock_final_{v}.ucut"
    f.write_text(text.replace("padding = 1   tile = 128x128x64\n", f"padding = 1   {VARIANTS[v]}\n"))
    files[v] = f
if "--pick" in sys.argv:
    bench = Path(sys.argv[sys.argv.index("--pick") + 1])
    best, best_ms = "128x128_c1", None
    if bench.exists():
        rows = [r for r in json.loads(bench.read_text()) if r["label"].startswith("L2_078")]
        for v in ("128x128_c1",) + CANDIDATES:
            if all(r["ucutlass_ms"].get(v) for r in rows) and rows:
                ms = sum(r["ucutlass_ms"][v] for r in rows)
                if best_ms is None or ms < best_ms:
                    best, best_ms = v, ms
    print(files.get(best, BASE))
else:
    print("\n".join(str(f) for f in files.values()))
