"""Where the tests find data that lives outside the repository."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Real SOL-ExecBench problems live beside the checkout (../shared, read-only); a clone elsewhere can point
# at them with UCUTLASS_SOL_EXECBENCH.
_CANDIDATES = [os.environ.get("UCUTLASS_SOL_EXECBENCH"), REPO.parent / "shared" / "sol-execbench",
               Path("/work/shared/sol-execbench")]
SHARED_SOL_EXECBENCH = next((Path(p) for p in _CANDIDATES if p and Path(p).is_dir()), Path(str(_CANDIDATES[1])))
