"""The import probe: runs a KernelBench file in a child process and reports its model's shapes and functional form.

Run as ``python -m ucutlass.importers.probe`` with a JSON request on stdin (see :func:`probe`); writes one
JSON document on stdout: ``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. The parent
(:mod:`ucutlass.importers.kernelbench`) starts it with a timeout and never executes the file itself: the file
is untrusted code (it may loop, allocate, or exit), so only this throw-away process runs it.

The model is built and run on torch's ``meta`` device (shapes and dtypes, no memory, no arithmetic) under
``torch.device("meta")``, so ``get_inputs()``/``get_init_inputs()`` of real KernelBench sizes cost nothing.
A real CPU run that compares the model with its translation happens only when every tensor is small
(``check_max_elements``).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import io
import json
import sys
import traceback
from typing import Any

import torch
import torch.fx as fx

from .functional import HEADER, TranslationError, functional_source


class ProbeError(Exception):
    """The file cannot be imported; the message is for the user."""


def _load(path: str) -> dict:
    ns: dict[str, Any] = {"__name__": "kernelbench_problem", "__file__": path}
    src = open(path, encoding="utf-8").read()
    try:
        code = compile(src, path, "exec")
    except SyntaxError as e:
        raise ProbeError(f"{path}:{e.lineno}: not valid Python: {e.msg}") from None
    try:
        with torch.device("meta"):
            exec(code, ns)
    except Exception as e:
        raise ProbeError(f"{path}: executing the file failed: {type(e).__name__}: {e}") from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in ns]
    if missing:
        raise ProbeError(f"{path}: not a KernelBench problem: it defines no {', '.join(missing)} (a KernelBench "
                         "file defines class Model(nn.Module), get_inputs() and get_init_inputs())")
    if not (isinstance(ns["Model"], type) and issubclass(ns["Model"], torch.nn.Module)):
        raise ProbeError(f"{path}: Model is not a torch.nn.Module subclass")
    return ns


def _translate(model):
    """The functional form of ``model`` (:func:`functional_source` of its ``torch.fx`` trace)."""
    try:
        gm = fx.symbolic_trace(model)
    except Exception as e:
        raise ProbeError(f"Model.forward cannot be traced by torch.fx ({type(e).__name__}: {e}); control flow "
                         "that depends on tensor values has no functional form") from None
    try:
        return functional_source(gm)
    except TranslationError as e:
        raise ProbeError(f"cannot translate Model: {e}") from None


def _call(what: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        raise ProbeError(f"{what} failed: {type(e).__name__}: {e}") from None


def _build(ns: dict, overrides: dict, device: str):
    """Model, its forward inputs (a list) under ``overrides`` of the file's globals, on ``device``."""
    saved = {k: ns[k] for k in overrides}
    ns.update(overrides)
    try:
        with torch.device(device):
            init = _call("get_init_inputs()", ns["get_init_inputs"])
            model = _call(f"Model(*{init!r})", ns["Model"], *init)
            inputs = _call("get_inputs()", ns["get_inputs"])
    finally:
        ns.update(saved)
    if not isinstance(inputs, (list, tuple)):
        raise ProbeError(f"get_inputs() returned a {type(inputs).__name__}, expected a list")
    return model, list(inputs)


def _describe(value, what: str) -> dict:
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProbeError(f"{what} is a {type(value).__name__}: only tensors and numbers can be inputs/outputs")
    return {"shape": None, "dtype": "int64" if isinstance(value, int) else "float32", "value": value}


def _outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _cast(value, dtype):
    if dtype and isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(getattr(torch, dtype))
    return value


def probe(request: dict) -> dict:
    """Answer one request.

    Args:
        request: ``path`` (the KernelBench file), ``scale`` (``{int global: [factors]}``: one workload per
            combination, each global ``round(value·factor)``, never 0 and never two alike), ``dtype`` (None, or a float dtype name fp32 tensors become), ``check_max_elements``.

    Returns:
        ``globals`` (the file's int globals), ``base`` / ``perturbed`` (``{global: shapes}``, each global
        doubled alone) / ``workloads``: shapes of ``inputs``, ``params`` and ``outputs`` per configuration,
        ``translation`` (source, input and parameter names, modules), ``doc``, ``checked`` (the CPU
        comparison's ``max_abs_diff`` and the global ``sizes`` it ran at, or why it was ``skipped``).
    """
    ns = _load(request["path"])
    ints = {k: v for k, v in ns.items() if type(v) is int and not k.startswith("_") and v > 0}
    dtype = request.get("dtype")

    model, inputs = _build(ns, {}, "meta")
    names = [p for p in inspect.signature(model.forward).parameters]
    tr = _translate(model)
    if len(inputs) != len(tr.inputs):
        raise ProbeError(f"get_inputs() gives {len(inputs)} inputs, Model.forward takes {len(tr.inputs)} "
                         f"({', '.join(names)})")
    ref: dict[str, Any] = {}
    exec(compile(HEADER + tr.source, "<generated reference>", "exec"), ref)

    def shapes(overrides: dict, cast: str | None) -> dict:
        m, xs = _build(ns, overrides, "meta")
        if overrides and _translate(m).source != tr.source:
            raise ProbeError(f"with {', '.join(f'{k}={v}' for k, v in overrides.items())} the traced forward "
                             "differs: the Model uses a global as a constant (a group count, a kernel size, a "
                             "reshape size), so the reference would not follow; scale only sizes the forward "
                             "reads from its inputs' shapes")
        params = [_cast(_attr(m, q), cast) for _, q in tr.params]
        xs = [_cast(x, cast) for x in xs]
        with torch.no_grad():
            out = _outputs(_call("the generated run() on meta tensors", ref["run"], *xs, *params))
        return {"inputs": [_describe(x, f"input {n}") for n, x in zip(tr.inputs, xs)],
                "params": [_describe(p, f"parameter {q}") for p, (_, q) in zip(params, tr.params)],
                "outputs": [_describe(o, f"output {i}") for i, o in enumerate(out)]}

    base = shapes({}, None)
    with torch.no_grad():
        direct = _outputs(_call("Model.forward on meta tensors", model, *inputs))
    if [_describe(o, "output")["shape"] for o in direct] != [o["shape"] for o in base["outputs"]]:
        raise ProbeError("the translation's output shapes differ from Model.forward's")
    perturbed = {}
    for g, v in ints.items():
        try:
            perturbed[g] = shapes({g: 2 * v}, None)
        except ProbeError:
            perturbed[g] = None  # the model does not accept this size: the global cannot be told apart
    scale = request.get("scale") or {}
    unknown = [g for g in scale if g not in ints]
    if unknown:
        raise ProbeError(f"--scale {unknown[0]}: the file has no positive int global of that name (its int "
                         f"globals: {', '.join(ints) or 'none'})")
    for g, factors in scale.items():  # a factor that rounds a size to 0 was a mistake, not a request for 1
        small = [f for f in factors if round(ints[g] * f) < 1]
        if small:
            raise ProbeError(f"--scale {g}={small[0]:g}: {g} = {ints[g]} times {small[0]:g} rounds to 0; the smallest "
                             f"factor that keeps {g} >= 1 is {0.5 / ints[g]:.3g} (1/{2 * ints[g]} rounds up)")
        sizes = [round(ints[g] * f) for f in factors]
        if len(set(sizes)) < len(sizes):
            raise ProbeError(f"--scale {g}={','.join(f'{f:g}' for f in factors)}: two factors give the same {g} "
                             f"({', '.join(map(str, sizes))} from {g} = {ints[g]}): the workloads would repeat")
    loads = [{g: round(ints[g] * f) for g, f in zip(scale, combo)}
             for combo in itertools.product(*scale.values())]
    workloads = []
    for w in loads:
        try:
            workloads.append(shapes(w, dtype))
        except ProbeError as e:
            raise ProbeError(f"at the scaled sizes {w}: {e}") from None
    return {"ok": True, "globals": ints, "base": base, "perturbed": perturbed, "workloads": workloads,
            "translation": {"source": tr.source, "inputs": list(tr.inputs), "params": [list(p) for p in tr.params],
                            "modules": tr.modules},
            "doc": inspect.cleandoc(ns["Model"].__dict__.get("__doc__") or ""),  # not nn.Module's own
            "checked": _check(ns, ref, tr, shapes, ints, request.get("check_max_elements", 1 << 22))}


def _check(ns, ref, tr, shapes, ints: dict, limit: int):
    """Max |Model(x) − run(x, params)| on the CPU and the sizes it ran at, or why it was not run.

    At the file's sizes when every tensor together has at most ``limit`` elements; else with the int globals of
    16 or more (batch, features, spatial sizes; not kernel sizes, strides or paddings) halved one at a time,
    largest first, down to 8, each only while the model still accepts the sizes, until the tensors fit: the
    same modules and calls, at sizes a CPU runs in milliseconds.
    """
    def total(o: dict) -> int | None:
        try:
            return sum(_numel(d) for part in shapes(o, None).values() for d in part)
        except ProbeError:
            return None  # the model does not take these sizes

    overrides: dict[str, int] = {}
    now = total(overrides)
    frozen: set[str] = set()  # globals the model needs as they are (a tuple global elsewhere agrees with them)
    while now is not None and now > limit:
        moved = False
        for g in sorted((g for g in ints if ints[g] >= 16 and g not in frozen), key=lambda g: -overrides.get(g, ints[g])):
            value = overrides.get(g, ints[g])
            if value // 2 < 8:
                frozen.add(g)
                continue
            trial = {**overrides, g: value // 2}
            n = total(trial)
            if n is None:
                frozen.add(g)
            else:
                overrides, now, moved = trial, n, True
                if now <= limit:
                    break
        if not moved:
            break
    if now is None or now > limit:
        return {"skipped": f"more than {limit} elements, and halving the int globals of 16 or more (alone, each down "
                           f"to 8, while the model accepts them) got no smaller than {now} elements"}
    torch.manual_seed(0)
    model, inputs = _build(ns, overrides, "cpu")
    params = [_attr(model, q) for _, q in tr.params]
    with torch.no_grad():
        want = _outputs(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
        got = _outputs(ref["run"](*inputs, *params))
    worst = 0.0
    for w, g in zip(want, got):
        if not isinstance(w, torch.Tensor):
            continue
        if w.shape != g.shape or w.dtype != g.dtype:
            raise ProbeError(f"translation check: output {tuple(g.shape)} {g.dtype}, Model gives "
                             f"{tuple(w.shape)} {w.dtype}")
        worst = max(worst, (w.double() - g.double()).abs().max().item() if w.numel() else 0.0)
    scale = max([1.0] + [w.abs().max().item() for w in want if isinstance(w, torch.Tensor) and w.numel()])
    if worst > 1e-5 * scale:
        raise ProbeError(f"translation check: the generated run() differs from Model.forward by {worst:g} on the "
                         f"CPU (at {overrides or 'the file' + chr(39) + 's sizes'})")
    return {"max_abs_diff": worst, "sizes": overrides}


def _numel(d: dict) -> int:
    n = 1
    for s in d["shape"] or []:
        n *= s
    return n


def _attr(root, qual: str):
    obj = root
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def main() -> int:
    """Read the request from stdin, write the answer to ``request["answer_path"]`` (stdout when absent: the file's
    own prints, even from C, cannot corrupt an answer written to a file)."""
    request = json.loads(sys.stdin.read())
    noise = io.StringIO()  # the file's prints must not corrupt the JSON answer
    try:
        with contextlib.redirect_stdout(noise):
            answer = probe(request)
    except ProbeError as e:
        answer = {"ok": False, "error": str(e)}
    except Exception as e:  # a bug in the file, or ours: say where
        answer = {"ok": False, "error": f"{type(e).__name__}: {e}",
                  "traceback": traceback.format_exc(limit=-4)}
    if request.get("answer_path"):
        with open(request["answer_path"], "w", encoding="utf-8") as f:
            json.dump(answer, f)
    else:
        sys.stdout.write(json.dumps(answer))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
