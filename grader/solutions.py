"""Solutions: what the grader grades, described by a picklable recipe that a worker process builds.

The grader never imports candidate code into its own process. A :class:`SolutionRef` names a *loader*
(``"package.module:function"``) and a JSON-able *payload*; inside the worker, ``loader(payload, problem)``
returns the callable to grade. The loaders here cover Python files, FlashInfer-Bench solution JSON
(``spec.entry_point`` + ``sources``) and the problem's own reference; ucutlass's compiled kernels come
through ``ucutlass.runtime:load_solution``.

Calling convention (FlashInfer-Bench's): arguments are positional in definition order. With
``destination_passing`` the callable is ``fn(*inputs, *outputs)`` and writes into the outputs the grader
allocated; otherwise ``fn(*inputs)`` returns the outputs like the reference's ``run()`` (one tensor, a
tuple/list in definition order, or a dict by output name).
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import GraderError

#: Loader names of the loaders defined here.
PYTHON_FILE_LOADER = "ucutlass.grader.solutions:load_python_file"
SOURCES_LOADER = "ucutlass.grader.solutions:load_sources"
REFERENCE_LOADER = "ucutlass.grader.solutions:load_reference"

#: A module-level constant a solution .py file may set to declare destination passing style.
DPS_MARKER = "DESTINATION_PASSING"
#: FlashInfer-Bench languages: imported as Python, or built with torch.utils.cpp_extension.
PYTHON_LANGUAGES = ("python", "triton", "torch", "pytorch")
NATIVE_LANGUAGES = ("cuda", "cpp")
NATIVE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
ENV_BUILD_CACHE = "UCUTLASS_GRADER_CACHE"


@dataclass(frozen=True)
class SolutionRef:
    """A recipe for a candidate, built into a callable inside the grader's worker process.

    Attributes:
        name: shown in records and tables.
        loader: ``"package.module:function"``, called in the worker as ``loader(payload, problem)``.
        payload: JSON-able arguments for the loader (e.g. ``{"path": "kernel.py"}``).
        destination_passing: True: ``fn(*inputs, *outputs)`` writes into outputs the grader allocates;
            False: ``fn(*inputs)`` returns the outputs like the reference's ``run()``.

    Note:
        Two refs with equal fields are the same solution to the worker's cache (:meth:`key`); put a
        content hash in the payload when the files behind it can change (``solution_from_file`` does).
    """

    name: str
    loader: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    destination_passing: bool = False

    def key(self) -> str:
        """A stable digest of all fields (sha256 of sorted JSON), the same in every process."""
        blob = json.dumps({"name": self.name, "loader": self.loader, "payload": self.payload,
                           "dps": bool(self.destination_passing)}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return int(self.key(), 16)

    def to_json(self) -> dict:
        return {"name": self.name, "loader": self.loader, "payload": dict(self.payload),
                "destination_passing": bool(self.destination_passing)}


def reference_solution(problem) -> SolutionRef:
    """The problem's own reference ``run()`` as a solution, timed through the same worker path."""
    return SolutionRef(name=f"{problem.id}:reference", loader=REFERENCE_LOADER,
                       payload={"problem": problem.id}, destination_passing=False)


def resolve_loader(spec: str) -> Callable[[Mapping[str, Any], Any], Callable]:
    """Import ``"package.module:function"``.

    Raises:
        GraderError: malformed spec, module not importable, or no such callable.
    """
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise GraderError(f"loader {spec!r} is not of the form 'package.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise GraderError(f"loader {spec!r}: cannot import {mod_name}: {e}") from e
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise GraderError(f"loader {spec!r}: {mod_name} has no callable {fn_name!r}")
    return fn


# --- loaders (run inside the worker) -------------------------------------------------------------------

def _import_file(path: Path, module_name: str, search_dir: Path | None = None):
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise GraderError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod  # dataclasses and pickling look modules up by name
    if search_dir is not None and str(search_dir) not in sys.path:
        sys.path.insert(0, str(search_dir))  # helpers beside the entry file import as top-level modules
    spec.loader.exec_module(mod)
    return mod


def _entry(mod, entry: str, where: str) -> Callable:
    fn = getattr(mod, entry, None)
    if not callable(fn):
        raise GraderError(f"{where} defines no callable {entry!r}")
    return fn


def load_python_file(payload: Mapping[str, Any], problem) -> Callable:
    """Loader for a ``.py`` solution: payload ``{"path": ..., "entry": "run"}``; returns ``entry``.

    Raises:
        GraderError: the file is missing or defines no such callable (import errors propagate).
    """
    path = Path(payload["path"])
    if not path.is_file():
        raise GraderError(f"solution file {path} does not exist")
    digest = payload.get("sha256") or hashlib.sha256(str(path).encode()).hexdigest()
    mod = _import_file(path, f"ucutlass_solution_{digest[:16]}", path.parent)
    return _entry(mod, payload.get("entry", "run"), str(path))


_SOURCE_DIRS: list[str] = []


@atexit.register
def _remove_source_dirs() -> None:
    for d in _SOURCE_DIRS:
        shutil.rmtree(d, ignore_errors=True)


def _write_sources(root: Path, sources) -> list[Path]:
    paths = []
    for src in sources:
        target = (root / src["path"]).resolve()
        if root.resolve() not in target.parents:
            raise GraderError(f"source path {src['path']!r} leaves the solution folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != src["content"]:
            target.write_text(src["content"])
        paths.append(target)
    return paths


def build_cache_dir() -> Path:
    """Where C++/CUDA solutions are built: ``$UCUTLASS_GRADER_CACHE`` or ``~/.cache/ucutlass/grader``."""
    import os

    return Path(os.environ.get(ENV_BUILD_CACHE) or Path.home() / ".cache" / "ucutlass" / "grader")


def load_sources(payload: Mapping[str, Any], problem) -> Callable:
    """Loader for FlashInfer-Bench solution JSON: payload ``{"sources": [{path, content}], "entry_point",
    "language"}``.

    Python and Triton: the sources are written into a private temporary folder (put on ``sys.path``) and
    the entry point ``"file.py::function"`` is imported from there. CUDA and C++ (FlashInfer-Bench's torch
    builder): the ``.cu``/``.cpp``/``.cc``/``.cxx``/``.c`` sources are compiled with
    ``torch.utils.cpp_extension.load`` in a content-addressed folder under :func:`build_cache_dir` (a
    rebuild of unchanged sources is a no-op) and the entry symbol is taken from the extension module.

    Raises:
        GraderError: a source path escapes the folder, the entry point is missing, or the build fails.
    """
    entry_file, _, fn_name = str(payload["entry_point"]).partition("::")
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    language = str(payload.get("language", "python")).lower()
    where = f"{payload.get('name', 'solution')}: {entry_file}"
    if language in NATIVE_LANGUAGES:
        from torch.utils.cpp_extension import load

        root = build_cache_dir() / f"ext_{digest}"
        root.mkdir(parents=True, exist_ok=True)
        paths = _write_sources(root, payload["sources"])
        native = [str(p) for p in paths if p.suffix in NATIVE_SUFFIXES]
        if Path(entry_file).suffix not in NATIVE_SUFFIXES:
            raise GraderError(f"{where}: a {language} entry file must be one of {', '.join(NATIVE_SUFFIXES)}")
        try:
            mod = load(name=f"ucutlass_ext_{digest}", sources=native, extra_include_paths=[str(root)],
                       with_cuda=language == "cuda", build_directory=str(root), verbose=False)
        except Exception as e:
            raise GraderError(f"{where}: building the {language} sources failed: {type(e).__name__}: "
                              f"{str(e)[-1500:]}") from e
        return _entry(mod, fn_name, where)
    root = Path(tempfile.mkdtemp(prefix="ucutlass-solution-"))
    _SOURCE_DIRS.append(str(root))
    _write_sources(root, payload["sources"])
    mod = _import_file(root / entry_file, f"ucutlass_solution_{digest}", root)
    return _entry(mod, fn_name, where)


def load_reference(payload: Mapping[str, Any], problem) -> Callable:
    """Loader for the problem's reference ``run()`` (return style), executed from its source."""
    return problem.reference_module().run


# --- solution files (parsed in the parent, never executed there) ---------------------------------------

def _dps_marker(source: str, path: Path) -> bool | None:
    """The value of a module-level ``DESTINATION_PASSING = True/False``, read with ``ast`` (not run)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError:
        return None  # the worker reports the syntax error as a failed load
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id == DPS_MARKER and isinstance(node.value, ast.Constant):
                return bool(node.value.value)
    return None


def _from_python(path: Path, destination_passing: bool | None, entry: str) -> SolutionRef:
    source = path.read_text()
    dps = destination_passing if destination_passing is not None else bool(_dps_marker(source, path))
    payload = {"path": str(path), "entry": entry, "destination_passing": dps,
               "sha256": hashlib.sha256(source.encode()).hexdigest()}
    return SolutionRef(name=path.stem, loader=PYTHON_FILE_LOADER, payload=payload, destination_passing=dps)


def _from_flashinfer_json(path: Path, problem, destination_passing: bool | None) -> SolutionRef:
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise GraderError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    spec = d.get("spec") or {}
    entry_point = spec.get("entry_point", "")
    entry_file, sep, fn_name = entry_point.partition("::")
    language = str(spec.get("language", "python")).lower()
    if language not in PYTHON_LANGUAGES + NATIVE_LANGUAGES:
        raise GraderError(f"{path}: language {language!r} is not supported "
                          "(supported: python, triton, cuda, cpp)")
    suffixes = NATIVE_SUFFIXES if language in NATIVE_LANGUAGES else (".py",)
    if not sep or not entry_file.endswith(suffixes) or not fn_name:
        raise GraderError(f"{path}: spec.entry_point {entry_point!r} must be '<file{suffixes[0]}>::<function>' "
                          f"for language {language}")
    sources = [{"path": s["path"], "content": s["content"]} for s in d.get("sources", [])]
    if entry_file not in {s["path"] for s in sources}:
        raise GraderError(f"{path}: entry file {entry_file!r} is not among the sources")
    definition = d.get("definition")
    if problem is not None and definition and definition not in (problem.name, problem.id):
        raise GraderError(f"{path}: solution is for definition {definition!r}, not {problem.id!r}")
    dps = destination_passing if destination_passing is not None else \
        bool(spec.get("destination_passing_style", True))  # FlashInfer-Bench's default
    payload = {"name": d.get("name", path.stem), "entry_point": entry_point, "sources": sources,
               "language": language}
    return SolutionRef(name=d.get("name", path.stem), loader=SOURCES_LOADER, payload=payload,
                       destination_passing=dps)


def solution_from_file(path, problem=None, *, destination_passing: bool | None = None,
                       entry: str = "run") -> SolutionRef:
    """A :class:`SolutionRef` for a solution file; the file is read here, never executed.

    - ``.py``: a module exporting ``run`` (or ``entry``). Return style unless ``destination_passing``
      says otherwise or the file sets ``DESTINATION_PASSING = True`` at module level.
    - ``.json``: a FlashInfer-Bench solution (``spec.entry_point`` ``"file.py::fn"`` or, for languages
      ``cuda``/``cpp``, ``"file.cu::fn"`` built with ``torch.utils.cpp_extension``; ``sources``;
      ``spec.destination_passing_style`` defaults to True, as in FlashInfer-Bench).

    Args:
        path: the solution file.
        problem: when given, a ``.json`` solution's ``definition`` must name it.
        destination_passing: overrides what the file declares.
        entry: the function a ``.py`` file exports.

    Raises:
        GraderError: missing file, an unsupported suffix (``.ucut`` is compiled by the CLI first), or a
            malformed ``.json`` solution.
    """
    p = Path(path).resolve()
    if not p.is_file():
        raise GraderError(f"solution file {path} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".py":
        return _from_python(p, destination_passing, entry)
    if suffix == ".json":
        return _from_flashinfer_json(p, problem, destination_passing)
    if suffix == ".ucut":
        raise GraderError(f"{path}: a .ucut program is compiled first (`ucutlass grade` does it); "
                          "the grader takes a SolutionRef from ucutlass.runtime")
    raise GraderError(f"{path}: cannot grade a {suffix or 'suffix-less'} file "
                      "(supported: .py exporting run, .json FlashInfer-Bench solution, .ucut via the CLI)")


__all__ = [
    "SolutionRef", "reference_solution", "resolve_loader", "load_python_file", "load_sources",
    "load_reference", "solution_from_file", "PYTHON_FILE_LOADER", "SOURCES_LOADER", "REFERENCE_LOADER",
    "DPS_MARKER", "build_cache_dir",
]
