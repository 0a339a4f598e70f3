"""``ucutlass import kernelbench FILE.py``: a KernelBench problem as a SOL-ExecBench problem folder.

A KernelBench file (github.com/ScalingIntelligence/KernelBench, ``KernelBench/level*/N_Name.py``) defines
``class Model(nn.Module)``, ``get_init_inputs()`` (the constructor's arguments), ``get_inputs()`` (the forward's
tensors) and module-level globals for the sizes (``batch_size = 128``). The import writes
``definition.json`` + ``workload.jsonl`` (the format :func:`ucutlass.problem.load_problem` reads):

- **inputs**: the forward's arguments, then every parameter and buffer the forward reads
  (``linear.weight`` → ``linear_weight``);
- **reference**: ``run(inputs…, parameters…)``, the forward translated to functional torch calls
  (:mod:`ucutlass.importers.functional`; checked against ``Model`` on the CPU, at the file's sizes or with its
  large globals halved until the tensors are small: ``definition.json``'s ``kernelbench.checked``), and
  a ``get_inputs(axes, device)`` entry point that makes every input: ``randn`` for the forward's tensors,
  ``randn / sqrt(fan_in)`` for weights of two or more dimensions (the scale of torch's default
  ``kaiming_uniform_`` init, so deep models stay finite), ``rand + 0.5`` for running variances, ``randn`` for the
  rest;
- **axes**: one per distinct tensor dimension, found by doubling each int global alone in the probe; a
  dimension that follows a global is named after it (``batch_size``), any other after its first tensor
  (``output_d2``); an axis is ``var`` when a ``--scale``d global moves it, else ``const``;
- **workloads**: the file's sizes, or one per factor of ``--scale AXIS=F1,F2,…`` (products of several
  ``--scale`` options); ``--dtype bfloat16`` makes the float32 tensors bfloat16. A global the forward bakes in as a
  constant (``num_groups``, ``kernel_size``, a reshape size) cannot be scaled: the probe traces the model again at
  every scaled size and refuses sizes where the traced code differs;
- **tolerance**: KernelBench's check, ``torch.allclose(atol=rtol=1e-2)`` over every element
  (KernelBench v0/v0.1 for fp32, ``get_tolerance_for_precision`` for bf16/fp16).

The file is untrusted code: it runs only in a child process (:mod:`ucutlass.importers.probe`) with a timeout.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import ProblemError
from ..problem import Problem, load_problem

#: KernelBench's allclose tolerance (src/kernelbench/eval.py: v0/v0.1 fp32 1e-2; bf16/fp16 1e-2).
TOLERANCE = {"max_atol": 1e-2, "max_rtol": 1e-2, "required_matched_ratio": 1.0}
DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16"}
DEFAULT_TIMEOUT_S = 120.0
_UUID_NS = uuid.UUID("5b0c1e57-6b1d-4c8a-9a57-0b6b0e1c2d3f")


class ImportProblemError(ProblemError):
    """A KernelBench file that cannot be imported (the message says which part and why)."""


def parse_scale(items: Sequence[str]) -> dict[str, list[float]]:
    """``["batch_size=0.5,2", "dim=0.25"]`` → ``{"batch_size": [0.5, 2.0], "dim": [0.25]}``.

    Raises:
        ImportProblemError: not ``NAME=FACTOR[,FACTOR…]`` with positive factors.
    """
    out: dict[str, list[float]] = {}
    for item in items:
        name, eq, rest = item.partition("=")
        try:
            factors = [float(f) for f in rest.split(",")] if eq else []
        except ValueError:
            factors = []
        if not name.isidentifier() or not factors or any(not (f > 0 and math.isfinite(f)) for f in factors):
            raise ImportProblemError(f"--scale {item!r}: expected GLOBAL=FACTOR[,FACTOR…] with positive factors, "
                                     "e.g. --scale batch_size=0.25")
        out[name] = factors
    return out


def run_probe(path: Path, request: dict, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """Run :mod:`ucutlass.importers.probe` on ``path`` in a child process (no GPU, its own temp folder).

    Raises:
        ImportProblemError: the probe's error, a timeout, or a child that died.
    """
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([pkg_root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="ucutlass-kbprobe-") as tmp:
        answer_path = Path(tmp) / "answer.json"
        # its own session: a timeout kills the file's children too
        proc = subprocess.Popen([sys.executable, "-m", "ucutlass.importers.probe"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp, env=env,
                                start_new_session=True)
        try:
            _, err = proc.communicate(json.dumps({**request, "path": str(path.resolve()),
                                                  "answer_path": str(answer_path)}), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise ImportProblemError(f"{path}: the probe (running the file, building Model on the meta device) ran "
                                     f"longer than {timeout_s:g} s and was stopped") from None
        finally:
            _kill_group(proc)
        try:
            answer = json.loads(answer_path.read_text())
        except (OSError, json.JSONDecodeError):
            tail = (err or "").strip().splitlines()[-3:]
            raise ImportProblemError(f"{path}: the probe exited with status {proc.returncode} and no answer"
                                     + (": " + " | ".join(tail) if tail else "")) from None
    if not answer.get("ok"):
        raise ImportProblemError(f"{path}: {answer.get('error')}")
    return answer


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the probe's process group (the file may have started processes of its own) and reap the probe."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def infer_axes(answer: dict, scaled: Sequence[str]) -> tuple[dict, dict[tuple[str, int], str]]:
    """Axes of the definition and which axis each ``(tensor name, dim)`` is, from the probe's answer.

    Returns:
        ``(axes, where)``: ``axes`` in definition.json form; ``where[(tensor, i)]`` the axis of that dim.
    """
    names = _tensor_names(answer)
    ints = answer["globals"]
    pert = [g for g, v in answer["perturbed"].items() if v is not None]

    def dims(config: dict) -> dict[tuple[str, int], int]:
        out = {}
        for part in ("inputs", "params", "outputs"):
            for name, d in zip(names[part], config[part]):
                for i, s in enumerate(d["shape"] or []):
                    out[(name, i)] = s
        return out

    base = dims(answer["base"])
    per = {g: dims(answer["perturbed"][g]) for g in pert}
    sig = {k: (v, *(per[g].get(k) for g in pert)) for k, v in base.items()}
    global_sig = {(ints[g], *(2 * ints[g] if h == g else ints[g] for h in pert)): g for g in reversed(pert)}
    loads = [dims(w) for w in answer["workloads"]]
    axes: dict[str, dict] = {}
    by_sig: dict[tuple, str] = {}
    where: dict[tuple[str, int], str] = {}
    for key, s in sig.items():
        if s not in by_sig:
            name = global_sig.get(s) or f"{key[0]}_d{key[1]}"
            values = {w[key] for w in loads}
            moved = any(s[1 + pert.index(g)] != s[0] for g in scaled if g in pert)
            axes[name] = {"type": "var"} if moved or len(values) > 1 else {"type": "const", "value": values.pop()}
            by_sig[s] = name
        where[key] = by_sig[s]
    for w in loads:  # two dims that agree at every probed size must agree at the workloads' sizes too
        seen: dict[str, int] = {}
        for key, v in w.items():
            if seen.setdefault(where[key], v) != v:
                raise ImportProblemError(f"dimension {key[1]} of {key[0]} and axis {where[key]} differ at a scaled "
                                         "size; scale the globals they depend on together")
    return axes, where


def _tensor_names(answer: dict) -> dict[str, list[str]]:
    tr = answer["translation"]
    n_out = len(answer["base"]["outputs"])
    outs = ["output"] if n_out == 1 else [f"output{i}" for i in range(n_out)]
    return {"inputs": tr["inputs"], "params": [a for a, _ in tr["params"]], "outputs": outs}


def _init_expr(name: str, qual: str, d: dict, dims: list[str], role: str) -> str:
    """The Python expression the reference's ``get_inputs`` makes one input with (``dims``: axis names)."""
    if d["shape"] is None:
        return repr(d["value"])
    if not d["dtype"].startswith(("float", "bfloat")):
        raise ImportProblemError(f"{role} {name!r} is {d['dtype']}: its value range is whatever the file's code "
                                 "makes, which the import cannot reproduce (only floating tensors are supported)")
    sizes = [f'axes["{s}"]' for s in dims]
    shape = "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
    make = f"torch.{{}}({shape}, dtype=torch.{d['dtype']}, device=device)"
    if role == "parameter" and qual.endswith("running_var"):
        return make.format("rand") + " + 0.5"
    if role == "parameter" and len(sizes) >= 2:
        return make.format("randn") + f" / math.sqrt({' * '.join(sizes[1:])})"
    return make.format("randn")


def build_definition(answer: dict, name: str, source_file: str, scaled: Sequence[str]) -> tuple[dict, list[dict]]:
    """``(definition.json, axes of each workload)`` from the probe's answer."""
    axes, where = infer_axes(answer, scaled)
    names = _tensor_names(answer)
    first = answer["workloads"][0]
    quals = dict(answer["translation"]["params"])
    inputs, outputs, makers = {}, {}, []
    for part, role in (("inputs", "input"), ("params", "parameter")):
        for n, d in zip(names[part], first[part]):
            shape = None if d["shape"] is None else [where[(n, i)] for i in range(len(d["shape"]))]
            inputs[n] = {"shape": shape, "dtype": d["dtype"],
                         "description": f"Model parameter/buffer self.{quals[n]}" if role == "parameter"
                         else "Model.forward argument"}
            makers.append(f'        "{n}": {_init_expr(n, quals.get(n, n), d, shape or [], role)},')
    for n, d in zip(names["outputs"], first["outputs"]):
        if d["shape"] is None:
            raise ImportProblemError(f"Model.forward returns a Python number as {n}: outputs must be tensors")
        outputs[n] = {"shape": [where[(n, i)] for i in range(len(d["shape"]))], "dtype": d["dtype"]}
    tr = answer["translation"]
    mods = ", ".join(f"self.{q}: {t}" for q, t in tr["modules"].items()) or "none"
    from .functional import HEADER

    reference = (f'"""KernelBench {source_file}: Model.forward as functional torch (ucutlass import kernelbench, '
                 f'torch.fx).\nTranslated modules: {mods}."""\nimport math\n' + HEADER + "\n\n"
                 "def get_inputs(axes_and_scalars, device):\n"
                 '    """Every input of run(): the forward\'s tensors, then the Model\'s parameters and buffers."""\n'
                 "    axes = axes_and_scalars\n    return {\n" + "\n".join(makers) + "\n    }\n\n\n" + tr["source"])
    definition = {"name": name, "description": (answer["doc"] or f"KernelBench {source_file}").strip(),
                  "axes": axes, "custom_inputs_entrypoint": "get_inputs",
                  "inputs": inputs, "outputs": outputs, "reference": reference}
    per_load = []
    for w in answer["workloads"]:
        vals = {}
        for part in ("inputs", "params", "outputs"):
            for n, d in zip(names[part], w[part]):
                for i, s in enumerate(d["shape"] or []):
                    vals[where[(n, i)]] = s
        per_load.append({k: v for k, v in vals.items() if axes[k]["type"] == "var"})
    return definition, per_load


def import_kernelbench(path: str | os.PathLike, out: str | os.PathLike | None = None, *,
                       scale: Mapping[str, Sequence[float]] | None = None, dtype: str | None = None,
                       timeout_s: float = DEFAULT_TIMEOUT_S, check_max_elements: int = 1 << 22) -> Problem:
    """Import a KernelBench file as a problem folder and load it back.

    Args:
        path: the KernelBench ``.py`` file.
        out: the problem folder to write (default ``./kernelbench_<file stem>``); its name is the problem id.
        scale: ``{int global: [factors]}``: one workload per combination, each global ``round(value·factor)``
            (a factor that rounds a global to 0, or two factors that give the same size, are errors).
        dtype: ``bf16``/``bfloat16`` or ``fp16``/``float16``: float32 tensors become that dtype.
        timeout_s: the probe's time limit, seconds.
        check_max_elements: compare the translation with ``Model`` on the CPU when all tensors together have at
            most this many elements.

    Raises:
        ImportProblemError: the file, a module, a size or an option that cannot be imported (says which, why).
    """
    src = Path(path)
    if not src.is_file():
        raise ImportProblemError(f"{src}: no such file")
    if dtype is not None and dtype not in DTYPES:
        raise ImportProblemError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    scale = dict(scale or {})
    stem = re.sub(r"\W", "_", src.stem)
    folder = Path(out) if out is not None else Path(f"kernelbench_{stem}")
    answer = run_probe(src, {"scale": scale, "dtype": DTYPES.get(dtype or ""),
                             "check_max_elements": check_max_elements}, timeout_s)
    try:
        definition, per_load = build_definition(answer, stem, src.name, list(scale))
    except ImportProblemError as e:
        raise ImportProblemError(f"{src}: {e}") from None
    tr = answer["translation"]
    definition["kernelbench"] = {"file": src.name, "forward_inputs": tr["inputs"],
                                 "parameters": dict(tr["params"]), "modules": tr["modules"],
                                 "checked": answer["checked"], "scale": scale, "dtype": DTYPES.get(dtype or "")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    lines = []
    for axes in per_load:
        key = json.dumps([stem, dtype, axes], sort_keys=True)
        lines.append(json.dumps({"uuid": str(uuid.uuid5(_UUID_NS, key)), "axes": axes,
                                 "inputs": {n: {"type": "custom"} for n in definition["inputs"]},
                                 "tolerance": TOLERANCE}))
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return load_problem(folder)
