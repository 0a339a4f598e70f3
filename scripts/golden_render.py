"""Write (or check) the golden renders of every kernel the repository ships: tests/golden/.

The compiler's redesign (issue 15) must not change what a program compiles to. Before a move this script
records, for every kernel of tests/kernels/, examples/ and problems/*/kernel.ucut and each of its distinct
legal combinations, the SHA-256 of the rendered ``.cu`` (the build cache's key is derived from it), the
kernel's config name and build digest, and the SHA-256 of the resolved ``.ucut`` text; the full ``.cu`` of
each kernel's first combination is kept to read a difference. tests/test_golden_render.py renders them
again and compares byte for byte.

    python scripts/golden_render.py           # rewrite tests/golden/ (only in a commit that says why)
    python scripts/golden_render.py --check   # exit 1 and list what differs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
PATTERNS = ("tests/kernels/*.ucut", "examples/*.ucut", "problems/*/kernel.ucut")


def sources() -> list[str]:
    """The `.ucut` files rendered, as paths relative to the repository root, sorted."""
    return sorted(str(p.relative_to(ROOT)) for pat in PATTERNS for p in ROOT.glob(pat))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def renders() -> tuple[dict, dict[str, str]]:
    """``(manifest, full)``: manifest[file][kernel][picks] = {config, build_digest, cu_sha256, ucut_sha256};
    full[name] = the ``.cu`` text of each kernel's first combination."""
    from ucutlass.codegen import render
    from ucutlass.arch import distinct_combinations, legal_combinations
    from ucutlass.lang import parse_file

    manifest: dict = {}
    full: dict[str, str] = {}
    for rel in sources():
        program = parse_file(ROOT / rel)
        per_file = manifest.setdefault(rel, {})
        for kernel in program.kernels:
            if kernel.choices():
                legal, _ = legal_combinations(kernel)
                combos = distinct_combinations(kernel, legal)
            else:
                combos = [{}]
            per_kernel = per_file.setdefault(kernel.name, {})
            for i, picks in enumerate(combos):
                concrete = kernel.resolve(picks) if picks else kernel
                cu = render(concrete, rel)
                resolved = program.resolve({f"{kernel.name}.{k}": v for k, v in picks.items()}) if picks else program
                key = json.dumps({k: str(v) for k, v in sorted(picks.items())}, sort_keys=True)
                per_kernel[key] = {"config": concrete.config_name(), "build_digest": concrete.build_digest(),
                                   "cu_sha256": _sha(cu), "ucut_sha256": _sha(resolved.source)}
                if i == 0:
                    full[rel.replace("/", "__").removesuffix(".ucut") + f".{kernel.name}.cu"] = cu
    return manifest, full


def differences(manifest: dict, full: dict[str, str]) -> list[str]:
    """What differs from tests/golden/, one line each (empty when nothing does)."""
    want = json.loads((GOLDEN / "renders.json").read_text())
    out = []
    for rel in sorted(set(want) | set(manifest)):
        if rel not in manifest or rel not in want:
            out.append(f"{rel}: {'missing now' if rel not in manifest else 'new (not in the golden files)'}")
            continue
        for kname in sorted(set(want[rel]) | set(manifest[rel])):
            a, b = want[rel].get(kname, {}), manifest[rel].get(kname, {})
            for picks in sorted(set(a) | set(b)):
                if a.get(picks) != b.get(picks):
                    fields = sorted(f for f in set(a.get(picks, {})) | set(b.get(picks, {}))
                                    if a.get(picks, {}).get(f) != b.get(picks, {}).get(f))
                    out.append(f"{rel} {kname} {picks}: {', '.join(fields) or 'missing'} differ")
    for name, text in sorted(full.items()):
        path = GOLDEN / "cu" / name
        if not path.exists() or path.read_text() != text:
            out.append(f"tests/golden/cu/{name}: differs")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with tests/golden/ instead of writing it")
    args = ap.parse_args()
    manifest, full = renders()
    if args.check:
        diff = differences(manifest, full)
        print("\n".join(diff) or "the renders equal tests/golden/")
        return 1 if diff else 0
    (GOLDEN / "cu").mkdir(parents=True, exist_ok=True)
    (GOLDEN / "renders.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    for old in (GOLDEN / "cu").glob("*.cu"):
        if old.name not in full:
            old.unlink()
    for name, text in full.items():
        (GOLDEN / "cu" / name).write_text(text)
    n = sum(len(k) for f in manifest.values() for k in f.values())
    print(f"wrote tests/golden/: {n} renders of {len(manifest)} files, {len(full)} full .cu files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
