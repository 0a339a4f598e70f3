"""Where the tests find data that lives outside the repository."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Real SOL-ExecBench problems live beside the checkout (../shared, read-only); a clone elsewhere can point
# at them with UCUTLASS_SOL_EXECBENCH.
_CANDIDATES = [os.environ.get("UCUTLASS_SOL_EXECBENCH"), REPO.parent / "shared" / "sol-execbench",
               Path("/work/shared/sol-execbench")]
SHARED_SOL_EXECBENCH = next((Path(p) for p in _CANDIDATES if p and Path(p).is_dir()), Path(str(_CANDIDATES[1])))


def shrunk_problem(pid: str, consts: dict, axis: str | None, values: tuple, folder: Path):
    """A SOL-ExecBench problem made small: a copy of ``pid`` in ``folder`` with ``consts`` as its const axes and, when ``axis`` is given, workloads of
    ``values`` for it (the problem's first workload otherwise the same)."""
    import pytest

    from ucutlass.problem import find_problem

    src = SHARED_SOL_EXECBENCH / pid
    if not src.is_dir():
        pytest.skip(f"{pid} not found beside this clone")
    definition = json.loads((src / "definition.json").read_text())
    for name, value in consts.items():
        assert definition["axes"][name]["type"] == "const", name
        definition["axes"][name]["value"] = value
    folder.mkdir()
    (folder / "definition.json").write_text(json.dumps(definition))
    rows = [json.loads(line) for line in (src / "workload.jsonl").read_text().splitlines()]
    if axis:
        rows = [{**rows[0], "uuid": f"{rows[0]['uuid']}-{v}", "axes": {**rows[0]["axes"], axis: v}} for v in values]
    (folder / "workload.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return find_problem(str(folder))
