"""The grader's housekeeping on the host: its scratch folders (and those of graders killed without closing them),
its workers' environment, and the snapshot of a problem's files it restores them from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

#: The grader's temporary folder (logs, the workers' scratch folders) is made with this prefix.
TMP_PREFIX = "ucutlass-grader-"
#: Problem files copied into each worker's scratch folder, and kept (to restore) after their digest, up
#: to this size in all.
PROBLEM_COPY_BYTES = 64 << 20


def process_start_time(pid: int) -> str:
    """When process ``pid`` started (field 22 of /proc/PID/stat, clock ticks since boot): with the pid, it
    names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def remove_stale_folders() -> None:
    """Remove the scratch folders of graders whose process is gone without closing them (killed with
    SIGKILL): their ``owner`` file names a process that no longer runs."""
    root = Path(tempfile.gettempdir())
    try:
        folders = list(root.glob(TMP_PREFIX + "*"))
    except OSError:
        return
    for folder in folders:
        try:
            pid, started = (folder / "owner").read_text().split()
        except (OSError, ValueError):
            continue  # not ours to judge (an older grader's, or being made now)
        if process_start_time(int(pid)) != started:
            shutil.rmtree(folder, ignore_errors=True)


def worker_env(scratch: Path) -> dict[str, str]:
    """A worker's environment: this process's, with every cache and temporary folder a library writes to
    moved into the worker's scratch folder (the only one it may write besides /dev and the build cache)."""
    env = dict(os.environ)
    tmp, cache = str(scratch / "tmp"), scratch / "cache"
    env.update(TMPDIR=tmp, TMP=tmp, TEMP=tmp, XDG_CACHE_HOME=str(cache), TRITON_HOME=str(cache / "triton"),
               TRITON_CACHE_DIR=str(cache / "triton" / "cache"), TORCH_EXTENSIONS_DIR=str(cache / "torch_extensions"),
               TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), CUDA_CACHE_PATH=str(cache / "nv"),
               PYTHONDONTWRITEBYTECODE="1", TORCHINDUCTOR_COMPILE_THREADS="1")  # torch.compile: no worker pool
    return env


def snapshot_files(folder: Path) -> dict[str, tuple[str, bytes | None]]:
    """``{name: (sha256, content)}`` of the regular files in a problem's folder (content kept up to
    :data:`PROBLEM_COPY_BYTES` in all, so a rewritten file can be restored)."""
    out: dict[str, tuple[str, bytes | None]] = {}
    kept = 0
    try:
        entries = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return out
    for p in entries:
        try:
            data = p.read_bytes()
        except OSError:
            continue
        keep = kept + len(data) <= PROBLEM_COPY_BYTES
        kept += len(data) if keep else 0
        out[p.name] = (hashlib.sha256(data).hexdigest(), data if keep else None)
    return out
