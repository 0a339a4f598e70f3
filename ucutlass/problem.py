"""Problems in the SOL-ExecBench / FlashInfer-Bench format: ``definition.json`` + ``workload.jsonl``.

A problem id is its folder name. :func:`find_problem` looks in the problems shipped with ucutlass, in
folders named by ``--problems DIR`` and in the ``UCUTLASS_PROBLEMS`` environment variable
(``os.pathsep``-separated); a path to a problem folder also works.

Semantics follow SOL-ExecBench (``sol_execbench/bench/utils.py``, ``data/definition.py``):

- axes are ``const`` (``value``), ``var`` (given per workload) or ``expr`` (an arithmetic
  ``expression`` over other axes);
- a workload input is ``random`` (``torch.randn`` for floating tensors, a random scalar for shape-less
  inputs, ``randint`` for integer tensors), ``scalar`` (its ``value``) or ``custom``; when the
  definition names a ``custom_inputs_entrypoint``, that function of the reference source makes *all*
  inputs from ``{**axes, **scalar_inputs}`` and a device;
- tolerance: an element matches when ``|x − y| ≤ atol + rtol·|y|``; a workload passes when the matched
  fraction ≥ ``required_matched_ratio``. Defaults where a workload gives none (the FlashInfer-Bench
  ones): ``max_atol = max_rtol = 1e-2``, ``required_matched_ratio = 0.99``. Both spellings
  ``required_matched_ratio`` and ``required_match_ratio`` are read (all L2 workloads use the second,
  which SOL-ExecBench's own loader ignores).
"""

from __future__ import annotations

import json
import os
import types
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from . import problem_files
from .errors import ProblemError

#: SOL-ExecBench's defaults for workloads without a ``tolerance`` field.
DEFAULT_ATOL = 1e-2
DEFAULT_RTOL = 1e-2
DEFAULT_MATCHED_RATIO = 0.99

ENV_PROBLEM_DIRS = "UCUTLASS_PROBLEMS"

_FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64"}
_FP8_DTYPES = {"float8_e4m3fn", "float8_e5m2"}
_INT_RANGES = {"int8": (-128, 128), "int16": (-1024, 1024), "int32": (-1024, 1024), "int64": (-1024, 1024)}


def torch_dtype(name: str):
    """The ``torch.dtype`` for a definition's dtype string (``"bfloat16"`` → ``torch.bfloat16``).

    Raises:
        ProblemError: unknown dtype name.
    """
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ProblemError(f"unknown dtype {name!r} (expected a torch dtype name such as 'bfloat16')")
    return dt


@dataclass(frozen=True)
class Axis:
    """One axis of a definition: ``kind`` is ``const``, ``var`` or ``expr``."""

    name: str
    kind: str
    value: int | None = None
    expression: str | None = None
    description: str = ""


@dataclass(frozen=True)
class TensorSpec:
    """An input or output of a definition. ``shape`` is a tuple of axis names, or None for a scalar."""

    name: str
    shape: tuple[str, ...] | None
    dtype: str
    description: str = ""

    @property
    def is_scalar(self) -> bool:
        return self.shape is None


@dataclass(frozen=True)
class Tolerance:
    """SOL-ExecBench tolerance: element matches when ``|x − y| ≤ max_atol + max_rtol·|y|``."""

    max_atol: float = DEFAULT_ATOL
    max_rtol: float = DEFAULT_RTOL
    required_matched_ratio: float = DEFAULT_MATCHED_RATIO
    from_workload: bool = False  # False when SOL-ExecBench's defaults filled it in

    def to_json(self) -> dict:
        return {"max_atol": self.max_atol, "max_rtol": self.max_rtol,
                "required_matched_ratio": self.required_matched_ratio,
                "source": "workload" if self.from_workload else "default"}


@dataclass(frozen=True)
class Workload:
    """One line of ``workload.jsonl``: the var axes, how to make each input, and the tolerance."""

    uuid: str
    index: int
    axes: Mapping[str, int]
    inputs: Mapping[str, Mapping[str, Any]]
    tolerance: Tolerance

    def label(self) -> str:
        """Short human label, e.g. ``M=256`` or ``batch_size=4,seq_len=128``."""
        return ",".join(f"{k}={v}" for k, v in self.axes.items()) or self.uuid[:8]

    def scalar_inputs(self) -> dict[str, Any]:
        """Inputs given as ``{"type": "scalar", "value": …}``."""
        return {k: v["value"] for k, v in self.inputs.items() if v.get("type") == "scalar"}


# Bounded: an axis expression can neither hang nor exhaust memory (issue 19); see ucutlass.problem_files.
eval_axis_expression = problem_files.eval_axis_expression


@dataclass(frozen=True)
class Problem:
    """A loaded problem: definition plus workloads.

    Attributes:
        id: the folder name (what ``ucutlass tune ID`` takes).
        path: the folder.
        inputs / outputs: in definition order (the reference's positional order).
        reference_source: Python source defining ``run(...)`` (and the custom-inputs entry point).
        spec_path: the problem's ``kernel.ucut``, when it ships one.
    """

    id: str
    name: str
    path: Path
    description: str
    axes: Mapping[str, Axis]
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    reference_source: str
    custom_inputs_entrypoint: str | None
    workloads: tuple[Workload, ...]
    spec_path: Path | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    # --- axes and shapes ---------------------------------------------------------------------------

    def resolve_axes(self, workload: Workload | Mapping[str, int]) -> dict[str, int]:
        """All axis values for a workload: const, var (from the workload) and expr.

        Raises:
            ProblemError: a var axis missing from the workload, or an expr that cannot be evaluated.
        """
        given = workload.axes if isinstance(workload, Workload) else workload
        values: dict[str, int] = {}
        for name, ax in self.axes.items():
            if ax.kind == "const":
                values[name] = int(ax.value)  # type: ignore[arg-type]
            elif ax.kind == "var":
                if name in given:
                    values[name] = int(given[name])
        for name, v in given.items():
            values.setdefault(name, int(v))
        pending = [ax for ax in self.axes.values() if ax.kind == "expr"]
        for _ in range(len(pending) + 1):  # exprs may refer to each other in any order
            still = []
            for ax in pending:
                try:
                    values[ax.name] = eval_axis_expression(ax.expression or "", values)
                except ProblemError:
                    still.append(ax)
            pending = still
        if pending:
            eval_axis_expression(pending[0].expression or "", values)  # raises with the reason
        missing = [n for n, ax in self.axes.items() if ax.kind == "var" and n not in values]
        if missing:
            raise ProblemError(f"{self.id}: workload gives no value for var axes {missing}")
        return values

    def shape(self, spec: TensorSpec, axes: Mapping[str, int]) -> tuple[int, ...] | None:
        """Concrete shape of an input or output under resolved ``axes`` (None for a scalar)."""
        if spec.shape is None:
            return None
        try:
            return tuple(int(d) if isinstance(d, int) or str(d).isdigit() else int(axes[d]) for d in spec.shape)
        except KeyError as e:
            raise ProblemError(f"{self.id}: {spec.name} uses unknown axis {e.args[0]!r}") from None

    def input_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        axes = self.resolve_axes(workload)
        return {n: self.shape(s, axes) for n, s in self.inputs.items()}

    def output_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        axes = self.resolve_axes(workload)
        return {n: self.shape(s, axes) for n, s in self.outputs.items()}

    # --- reference and inputs ----------------------------------------------------------------------

    def reference_module(self) -> types.ModuleType:
        """Execute the reference source into a fresh module (``run`` and helpers live there).

        Raises:
            ProblemError: the source does not execute or defines no ``run``.
        """
        mod = types.ModuleType(f"ucutlass_reference_{self.id}")
        mod.__file__ = str(self.path / "definition.json")
        try:
            exec(compile(self.reference_source, f"<{self.id} reference>", "exec"), mod.__dict__)
        except Exception as e:  # the reference is data: report, don't crash the caller's process
            raise ProblemError(f"{self.id}: reference source fails to load: {type(e).__name__}: {e}") from e
        if not callable(getattr(mod, "run", None)):
            raise ProblemError(f"{self.id}: reference source defines no run(...)")
        return mod

    def make_inputs(self, workload: Workload, *, device: Any = "cpu", seed: int | None = None,
                    module: types.ModuleType | None = None) -> dict[str, Any]:
        """Generate one set of inputs, in definition order, as SOL-ExecBench does.

        Args:
            workload: which workload.
            device: torch device (``"cuda"``, ``"cpu"`` or ``"meta"`` to only get shapes and dtypes; on
                ``"meta"`` the shapes and dtypes come from the definition, and a custom entry point is not
                called: entry points may compute on their data, e.g. quantize or call ``.item()``).
            seed: seeds torch's generators first (same seed, same device → same inputs).
            module: a loaded :meth:`reference_module` to reuse (custom-inputs problems).

        Returns:
            ``{input name: tensor or Python scalar}`` in definition order.

        Raises:
            ProblemError: unknown input type, a custom entry point that returns the wrong names or shapes.
        """
        import torch

        if seed is not None:
            torch.manual_seed(seed)
            if torch.cuda.is_available():
                torch.cuda.manual_seed_all(seed)
        dev = torch.device(device)
        axes = self.resolve_axes(workload)
        kinds = {n: workload.inputs.get(n, {"type": "random"}).get("type", "random") for n in self.inputs}
        if self.custom_inputs_entrypoint and dev.type != "meta":
            mod = module or self.reference_module()
            fn = getattr(mod, self.custom_inputs_entrypoint, None)
            if not callable(fn):
                raise ProblemError(f"{self.id}: custom_inputs_entrypoint "
                                   f"{self.custom_inputs_entrypoint!r} is not defined in the reference")
            made = fn({**axes, **workload.scalar_inputs()}, dev)
            if not isinstance(made, dict):
                raise ProblemError(f"{self.id}: {self.custom_inputs_entrypoint} returned "
                                   f"{type(made).__name__}, expected a dict")
            out: dict[str, Any] = {}
            for name, spec in self.inputs.items():
                if name not in made:
                    raise ProblemError(f"{self.id}: {self.custom_inputs_entrypoint} made no input {name!r}")
                value = made[name]
                want = self.shape(spec, axes)
                if want is not None and tuple(value.shape) != want:
                    raise ProblemError(f"{self.id}: custom input {name!r} has shape {tuple(value.shape)},"
                                       f" definition says {want}")
                out[name] = value
            return out
        out = {}
        for name, spec in self.inputs.items():
            kind = kinds[name]
            if kind == "scalar":
                out[name] = workload.inputs[name]["value"]
            elif kind == "random" or (kind == "custom" and dev.type == "meta" and self.custom_inputs_entrypoint):
                out[name] = random_value(self.shape(spec, axes), torch_dtype(spec.dtype), dev)
            elif kind == "custom":
                raise ProblemError(f"{self.id}: input {name!r} is 'custom' but the definition has no "
                                   "custom_inputs_entrypoint")
            else:
                raise ProblemError(f"{self.id}: input {name!r} has unsupported type {kind!r} "
                                   "(supported: random, scalar, custom)")
        return out

    def run_reference(self, inputs: Mapping[str, Any], module: types.ModuleType | None = None) -> dict[str, Any]:
        """Call the reference ``run`` positionally in definition order; outputs by name.

        Raises:
            ProblemError: the reference returns a different number of outputs than the definition.
        """
        import torch

        mod = module or self.reference_module()
        with torch.no_grad():
            result = mod.run(*[inputs[n] for n in self.inputs])
        return self.name_outputs(result)

    def name_outputs(self, result: Any) -> dict[str, Any]:
        """Map a ``run`` return value (tensor, tuple/list or dict) to ``{output name: value}``."""
        names = list(self.outputs)
        if isinstance(result, dict):
            return {k: result[k] for k in names if k in result}
        if isinstance(result, (tuple, list)):
            if len(result) != len(names):
                raise ProblemError(f"{self.id}: run returned {len(result)} values, definition has "
                                   f"{len(names)} outputs {names}")
            return dict(zip(names, result))
        if len(names) != 1:
            raise ProblemError(f"{self.id}: run returned one value, definition has outputs {names}")
        return {names[0]: result}

    def summary(self) -> dict:
        """JSON-able overview (id, axes, inputs, outputs, workload count)."""
        return {
            "id": self.id, "name": self.name, "path": str(self.path),
            "axes": {n: {"type": a.kind, "value": a.value, "expression": a.expression} for n, a in self.axes.items()},
            "inputs": {n: {"shape": s.shape, "dtype": s.dtype} for n, s in self.inputs.items()},
            "outputs": {n: {"shape": s.shape, "dtype": s.dtype} for n, s in self.outputs.items()},
            "workloads": len(self.workloads),
            "spec": str(self.spec_path) if self.spec_path else None,
        }


def random_value(shape, dtype, device):
    """A random tensor of ``shape`` and ``dtype`` on ``device`` as the workloads' ``random`` inputs are made (a
    Python number when ``shape`` is None: a scalar input)."""
    import torch

    name = str(dtype).replace("torch.", "")
    if shape is None:
        return random_value((), dtype, torch.device("cpu")).item() if device.type != "meta" else 1.0
    if device.type == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    if name in _FLOAT_DTYPES:
        return torch.randn(shape, dtype=dtype, device=device)
    if name in _FP8_DTYPES:
        return torch.randn(shape, dtype=torch.float32, device=device).clamp_(-2.0, 2.0).to(dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, dtype=torch.bool, device=device)
    if name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        return torch.randint(lo, hi, shape, dtype=dtype, device=device)
    raise ProblemError(f"no random generator for dtype {name}")


# --- loading -------------------------------------------------------------------------------------------

def _tolerance(raw: Mapping[str, Any] | None) -> Tolerance:
    if not raw:
        return Tolerance()
    ratio = raw.get("required_matched_ratio", raw.get("required_match_ratio", DEFAULT_MATCHED_RATIO))
    return Tolerance(max_atol=float(raw.get("max_atol", DEFAULT_ATOL)),
                     max_rtol=float(raw.get("max_rtol", DEFAULT_RTOL)),
                     required_matched_ratio=float(ratio), from_workload=True)


def _tensor_specs(raw: Mapping[str, Any], where: str) -> dict[str, TensorSpec]:
    specs = {}
    for name, d in raw.items():
        if "dtype" not in d:
            raise ProblemError(f"{where}: {name!r} has no dtype")
        shape = d.get("shape")
        specs[name] = TensorSpec(name=name, shape=None if shape is None else tuple(shape),
                                 dtype=d["dtype"], description=d.get("description", ""))
    return specs


def load_problem(path: str | os.PathLike | resources.abc.Traversable) -> Problem:
    """Load a problem folder holding ``definition.json`` and ``workload.jsonl`` (and maybe ``kernel.ucut``).

    Raises:
        ProblemError: a file is missing or malformed (the message names the file and line).
    """
    folder = Path(str(path))
    dfile, wfile = folder / "definition.json", folder / "workload.jsonl"
    if not dfile.is_file():
        raise ProblemError(f"{folder}: no definition.json (a problem folder holds definition.json + workload.jsonl)")
    if not wfile.is_file():
        raise ProblemError(f"{folder}: no workload.jsonl")
    try:
        d = json.loads(problem_files.read_text(dfile))
    except json.JSONDecodeError as e:
        raise ProblemError(f"{dfile}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:
        raise ProblemError(f"{dfile}: invalid JSON: nested too deeply") from None
    problem_files.check_definition(d, str(dfile))  # every field's type, extents, dtypes, before any use
    axes = {}
    for name, a in d["axes"].items():
        value = a.get("value")
        axes[name] = Axis(name=name, kind=a["type"], value=None if value is None else int(value),
                          expression=a.get("expression"), description=str(a.get("description", "")))
    workloads = []
    for lineno, line in enumerate(problem_files.read_text(wfile).splitlines(), 1):
        if not line.strip():
            continue
        try:
            w = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProblemError(f"{wfile}:{lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        except RecursionError:
            raise ProblemError(f"{wfile}:{lineno}: invalid JSON: nested too deeply") from None
        problem_files.check_workload(w, f"{wfile}:{lineno}", axes)
        workloads.append(Workload(uuid=w.get("uuid", f"line{lineno}"), index=len(workloads),
                                  axes={k: int(v) for k, v in w.get("axes", {}).items()},
                                  inputs=dict(w.get("inputs", {})), tolerance=_tolerance(w.get("tolerance"))))
    if not workloads:
        raise ProblemError(f"{wfile}: no workloads")
    spec = folder / "kernel.ucut"
    known = {"name", "description", "axes", "inputs", "outputs", "reference", "custom_inputs_entrypoint"}
    return Problem(
        id=folder.name, name=d.get("name", folder.name), path=folder, description=d.get("description", ""),
        axes=axes, inputs=_tensor_specs(d["inputs"], str(dfile)),
        outputs=_tensor_specs(d["outputs"], str(dfile)), reference_source=d["reference"],
        custom_inputs_entrypoint=d.get("custom_inputs_entrypoint"), workloads=tuple(workloads),
        spec_path=spec if spec.is_file() else None,
        extra={k: v for k, v in d.items() if k not in known},
    )


def shipped_problems_dir() -> Path:
    """The folder of problems shipped with ucutlass (package data ``ucutlass.problems``)."""
    return Path(str(resources.files("ucutlass.problems")))


def problem_dirs(extra: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """Folders searched for problem ids, in order: ``extra``, ``$UCUTLASS_PROBLEMS``, the shipped ones."""
    dirs = [Path(p) for p in extra]
    env = os.environ.get(ENV_PROBLEM_DIRS, "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs.append(shipped_problems_dir())
    return dirs


def list_problems(extra: Iterable[str | os.PathLike] = ()) -> list[tuple[str, Path]]:
    """``(id, folder)`` of every problem found in :func:`problem_dirs`; earlier folders win on clashes."""
    seen: dict[str, Path] = {}
    for d in problem_dirs(extra):
        if not d.is_dir():
            continue
        for sub in sorted(d.iterdir()):
            if (sub / "definition.json").is_file() and sub.name not in seen:
                seen[sub.name] = sub
    return sorted(seen.items())


def find_problem(id_or_path: str | os.PathLike, extra: Sequence[str | os.PathLike] = ()) -> Problem:
    """Load a problem by id (folder name) from :func:`problem_dirs`, or by a path to its folder; an id's start up
    to a ``_`` (``L1_048``) names the one problem whose id begins with it.

    Raises:
        ProblemError: not found; the message lists the folders searched and close ids.
    """
    p = Path(id_or_path)
    if (p / "definition.json").is_file():
        return load_problem(p)
    for d in problem_dirs(extra):
        cand = d / str(id_or_path)
        if (cand / "definition.json").is_file():
            return load_problem(cand)
    import difflib

    listed = list_problems(extra)
    ids = [i for i, _ in listed]
    # A SOL-ExecBench id's number alone (`L1_048` for L1_048_fused_gate_up_projection_with_swiglu): the one folder
    # it names, when exactly one id starts with it and "_".
    prefixed = [(i, path) for i, path in listed if i.startswith(f"{id_or_path}_")]
    if len(prefixed) == 1 and (Path(prefixed[0][1]) / "definition.json").is_file():
        return load_problem(Path(prefixed[0][1]))
    if len(prefixed) > 1:
        raise ProblemError(f"problem {str(id_or_path)!r} is the start of {len(prefixed)} ids: "
                           f"{', '.join(i for i, _ in prefixed[:10])}; give the whole id")
    # a SOL-ExecBench number that is not there (`L2_46`): the ids of that level with the nearest numbers first
    import re

    typed = re.fullmatch(r"([A-Za-z0-9-]+)_(\d+)", str(id_or_path))
    numbered = [(abs(int(m.group(2)) - int(typed.group(2))), i) for i in ids if typed and
                (m := re.match(r"([A-Za-z0-9-]+)_(\d+)_", i)) and m.group(1).lower() == typed.group(1).lower()]
    close = [i for _, i in sorted(numbered)[:3]]
    close = (close + [i for i in difflib.get_close_matches(str(id_or_path), ids, n=5, cutoff=0.3)
                      if i not in close])[:5]
    searched = ", ".join(str(d) + ("" if d.is_dir() else " (does not exist)") for d in problem_dirs(extra))
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known ids: {', '.join(ids) or 'none'}"
    raise ProblemError(f"no problem {str(id_or_path)!r} (searched {searched}; add folders with --problems DIR "
                       f"or ${ENV_PROBLEM_DIRS}, in Python find_problem(id, extra=[DIR]), or give a problem "
                       f"folder's path){hint}")
