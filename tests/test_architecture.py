"""The package's shape (issue 15, docs/architecture.md): no import circles, no import from a later stage back into
an earlier one, no private name used across files, no kernel-family switch outside the tables, no long module
without a reason. Every import node counts: module-level, function-local and ``TYPE_CHECKING`` ones alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The folders installed as ucutlass's packages (pyproject.toml's package-dir).
ROOTS = {"ucutlass": REPO / "ucutlass", "ucutlass.search": REPO / "search", "ucutlass.grader": REPO / "grader"}
#: The stages in data-flow order (docs/architecture.md): a module imports only from its own stage or earlier ones.
#: A stage is a module or a package (prefix); the most specific prefix decides.
STAGES = [
    ("ucutlass", "ucutlass.errors", "ucutlass.paths"),  # ``ucutlass`` alone: the root package (its __version__)
    ("ucutlass.ir",),
    ("ucutlass.arch",),
    ("ucutlass.lang",),
    ("ucutlass.codegen",),
    ("ucutlass.build",),
    ("ucutlass.problem", "ucutlass.problem_files"),
    ("ucutlass.sol",),
    ("ucutlass.bind",),
    ("ucutlass.grader",),
    ("ucutlass.runtime",),
    ("ucutlass.emulate",),  # beside the runtime: the same bound call, run as torch ops
    ("ucutlass.solution",),
    ("ucutlass.init",),  # a program written from a problem's reference (issue 17): capture, partition, emit, check
    ("ucutlass.search",),
    ("ucutlass.agents",),  # for LLM agents: feedback documents, prompts, the MCP server (which runs the CLI)
    ("ucutlass.importers",),  # other benchmarks' files → problem folders (issue 17: KernelBench)
    ("ucutlass.cli", "ucutlass.__main__"),  # `python -m ucutlass` is the command line
]
#: Modules whose length is theirs to explain (out of issue 15's scope: the grader and the tuner).
LENGTH_EXEMPT = ("ucutlass.grader", "ucutlass.search")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, root in ROOTS.items():
        for f in sorted(root.rglob("*.py")):
            parts = [p for p in f.relative_to(root).with_suffix("").parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


MODULES = _modules()


def _target(module: str, node: ast.ImportFrom | ast.Import) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for each alias of ``node`` in ``module``."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if MODULES[module].name != "__init__.py":
            parts = parts[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    out = []
    for a in node.names:
        full = f"{base}.{a.name}"
        out.append((full, None) if full in MODULES else (base, a.name))
    return out


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, f in MODULES.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target, _ in _target(m, node):
                    t = _known(target)
                    if t and t != m:
                        graph[m].add(t)
                        # importing a.b.c runs a.b's __init__ too, unless the importer is inside a.b already
                        parent = t.rpartition(".")[0]
                        while parent in MODULES and not m.startswith(parent + ".") and parent != m:
                            graph[m].add(parent)
                            parent = parent.rpartition(".")[0]
    return graph


def _stage(module: str) -> int:
    best, rank = -1, None
    for i, names in enumerate(STAGES):
        for prefix in names:
            if (module == prefix or (module.startswith(prefix + ".") and prefix != "ucutlass")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, module
    return rank


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_every_kind_of_import():
    """The graph holds module-level, function-local, TYPE_CHECKING and relative imports (a test of the test)."""
    graph = _imports()
    assert "ucutlass.ir" in graph["ucutlass.lang.gemm"]                 # from ..ir import …
    assert "ucutlass.lang.lowering" in graph["ucutlass.lang.gemm"]      # under TYPE_CHECKING
    assert "ucutlass.search.measure" in graph["ucutlass.search"]        # function-local
    assert "ucutlass.arch" in graph["ucutlass.lang.gemm"]               # the package of a submodule's name
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert _cycles(_imports()) == []


def test_no_stage_imports_a_later_stage():
    graph = _imports()
    back = sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if _stage(t) > _stage(m))
    assert back == [], "imports from an earlier stage into a later one:\n" + "\n".join(back)


def _private_uses(module: str, tree: ast.AST) -> list[str]:
    out = []
    here = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for target, name in _target(module, node):
            t = _known(target)
            if t is None or t == module:
                continue
            if name and name.startswith("_") and not name.startswith("__"):
                out.append(f"{module}: from {t} import {name}")
            # a private module (_common.py) is its package's own
            leaf = t.rpartition(".")[2]
            if leaf.startswith("_") and not t.startswith(here + ".") and t.rpartition(".")[0] != here:
                out.append(f"{module}: imports {t}, private to {t.rpartition('.')[0]}")
    return out


def test_no_private_name_is_used_across_files():
    found = [u for m, f in MODULES.items() for u in _private_uses(m, ast.parse(f.read_text()))]
    assert found == [], "\n".join(found)


def _family_switches(tree: ast.AST) -> list[int]:
    """Lines that compare a ``family`` with a string (``kernel.family == "gemm"``): a table's job."""
    def is_family(n):
        return (isinstance(n, ast.Attribute) and n.attr == "family") or (isinstance(n, ast.Name) and n.id == "family")

    def is_text(n):
        return (isinstance(n, ast.Constant) and isinstance(n.value, str)) or \
            (isinstance(n, (ast.Tuple, ast.List, ast.Set)) and all(is_text(e) for e in n.elts))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_family(s) for s in sides) and any(is_text(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_no_family_switch_outside_the_tables():
    found = [f"{m}:{line}" for m, f in MODULES.items() if not m.startswith(LENGTH_EXEMPT)
             for line in _family_switches(ast.parse(f.read_text()))]
    assert found == [], "compare a kernel's family in a table (family → module), not with ==:\n" + "\n".join(found)


@pytest.mark.parametrize("module", [m for m in MODULES if not m.startswith(LENGTH_EXEMPT)])
def test_a_long_module_says_why(module):
    text = MODULES[module].read_text()
    lines = text.count("\n")
    if lines > MAX_LINES:
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert "Length:" in doc, f"{module} has {lines} lines: split it, or say why at its top (a 'Length:' line)"


def test_the_grader_does_not_import_the_compiler():
    """The grader grades a callable or a solution file (DESIGN.md): it reads problems and T_SOL, nothing of the
    compiler's stages, so it grades hand-written CUDA, Triton or torch alike."""
    graph = _imports()
    used = sorted({t for m, ts in graph.items() if m.startswith("ucutlass.grader") for t in ts
                   if not t.startswith("ucutlass.grader")})
    assert set(used) <= {"ucutlass", "ucutlass.errors", "ucutlass.problem", "ucutlass.sol"} | \
        {m for m in MODULES if m.startswith("ucutlass.sol.")}, used


def test_every_stage_has_one_row_per_family():
    """A family is a row of each stage's table (docs/architecture.md, "Adding a kernel family")."""
    from ucutlass import codegen
    from ucutlass.bind import BINDERS
    from ucutlass.codegen.abi import ABIS
    from ucutlass.lang import FAMILIES
    from ucutlass.lang.lower import LOWERINGS
    from ucutlass.emulate import EMULATORS
    from ucutlass.runtime import LAUNCHERS

    families = set(FAMILIES)
    assert families == {"gemm", "grouped_gemm", "attention", "conv"}
    for table in (LOWERINGS, codegen.TEMPLATE_VALUES, ABIS, BINDERS, LAUNCHERS, EMULATORS):
        assert set(table) == families, table
    assert {f for f, _ in codegen.TEMPLATES} == families
    assert all(cls.family == family for table in (LAUNCHERS, EMULATORS) for family, cls in table.items())


def test_public_names_of_the_run_time_stay_importable():
    """The names tests, scripts, the tuner and the CLI import from the run-time side, and the grader's loader
    string (part of every SolutionRef.key()), are unchanged by the move."""
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
    assert solution.LOADER == "ucutlass.runtime:load_solution"
    assert solution.load_solution is runtime.load_solution
