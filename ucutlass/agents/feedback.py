"""The JSON feedback of ``check``, ``compile``, ``grade`` and ``tune`` (``--json``): one versioned document per call.

The contract is the JSON schema shipped beside this module, ``feedback-v1.json`` (draft 2020-12; every object closed
but a grade record's measured ``environment`` and ``checks``). Every document has ``schema`` (``ucutlass.feedback/1``),
``command``, ``ok``, ``diagnostics`` (code, line, column, message, valid choices) and, where a failure has no
diagnostic, ``error``. The builders here are what the CLI prints; :func:`validate` checks a document against the
schema (jsonschema).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Mapping

SCHEMA_VERSION = "ucutlass.feedback/1"
SCHEMA_FILE = "feedback-v1.json"
COMMANDS = ("check", "compile", "grade", "tune")


@lru_cache(maxsize=1)
def load_schema() -> dict:
    """The feedback schema (a dict), read from the package data ``ucutlass/agents/feedback-v1.json``."""
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def schema_errors(doc: Any) -> list[str]:
    """Every way ``doc`` breaks the schema, one line each (``path: message``); empty when it conforms.

    For a document of a known ``command`` the errors are those against that command's definition (clearer than
    the top-level ``oneOf``'s).
    """
    import jsonschema

    schema = load_schema()
    target: dict = schema
    if isinstance(doc, Mapping) and doc.get("command") in COMMANDS:
        target = {**schema, "$ref": f"#/$defs/{doc['command']}"}
        target.pop("oneOf")
    validator = jsonschema.Draft202012Validator(target)
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(document)"
        out.append(f"{where}: {e.message}")
    if not out and target is not schema:  # the oneOf as well: a document matches exactly one command
        out = [f"(document): {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    return out


class FeedbackSchemaError(ValueError):
    """A feedback document that does not conform to ``feedback-v1.json``; ``errors`` lists why."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("feedback document breaks feedback-v1.json:\n" + "\n".join(errors))


def validate(doc: Any) -> dict:
    """Return ``doc`` when it conforms to the schema.

    Raises:
        FeedbackSchemaError: listing every violation.
    """
    errors = schema_errors(doc)
    if errors:
        raise FeedbackSchemaError(errors)
    return doc


def document(command: str, ok: bool, *, diagnostics: Iterable[Mapping] = (), error: str | None = None,
             **fields: Any) -> dict:
    """A feedback document: the envelope (``schema``, ``command``, ``ok``, ``error``, ``diagnostics``) and the
    command's own fields (see feedback-v1.json)."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r} (valid: {', '.join(COMMANDS)})")
    return {"schema": SCHEMA_VERSION, "command": command, "ok": bool(ok), "error": error, **fields,
            "diagnostics": [dict(d) for d in diagnostics]}


#: Fields a command's document requires besides the envelope, filled in on a failure before they were known.
_EMPTY = {"check": {"file": "", "kernels": []}, "compile": {"file": "", "kernels": []},
          "grade": {"file": "", "problem": "", "summary": None, "records": []}, "tune": {"problem": ""}}


def error_document(command: str, exc: BaseException, **fields: Any) -> dict:
    """The document of a command that failed with ``exc``: a :class:`~ucutlass.errors.UcutSyntaxError` (or
    CheckError) gives its diagnostics, anything else its message as ``error``."""
    diags = getattr(exc, "diagnostics", None)
    base = {**_EMPTY[command], **{k: v for k, v in fields.items() if v is not None}}
    if diags:
        return document(command, False, diagnostics=[d.to_json() for d in diags], **base)
    return document(command, False, error=str(exc) or type(exc).__name__, **base)


def build_entry(result, *, log_chars: int = 4000) -> dict:
    """One kernel of a ``compile`` document from a :class:`ucutlass.build.BuildResult`."""
    entry = {"name": result.name, "ok": result.ok, "cached": bool(result.cached), "seconds": float(result.seconds),
             "source_path": str(result.source_path), "so_path": str(result.so_path) if result.so_path else None,
             "error": result.error or ""}
    if not result.ok and result.log:
        entry["log"] = result.log[-log_chars:]
    return entry


def _finite(x: Any) -> float | None:
    """A JSON number, or None for a missing, NaN or infinite one."""
    import math

    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def tune_document(result, paths: Mapping[str, Any], *, problem: str, spec: str | None) -> dict:
    """The ``tune`` document of a finished :class:`ucutlass.search.TuneResult` and the files it wrote."""
    from ..search.budget import geomean
    from ..search.report import workload_rows

    rows = workload_rows(result) if result.best is not None else []
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    scores = [r["sol_score"] for r in rows if r["sol_score"] is not None]
    best = None
    if result.best is not None:
        best = {"trial": result.best.number, "config": result.best.kernel.config_name(),
                "params": {k: str(v) for k, v in result.best.params.items()},
                "objective_t_over_sol": result.best_value,
                "source": result.dispatch.source if result.dispatch else result.best.program.source}
    measured = sum(1 for t in result.trials if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")
                   and t.get("status") != "INTERRUPTED")
    pruned = sum(1 for t in result.trials if t["state"] == "PRUNED")
    return document(
        "tune", result.best is not None,
        error=None if result.best is not None else "no configuration passed on every workload (see trials.csv)",
        problem=problem, spec=spec, stop_reason=result.stop_reason, measured_trials=measured,
        pruned_proposals=pruned, budget=int(result.budget), seconds=round(float(result.seconds), 3),
        headroom_reference_over_sol=_finite(result.headroom), best=best,
        geomean_speedup=geomean(speedups) if speedups else None,
        mean_sol_score=sum(scores) / len(scores) if scores else None,
        workloads=rows, paths={k: str(v) for k, v in paths.items()})


def pipeline_tune_document(result, paths: Mapping[str, Any], *, problem: str, spec: str | None) -> dict:
    """The ``tune`` document of a pipeline's tune (:class:`ucutlass.search.pipeline_tune.PipelineTuneResult`): ``best``
    holds the combined program (``params`` keyed ``KERNEL.SETTING``, ``config`` the kernels' configurations joined by
    ``+``, ``trial`` the number of the best trial in its kernel's study), ``budget`` the kernels' budgets summed."""
    from ..search.budget import geomean
    from ..search.report import sol_score

    tuned = {w.uuid for w in result.tuned_workloads}
    rows = [{"workload": o.workload.label(), "uuid": o.workload.uuid, "status": o.status, "time_ms": o.latency_ms,
             "reference_ms": o.reference_ms, "t_sol_ms": o.t_sol_ms,
             "speedup": o.reference_ms / o.latency_ms if o.latency_ms and o.reference_ms else None,
             "sol_score": sol_score(o.latency_ms, o.reference_ms, o.t_sol_ms), "tuned": o.workload.uuid in tuned}
            for o in result.outcomes]
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    scores = [r["sol_score"] for r in rows if r["sol_score"] is not None]
    measured = [t for t in result.trials if t["state"] in ("COMPLETE", "FAIL") and not t.get("duplicate")]
    best = None
    if result.source is not None:
        done = [t for t in measured if t["state"] == "COMPLETE"]
        configs = {t["kernel"]: t.get("config") for t in sorted(done, key=lambda t: t["value"], reverse=True)
                   if t["params"] == result.picks.get(t["kernel"])}
        best = {"trial": min(done, key=lambda t: t["value"])["number"] if done else 0,
                "config": "+".join(c for c in configs.values() if c) or "as written",
                "params": {f"{k}.{s}": str(v) for k, p in result.picks.items() for s, v in p.items()},
                "objective_t_over_sol": _finite(result.best_value) if result.best_value is not None else None,
                "source": result.source}
    return document(
        "tune", result.source is not None,
        error=None if result.source is not None else "no combination passed on every workload (see results.json)",
        problem=problem, spec=spec, stop_reason=result.stop_reason, measured_trials=len(measured),
        pruned_proposals=sum(1 for t in result.trials if t["state"] == "PRUNED"),
        budget=int(sum(result.budgets.values())), seconds=round(float(result.seconds), 3),
        headroom_reference_over_sol=_finite(result.headroom), best=best,
        geomean_speedup=geomean(speedups) if speedups else None,
        mean_sol_score=sum(scores) / len(scores) if scores else None,
        workloads=rows, paths={k: str(v) for k, v in paths.items()})


__all__ = ["SCHEMA_VERSION", "SCHEMA_FILE", "COMMANDS", "load_schema", "schema_errors", "validate",
           "FeedbackSchemaError", "document", "error_document", "build_entry", "tune_document",
           "pipeline_tune_document"]
