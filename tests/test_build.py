"""nvcc discovery, flags and the content-addressed cache (with tiny translation units: seconds each)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ucutlass import build
from ucutlass.errors import CompileError, ToolchainError

TINY = 'extern "C" int ucut_abi_version() { return %d; }\n'


def test_find_nvcc_order(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDACXX", str(fake))
    assert build.find_nvcc() == fake
    monkeypatch.delenv("CUDACXX")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert build.find_nvcc() == fake


def test_missing_nvcc_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as e:
        build.find_nvcc()
    assert "CUDACXX" in str(e.value) and "CUDA_HOME" in str(e.value) and "ucutlass check" in str(e.value)


def test_cutlass_headers_from_the_wheel_or_cutlass_path(monkeypatch, tmp_path):
    root = build.cutlass_dir()
    assert (root / "include" / "cutlass" / "gemm" / "collective" / "collective_builder.hpp").is_file()
    assert build.cutlass_version().startswith("4.2")
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="CUTLASS_PATH"):
        build.cutlass_dir()
    (tmp_path / "include" / "cutlass").mkdir(parents=True)
    (tmp_path / "include" / "cutlass" / "cutlass.h").write_text("")
    assert build.cutlass_dir() == tmp_path


def test_flags_have_the_a_targets_and_no_paths():
    flags = build.flags_for("sm90")
    assert "arch=compute_90a,code=sm_90a" in flags and "-DNDEBUG" in flags
    assert not any(f.startswith("-I") for f in flags)
    assert "arch=compute_100a,code=sm_100a" in build.flags_for("sm100")
    with pytest.raises(ToolchainError):
        build.flags_for("sm80")


@pytest.mark.nvcc
def test_cache_key_depends_on_source_and_target_only_through_content():
    k1 = build.cache_key(TINY % 1, "sm90")
    assert k1 == build.cache_key(TINY % 1, "sm90")
    assert k1 != build.cache_key(TINY % 2, "sm90")
    assert k1 != build.cache_key(TINY % 1, "sm100")


@pytest.mark.nvcc
def test_cache_key_ignores_which_ucut_file_the_kernel_came_from():
    """One kernel reached through two paths (an installed problem's kernel.ucut and the repository's copy)
    is one cache entry: the provenance comment is not part of the key, the code is."""
    from ucutlass.codegen import render
    from ucutlass.lang import parse_file

    kernel = parse_file(Path(__file__).parent / "kernels" / "stream_k.ucut").kernel()
    a, b = render(kernel, "/site-packages/problems/x/kernel.ucut"), render(kernel, "problems/x/kernel.ucut")
    assert a != b  # the comment names the file
    assert build.cache_key(a, "sm90") == build.cache_key(b, "sm90")
    assert build.cache_key(a, "sm90") != build.cache_key(a.replace("ucut_run", "ucut_run2"), "sm90")


@pytest.mark.nvcc
def test_build_then_cache_hit(tmp_path):
    first = build.build_source(TINY % 7, "tiny", root=tmp_path, timeout_s=300)
    assert first.ok and not first.cached and first.so_path.is_file()
    again = build.build_source(TINY % 7, "tiny", root=tmp_path, timeout_s=300)
    assert again.ok and again.cached and again.so_path == first.so_path
    import ctypes

    assert ctypes.CDLL(str(first.so_path)).ucut_abi_version() == 7
    assert (first.entry / "meta.json").is_file() and (first.entry / "kernel.cu").read_text() == TINY % 7


@pytest.mark.nvcc
def test_failed_compile_reports_nvcc_and_is_cached(tmp_path):
    bad = 'static_assert(1 == 2, "Cooperative kernel requires Tile Size to be greater than or equal to 128");\n'
    res = build.build_source(bad, "bad", root=tmp_path, timeout_s=300)
    assert not res.ok and ("static assert" in res.error.lower() or "static_assert" in res.error)
    assert "Cooperative kernel requires" in res.log
    with pytest.raises(CompileError) as e:
        build.raise_for(res)
    assert "Cooperative kernel requires" in str(e.value)
    cached = build.build_source(bad, "bad", root=tmp_path, timeout_s=300)
    assert cached.cached and not cached.ok and cached.log == res.log


@pytest.mark.nvcc
def test_timeout_is_reported_not_cached(tmp_path, monkeypatch):
    slow = tmp_path / "slow-nvcc"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    real_version = build.nvcc_version()
    monkeypatch.setattr(build, "nvcc_version", lambda nvcc=None: real_version)
    monkeypatch.setenv("CUDACXX", str(slow))
    res = build.build_source(TINY % 3, "slow", root=tmp_path, timeout_s=1)
    assert not res.ok and "timed out" in res.error
    assert not (res.entry / "error.log").exists()


@pytest.mark.nvcc
def test_parallel_builds_keep_order(tmp_path):
    items = [(TINY % i, f"t{i}", "sm90", {"i": i}) for i in range(3)]
    seen = []
    results = build.build_many(items, jobs=2, root=tmp_path, timeout_s=300, on_done=seen.append)
    assert [r.name for r in results] == ["t0", "t1", "t2"]
    assert len(seen) == 3 and all(r.ok for r in results)


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("UCUTLASS_CACHE_DIR", str(tmp_path / "c"))
    assert build.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("UCUTLASS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert build.cache_dir() == tmp_path / "x" / "ucutlass"


def test_cache_files_are_readable_by_others(tmp_path):
    # mkstemp creates 0600; a .cu or .so copied out of the cache (`compile -o`) keeps its mode
    path = tmp_path / "entry" / "kernel.cu"
    build._write_atomic(path, "// x\n")
    assert path.read_text() == "// x\n" and (path.stat().st_mode & 0o777) == 0o644
