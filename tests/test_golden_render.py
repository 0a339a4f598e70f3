"""Every kernel the repository ships renders byte for byte as recorded in tests/golden/ (issue 15: the
compiler's redesign changes no generated C++, no config name, no build digest, no resolved `.ucut`).

A deliberate change rewrites the files with ``python scripts/golden_render.py`` in a commit that says why.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("golden_render", ROOT / "scripts" / "golden_render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_shipped_kernel_renders_as_recorded():
    golden = _script()
    manifest, full = golden.renders()
    assert len(manifest) == len(golden.sources()) >= 45
    assert sum(len(k) for f in manifest.values() for k in f.values()) >= 500  # every distinct combination
    diff = golden.differences(manifest, full)
    assert not diff, "renders differ from tests/golden/ (python scripts/golden_render.py --check):\n" + \
        "\n".join(diff[:40])


def test_a_changed_render_is_reported(tmp_path, monkeypatch):
    """The comparison sees a one-byte change of a recorded .cu and of a digest."""
    golden = _script()
    manifest, full = golden.renders()
    name = sorted(full)[0]
    full[name] = full[name] + " "
    rel = sorted(manifest)[0]
    kname = sorted(manifest[rel])[0]
    picks = sorted(manifest[rel][kname])[0]
    manifest[rel][kname][picks] = dict(manifest[rel][kname][picks], cu_sha256="0" * 64)
    diff = golden.differences(manifest, full)
    assert any(name in d for d in diff) and any("cu_sha256" in d for d in diff)
