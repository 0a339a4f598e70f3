"""Where ucutlass keeps what it builds and measures: one cache root for compiled kernels (:mod:`ucutlass.build`) and
GPU calibrations (:mod:`ucutlass.sol.hardware`)."""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that moves the cache root.
ENV_CACHE_DIR = "UCUTLASS_CACHE_DIR"


def cache_dir() -> Path:
    """``$UCUTLASS_CACHE_DIR``, else ``$XDG_CACHE_HOME/ucutlass``, else ``~/.cache/ucutlass``."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ucutlass"
