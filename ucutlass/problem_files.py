"""One validation pass over a problem's files (``definition.json``, ``workload.jsonl``) before anything is used.

Every malformed case gets a :class:`~ucutlass.errors.ProblemError` that names the file, the workload line and the
field (``workload.jsonl:3: axes.seq_len: "abc" is not an integer``), and limits that are general, not special
cases: file size, axis extents (non-negative integers up to :data:`MAX_EXTENT`), tolerances (finite, non-negative,
a ratio in [0, 1]), dtype names (:data:`DTYPES`), and axis expressions bounded in length, nodes, integer size and
exponent (:func:`eval_axis_expression`), so that no problem file can hang or exhaust a process that loads it.
"""

from __future__ import annotations

import ast
import difflib
import math
import operator
from pathlib import Path
from typing import Any, Mapping

from .errors import ProblemError

#: Largest file read (definition.json or workload.jsonl): the largest SOL-ExecBench file is ~40 KB.
MAX_FILE_BYTES = 16 << 20
#: Largest axis extent or expression value accepted (2^40: a tensor axis of a trillion elements).
MAX_EXTENT = 1 << 40
#: Axis expressions: characters, AST nodes, and the largest exponent of ``**``.
MAX_EXPRESSION_CHARS = 1000
MAX_EXPRESSION_NODES = 200
MAX_EXPONENT = 64
#: The torch dtype names a definition may use (``torch.<name>``).
DTYPES = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
          "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "int64", "int32", "int16", "int8", "uint8",
          "bool", "complex64", "complex128")
AXIS_KINDS = ("const", "var", "expr")

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}


def read_text(path: Path) -> str:
    """A problem file's text: UTF-8, at most :data:`MAX_FILE_BYTES`.

    Raises:
        ProblemError: too large, or not UTF-8 (with the byte offset).
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ProblemError(f"{path}: {size} bytes; a problem file may hold at most {MAX_FILE_BYTES} bytes")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProblemError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def extent(value: Any, where: str) -> int:
    """An axis extent: an integer (a float with an integer value is read as one), 0 ≤ value ≤ MAX_EXTENT."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProblemError(f"{where}: {value!r} is not an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ProblemError(f"{where}: {value!r} is not an integer")
    value = int(value)
    if not 0 <= value <= MAX_EXTENT:
        raise ProblemError(f"{where}: {value} is out of range (0 to 2^40)")
    return value


def number(value: Any, where: str, low: float = 0.0, high: float = math.inf) -> float:
    """A finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProblemError(f"{where}: {value!r} is not a finite number")
    if not low <= value <= high:
        raise ProblemError(f"{where}: {value!r} is out of range ({low:g} to {high:g})")
    return float(value)


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """A JSON object (``{…}``)."""
    if not isinstance(value, dict):
        raise ProblemError(f"{where}: expected an object {{…}}, got {type(value).__name__}")
    return value


def dtype_name(value: Any, where: str) -> str:
    """A dtype name of :data:`DTYPES`."""
    if not isinstance(value, str) or value not in DTYPES:
        close = difflib.get_close_matches(str(value), DTYPES, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else f" (valid: {', '.join(DTYPES)})"
        raise ProblemError(f"{where}: unknown dtype {value!r}{hint}")
    return value


def check_definition(d: Any, where: str) -> None:
    """Check a parsed ``definition.json`` (object, axes, inputs, outputs, reference) field by field.

    Raises:
        ProblemError: the first malformed field, named (``definition.json: axes.H: …``).
    """
    d = mapping(d, where)
    for key in ("axes", "inputs", "outputs", "reference"):
        if key not in d:
            raise ProblemError(f"{where}: missing {key!r}")
    axes = mapping(d["axes"], f"{where}: axes")
    for name, a in axes.items():
        a = mapping(a, f"{where}: axes.{name}")
        kind = a.get("type")
        if kind not in AXIS_KINDS:
            raise ProblemError(f"{where}: axis {name!r} has type {kind!r} (valid: {', '.join(AXIS_KINDS)})")
        if kind == "const":
            if "value" not in a:
                raise ProblemError(f"{where}: axes.{name}: a const axis needs a value")
            extent(a["value"], f"{where}: axes.{name}.value")
        if kind == "expr":
            expr = a.get("expression")
            if not isinstance(expr, str) or not expr.strip():
                raise ProblemError(f"{where}: axes.{name}: an expr axis needs an expression (a string)")
            if len(expr) > MAX_EXPRESSION_CHARS:
                raise ProblemError(f"{where}: axes.{name}.expression: {len(expr)} characters (at most "
                                   f"{MAX_EXPRESSION_CHARS})")
    for section in ("inputs", "outputs"):
        for name, spec in mapping(d[section], f"{where}: {section}").items():
            spec = mapping(spec, f"{where}: {section}.{name}")
            if "dtype" not in spec:
                raise ProblemError(f"{where}: {name!r} has no dtype")
            dtype_name(spec["dtype"], f"{where}: {section}.{name}.dtype")
            shape = spec.get("shape")
            if shape is not None:
                if not isinstance(shape, list):
                    raise ProblemError(f"{where}: {section}.{name}.shape: expected a list of axis names or null")
                for i, dim in enumerate(shape):
                    if isinstance(dim, str) and not dim.isdigit():  # "1": a literal extent, as SOL-ExecBench writes it
                        if dim not in axes:
                            raise ProblemError(f"{where}: {section}.{name}.shape[{i}]: unknown axis {dim!r} "
                                               f"(axes: {', '.join(axes) or 'none'})")
                    else:
                        extent(int(dim) if isinstance(dim, str) else dim, f"{where}: {section}.{name}.shape[{i}]")
    if not isinstance(d["reference"], str):
        raise ProblemError(f"{where}: reference: expected Python source (a string), got "
                           f"{type(d['reference']).__name__}")
    entry = d.get("custom_inputs_entrypoint")
    if entry is not None and not isinstance(entry, str):
        raise ProblemError(f"{where}: custom_inputs_entrypoint: expected a function name (a string)")


def check_workload(w: Any, where: str, var_axes: Mapping[str, Any]) -> None:
    """Check one parsed workload line (object; axes are extents; inputs an object; tolerance finite).

    Raises:
        ProblemError: the first malformed field, named (``workload.jsonl:3: axes.seq_len: …``).
    """
    w = mapping(w, where)
    for name, value in mapping(w.get("axes", {}), f"{where}: axes").items():
        extent(value, f"{where}: axes.{name}")
    for name, spec in mapping(w.get("inputs", {}), f"{where}: inputs").items():
        mapping(spec, f"{where}: inputs.{name}")
    if "uuid" in w and not isinstance(w["uuid"], str):
        raise ProblemError(f"{where}: uuid: expected a string")
    tol = w.get("tolerance")
    if tol is not None:
        tol = mapping(tol, f"{where}: tolerance")
        for key in ("max_atol", "max_rtol"):
            if key in tol:
                number(tol[key], f"{where}: tolerance.{key}")
        for key in ("required_matched_ratio", "required_match_ratio"):
            if key in tol:
                number(tol[key], f"{where}: tolerance.{key}", 0.0, 1.0)


def eval_axis_expression(expression: str, values: Mapping[str, int]) -> int:
    """Evaluate an ``expr`` axis (``"num_attention_heads * head_dim"``) over known axis values.

    Only integer arithmetic (+ − * / // % **), parentheses, numbers and axis names, within bounds: at most
    :data:`MAX_EXPRESSION_CHARS` characters and :data:`MAX_EXPRESSION_NODES` nodes, exponents up to
    :data:`MAX_EXPONENT`, every intermediate value within ±:data:`MAX_EXTENT`² (so ``9**9**9`` is an error at once,
    not an hour of big-integer arithmetic) and the result in [0, :data:`MAX_EXTENT`].

    Raises:
        ProblemError: unknown name, unsupported syntax, a bound exceeded, division by zero, or a non-integer result.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ProblemError(f"axis expression of {len(expression)} characters (at most {MAX_EXPRESSION_CHARS})")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ProblemError(f"axis expression {expression[:80]!r} does not parse: {type(e).__name__}: {e}") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_EXPRESSION_NODES:
        raise ProblemError(f"axis expression {expression[:80]!r}: {nodes} nodes (at most {MAX_EXPRESSION_NODES})")
    bound = MAX_EXTENT ** 2

    def checked(x: Any) -> Any:
        if abs(x) > bound:
            raise ProblemError(f"axis expression {expression[:80]!r}: an intermediate value exceeds 2^80")
        return x

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return checked(node.value)
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ProblemError(f"axis expression {expression!r}: unknown axis {node.id!r}")
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            lhs, rhs = ev(node.left), ev(node.right)
            # |lhs| ** rhs stays within 2^80 (so its bits are few) before Python computes it
            too_big = abs(rhs) > MAX_EXPONENT or (abs(lhs) > 1 and abs(rhs) * math.log2(abs(lhs)) > 80)
            if isinstance(node.op, ast.Pow) and too_big:
                raise ProblemError(f"axis expression {expression[:80]!r}: {lhs} ** {rhs} is out of range")
            try:
                return checked(_BINOPS[type(node.op)](lhs, rhs))
            except ZeroDivisionError:
                raise ProblemError(f"axis expression {expression!r}: division by zero") from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ProblemError(f"axis expression {expression[:80]!r}: unsupported syntax {ast.dump(node)[:60]}")

    result = ev(tree)
    if isinstance(result, float):
        if not (math.isfinite(result) and result.is_integer()):
            raise ProblemError(f"axis expression {expression!r} gives {result}, not an integer")
        result = int(result)
    if isinstance(result, complex) or not 0 <= result <= MAX_EXTENT:
        raise ProblemError(f"axis expression {expression!r} gives {result}, out of range (0 to 2^40)")
    return result


__all__ = ["read_text", "extent", "number", "mapping", "dtype_name", "check_definition", "check_workload",
           "eval_axis_expression", "MAX_FILE_BYTES", "MAX_EXTENT", "MAX_EXPRESSION_CHARS", "MAX_EXPRESSION_NODES",
           "MAX_EXPONENT", "DTYPES", "AXIS_KINDS"]
