"""The run-time side's layout (issue 15): ucutlass/bind/, ucutlass/runtime/ and ucutlass/solution.py import in
that order and never back (function-local imports counted), reach no higher stage (search, cli), use no other
file's private names, test a kernel's family only in their tables, and every public name that tests, scripts,
search and cli import from them is there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ucutlass"
FILES = sorted([*(ROOT / "bind").glob("*.py"), *(ROOT / "runtime").glob("*.py"), ROOT / "solution.py"])


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function, as an absolute name."""
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            mod = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def _stage(module: str) -> str | None:
    for stage in ("ucutlass.bind", "ucutlass.runtime", "ucutlass.solution", "ucutlass.search", "ucutlass.cli"):
        if module == stage or module.startswith(stage + "."):
            return stage
    return None


ORDER = ["ucutlass.bind", "ucutlass.runtime", "ucutlass.solution", "ucutlass.search", "ucutlass.cli"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: _module(p))
def test_imports_go_down_the_stages_only(path):
    mine = ORDER.index(_stage(_module(path)))
    for dep in _imports(path):
        stage = _stage(dep)
        if stage is not None:
            assert ORDER.index(stage) <= mine, f"{_module(path)} imports {dep}, a later stage"


@pytest.mark.parametrize("path", FILES, ids=lambda p: _module(p))
def test_no_private_name_of_another_file(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
            assert not private, f"{_module(path)} imports private {private} from {node.module}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: _module(p))
def test_modules_are_small_and_say_what_they_are(path):
    text = path.read_text()
    assert len(text.splitlines()) < 500
    assert ast.get_docstring(ast.parse(text)), f"{_module(path)} has no docstring"


def test_family_is_tested_only_in_the_tables():
    """``kernel.family == …`` nowhere: a family is a row of bind.BINDERS and runtime.LAUNCHERS."""
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value in
                                                     ("gemm", "grouped_gemm", "attention")
                                                     for c in [node.left, *node.comparators]):
                raise AssertionError(f"{_module(path)}:{node.lineno} compares with a family name")


def test_one_row_per_family_in_each_table():
    from ucutlass.bind import BINDERS
    from ucutlass.runtime import LAUNCHERS

    assert set(BINDERS) == set(LAUNCHERS) == {"gemm", "grouped_gemm", "attention"}
    assert all(cls.family == family for family, cls in LAUNCHERS.items())


def test_public_names_stay_importable():
    import ucutlass.bind as bind
    import ucutlass.runtime as runtime
    import ucutlass.solution as solution

    for name in ("CompiledKernel", "GroupedCompiledKernel", "AttentionCompiledKernel", "load_kernel",
                 "load_solution", "check_device", "device_mismatch", "TARGET_CAPABILITY", "TARGET_NAME",
                 "extent_values", "index_type_of", "extents_of", "SM90_SEQ_ALIGNMENT", "pick", "dispatch_callable",
                 "describe"):
        assert hasattr(runtime, name), name
    for name in ("bind", "Binding", "Slot", "slice_index", "slice_view", "resolve_alignment", "resolve_swap_ab",
                 "bind_attention", "AttentionBinding", "extents_of"):
        assert hasattr(bind, name), name
    assert solution.LOADER == "ucutlass.runtime:load_solution"  # part of every SolutionRef.key(): unchanged
    assert solution.load_solution is runtime.load_solution
