"""nvcc driver and content-addressed kernel cache.

One kernel per translation unit, compiled to a shared object that links cudart statically (no torch
headers, no -lcuda). Flags from shared/reference/cutlass/README.md (known to work with CUTLASS 4.2 and
nvcc 13.0): ``-std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler -fPIC -shared`` and the
``a`` targets, plus ``-Xcompiler -fno-gnu-unique`` (below, at BASE_FLAGS) (``sm_90a``: with plain sm_90 the wgmma path compiles to a trap).

Cache key: sha256 over the rendered source (less its provenance comment), the flags without machine-specific
paths, the nvcc version, the host compiler version, the CUTLASS version and the target. Entries live under
``cache_dir()/kernels/<key[:2]>/<key>/`` (``kernel.cu``, ``kernel.so``, ``meta.json``; a failed compile
leaves ``error.log`` so the same failure is not paid for twice). Files are written atomically
(temp file + ``os.replace``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .paths import cache_dir
from .errors import CompileError, ToolchainError

DEFAULT_TIMEOUT_S = 600.0

GENCODE = {"sm90": "arch=compute_90a,code=sm_90a", "sm100": "arch=compute_100a,code=sm_100a"}
# -fno-gnu-unique: g++ gives function-local statics of inline functions (CUTLASS's device adapters keep an
# `initialized` flag so) STB_GNU_UNIQUE binding, which the dynamic loader makes one per process even across
# RTLD_LOCAL libraries: a second .so holding the same kernel type then skipped setting its shared-memory
# attribute and every launch failed (status 307, "Error Internal").
BASE_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC",
              "-Xcompiler", "-fno-gnu-unique", "-shared")


def find_nvcc() -> Path:
    """nvcc from ``$CUDACXX``, ``$CUDA_HOME/bin/nvcc`` or ``PATH``, in that order.

    Raises:
        ToolchainError: none found (the message says where it looked and how to point at one).
    """
    tried = []
    for env in ("CUDACXX",):
        if os.environ.get(env):
            p = Path(os.environ[env])
            if p.is_file():
                return p
            tried.append(f"${env}={p}")
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            p = Path(os.environ[env]) / "bin" / "nvcc"
            if p.is_file():
                return p
            tried.append(f"${env}/bin/nvcc={p}")
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    tried.append("PATH")
    raise ToolchainError("nvcc not found (looked at " + ", ".join(tried) + "). Install the CUDA toolkit "
                         "(12.3 or newer for sm_90a) and set CUDACXX=/path/to/nvcc or CUDA_HOME. Without "
                         "nvcc, `ucutlass check` and `ucutlass compile --emit-only` still work.")


def cutlass_dir() -> Path:
    """CUTLASS source root holding ``include/`` and ``tools/util/include``.

    ``$CUTLASS_PATH`` when set, else the ``source`` folder of the installed ``cutlass_library`` package
    (wheel ``nvidia-cutlass``).

    Raises:
        ToolchainError: neither has ``include/cutlass/cutlass.h``.
    """
    if os.environ.get("CUTLASS_PATH"):
        root = Path(os.environ["CUTLASS_PATH"])
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return root
        raise ToolchainError(f"$CUTLASS_PATH={root} has no include/cutlass/cutlass.h")
    try:
        import cutlass_library
    except ImportError:
        raise ToolchainError("CUTLASS headers not found: install nvidia-cutlass==4.2.* (pip) or set "
                             "CUTLASS_PATH to a CUTLASS checkout") from None
    root = Path(cutlass_library.__file__).parent / "source"
    if not (root / "include" / "cutlass" / "cutlass.h").is_file():
        raise ToolchainError(f"the installed cutlass_library has no headers under {root}; set CUTLASS_PATH")
    return root


@functools.lru_cache(maxsize=None)
def _first_line(cmd: tuple[str, ...]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out[-1] if out else "unknown"


def nvcc_version(nvcc: Path | None = None) -> str:
    """Last line of ``nvcc --version`` (e.g. ``Build cuda_13.0.r13.0/compiler.36424714_0``)."""
    return _first_line((str(nvcc or find_nvcc()), "--version"))


def host_compiler_version() -> str:
    """First line of the host compiler's ``--version`` (``$NVCC_CCBIN`` or ``c++``)."""
    cxx = os.environ.get("NVCC_CCBIN") or shutil.which("c++") or "g++"
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
        return out.splitlines()[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cutlass_version() -> str:
    """``CUTLASS_MAJOR.MINOR.PATCH`` read from ``include/cutlass/version.h``."""
    text = (cutlass_dir() / "include" / "cutlass" / "version.h").read_text()
    parts = {}
    for key in ("CUTLASS_MAJOR", "CUTLASS_MINOR", "CUTLASS_PATCH"):
        for line in text.splitlines():
            if line.startswith(f"#define {key} "):
                parts[key] = line.split()[2]
    return ".".join(parts.get(k, "?") for k in ("CUTLASS_MAJOR", "CUTLASS_MINOR", "CUTLASS_PATCH"))


#: Extra flags and the example folder (``source/examples/<dir>``, headers used in place) per kernel family
#: and target: the FMHA collectives live in CUTLASS's examples 88 (sm90) and 77 (sm100), not in include/.
FAMILY_FLAGS: dict[str, tuple[str, ...]] = {"attention": ("--use_fast_math",)}
FAMILY_EXAMPLES: dict[tuple[str, str], str] = {("attention", "sm90"): "88_hopper_fmha",
                                               ("attention", "sm100"): "77_blackwell_fmha"}


def flags_for(target: str, family: str = "gemm") -> list[str]:
    """nvcc flags without include paths (these enter the cache key)."""
    if target not in GENCODE:
        raise ToolchainError(f"unknown target {target!r}; valid: {', '.join(GENCODE)}")
    return [*BASE_FLAGS, *FAMILY_FLAGS.get(family, ()), "-gencode", GENCODE[target]]


def nvcc_command(source: Path, output: Path, target: str, extra_includes: Sequence[Path] = (),
                 family: str = "gemm") -> list[str]:
    """The full nvcc command line for one translation unit (``family`` adds its flags and example headers)."""
    root = cutlass_dir()
    includes = [root / "include", root / "tools" / "util" / "include", *extra_includes]
    if (family, target) in FAMILY_EXAMPLES:
        includes.append(root / "examples" / FAMILY_EXAMPLES[(family, target)])
    cmd = [str(find_nvcc()), *flags_for(target, family)]
    if os.environ.get("NVCC_CCBIN"):
        cmd += ["-ccbin", os.environ["NVCC_CCBIN"]]
    cmd += [f"-I{p}" for p in includes]
    cmd += [str(source), "-o", str(output)]
    return cmd


_KERNEL_COMMENT = re.compile(r"// kernel \w+: \w+$")  # the templates' second line: `// kernel NAME: CONFIG`


def _without_provenance(source: str) -> str:
    """The source without its ``// Generated by … from FILE`` and ``// kernel NAME: CONFIG`` comment lines, which
    name the .ucut file, the ucutlass version and the kernel but change nothing in the binary: the same kernel
    reached from two paths (a problem's installed kernel.ucut and the repository's copy), or under two names (a
    tuned kernel and its copy in a dispatch), is one cache entry."""
    return "\n".join(line for line in source.splitlines()
                     if not (line.startswith("// Generated by ucutlass") or _KERNEL_COMMENT.match(line)))


def cache_key(source: str, target: str, family: str = "gemm") -> str:
    """sha256 of everything that changes the compiled binary (see the module docstring)."""
    payload = {
        "source": _without_provenance(source),
        "flags": flags_for(target, family),
        "nvcc": nvcc_version(),
        "host": host_compiler_version(),
        "cutlass": cutlass_version(),
        "target": target,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass
class BuildResult:
    """Outcome of one build.

    Attributes:
        key: the cache key; ``so_path``: the shared object (None when the build failed);
        cached: found in the cache, no nvcc run; seconds: wall time of the nvcc run (0 when cached);
        log: nvcc's output on failure (or warnings); error: a one-line reason when ``ok`` is False.
    """

    key: str
    name: str
    entry: Path
    so_path: Path | None
    source_path: Path
    cached: bool
    seconds: float
    log: str = ""
    error: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.so_path is not None


def _write_atomic(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would make copies (`compile -o`) private to their owner
    os.replace(tmp, path)


def entry_dir(key: str, root: Path | None = None) -> Path:
    """Cache folder of one key."""
    return (root or cache_dir()) / "kernels" / key[:2] / key


def build_source(source: str, name: str, target: str = "sm90", *, root: Path | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, meta: dict | None = None,
                 retry_failed: bool = False) -> BuildResult:
    """Compile one translation unit through the cache.

    Args:
        source: the C++ text (as rendered by :func:`ucutlass.codegen.render`).
        name: a readable name for logs and file names (the kernel's config name).
        target: ``sm90`` or ``sm100``.
        root: cache root (default :func:`cache_dir`).
        timeout_s: nvcc wall-clock limit; a timeout is reported, not cached.
        meta: extra JSON-able facts stored in ``meta.json`` (e.g. the `.ucut` source).
        retry_failed: ignore a cached failure and run nvcc again.

    Returns:
        A :class:`BuildResult`; a compile error is a result with ``ok`` False and nvcc's log (it
        does not raise, so a tuner can record it as a failed trial).

    Raises:
        ToolchainError: nvcc or CUTLASS cannot be found.
    """
    family = (meta or {}).get("family", "gemm")  # meta["family"] picks the family's flags (attention)
    key = cache_key(source, target, family)
    entry = entry_dir(key, root)
    so, src, err = entry / "kernel.so", entry / "kernel.cu", entry / "error.log"
    if so.is_file():
        return BuildResult(key, name, entry, so, src, cached=True, seconds=0.0, meta=_read_meta(entry))
    if err.is_file() and not retry_failed:
        log = err.read_text()
        return BuildResult(key, name, entry, None, src, cached=True, seconds=0.0, log=log,
                           error=_first_error(log), meta=_read_meta(entry))
    _write_atomic(src, source)
    tmp_so = entry / f".kernel.{os.getpid()}.{time.monotonic_ns()}.so"
    cmd = nvcc_command(src, tmp_so, target, family=family)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tmp_so.unlink(missing_ok=True)
        return BuildResult(key, name, entry, None, src, cached=False, seconds=time.monotonic() - start,
                           error=f"nvcc timed out after {timeout_s:.0f} s")
    seconds = time.monotonic() - start
    log = (proc.stdout + proc.stderr).strip()
    record = {"name": name, "target": target, "seconds": round(seconds, 1), "command": cmd,
              "nvcc": nvcc_version(), "cutlass": cutlass_version(), **(meta or {})}
    if proc.returncode != 0 or not tmp_so.is_file():
        tmp_so.unlink(missing_ok=True)
        _write_atomic(err, log or f"nvcc exited with {proc.returncode}")
        _write_atomic(entry / "meta.json", json.dumps({**record, "ok": False}, indent=2))
        return BuildResult(key, name, entry, None, src, cached=False, seconds=seconds, log=log,
                           error=_first_error(log) or f"nvcc exited with {proc.returncode}", meta=record)
    _write_atomic(entry / "meta.json", json.dumps({**record, "ok": True}, indent=2))
    os.replace(tmp_so, so)
    return BuildResult(key, name, entry, so, src, cached=False, seconds=seconds, log=log, meta=record)


def _read_meta(entry: Path) -> dict:
    try:
        return json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


def _first_error(log: str) -> str:
    """The most telling line of an nvcc log: a static_assert or the first ``error``."""
    lines = log.splitlines()
    for needle in ("static_assert", "static assertion", "error:", "error"):
        for line in lines:
            if needle in line:
                return line.strip()[:400]
    return lines[0].strip()[:400] if lines else ""


def raise_for(result: BuildResult) -> BuildResult:
    """Return ``result`` when it built, else raise :class:`CompileError` with nvcc's message."""
    if not result.ok:
        raise CompileError(f"{result.name}: {result.error}", log=result.log, source_path=str(result.source_path))
    return result


def default_jobs() -> int:
    """Parallel nvcc processes: one per core this process may run on (``taskset`` narrows it; each nvcc takes ~1-2 GB
    of memory and one core)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this OS
        return max(1, os.cpu_count() or 1)


def build_many(items: Iterable[tuple[str, str, str, dict | None]], *, jobs: int | None = None,
               root: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
               on_done: Callable[[BuildResult], None] | None = None) -> list[BuildResult]:
    """Compile several translation units in parallel nvcc processes.

    Args:
        items: ``(source, name, target, meta)`` tuples.
        jobs: parallel nvcc processes (default: one per core).
        on_done: called with each result as it finishes (for progress bars).

    Returns:
        Results in the order of ``items``; items with the same source and target share one nvcc run
        (configurations that differ only in run-time settings render to the same source).
    """
    items = list(items)
    first: dict[tuple[str, str], int] = {}
    for i, (src, _name, target, _meta) in enumerate(items):
        first.setdefault((src, target), i)
    unique: dict[int, BuildResult] = {}
    with cf.ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        futures = {pool.submit(build_source, items[i][0], items[i][1], items[i][2], root=root,
                               timeout_s=timeout_s, meta=items[i][3]): i for i in first.values()}
        for fut in cf.as_completed(futures):
            res = fut.result()
            unique[futures[fut]] = res
            if on_done:
                on_done(res)
    results = []
    for src, name, target, _meta in items:
        res = unique[first[(src, target)]]
        results.append(res if res.name == name else dataclasses.replace(res, name=name))
    return results


def build_kernels(kernels: Sequence, *, source_file: str = "<string>", sources: Sequence[str] | None = None,
                  jobs: int | None = None, root: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                  on_done: Callable[[BuildResult], None] | None = None) -> list[BuildResult]:
    """Render and compile concrete kernels in parallel (one translation unit each).

    Args:
        kernels: concrete, checked :class:`ucutlass.ir.GemmKernel` objects.
        source_file: the `.ucut` file they came from (named in the generated code).
        sources: the concrete `.ucut` text of each kernel's program, stored in the cache's meta.json.

    Raises:
        CheckError: a kernel has open choices or breaks an arch rule (nothing is compiled then).
    """
    from .codegen import render

    items = []
    for i, k in enumerate(kernels):
        meta = {"config": k.build_config().config_name(), "build_digest": k.build_digest(), "family": k.family}
        if sources is not None:
            meta["ucut"] = sources[i]
        items.append((render(k, source_file), k.config_name(), k.target.value, meta))
    return build_many(items, jobs=jobs, root=root, timeout_s=timeout_s, on_done=on_done)
