"""Errors of ucutlass, in one place.

Every user-facing error carries :class:`Diagnostic` records with file, line, column, a message and,
where there is a closed set, the valid choices: ``file:line:col: error: message (valid: a, b)``.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Pos:
    """A place in a `.ucut` source: 1-based line and column (Lark's convention)."""

    file: str = "<string>"
    line: int = 0
    column: int = 0
    end_line: int = 0
    end_column: int = 0
    start: int = -1  # character offsets into the source, -1 when unknown
    end: int = -1

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def closest(word: str, valid: Sequence[str]) -> str | None:
    """The first of ``valid`` that ``word`` abbreviates (``coop``: three letters or more), else the closest
    spelling (``difflib``, cutoff 0.6), else None."""
    close = [v for v in valid if v.startswith(word)][:1] if len(word) >= 3 else []
    close = close or difflib.get_close_matches(word, list(valid), n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, valid: Sequence[str]) -> str:
    """``; did you mean 'X'?`` for :func:`closest`, or "" when nothing is close."""
    close = closest(word, valid)
    return f"; did you mean {close!r}?" if close else ""


#: Most diagnostics one error carries; the rest are counted in a last note (the output stays bounded).
MAX_DIAGNOSTICS = 50
#: Widest source excerpt under a diagnostic, in characters: a longer line is cut around the column.
MAX_EXCERPT_CHARS = 120


def excerpt(text: str, pos: Pos) -> str:
    """The line of ``text`` at ``pos`` with a caret under the column (as Lark's ``get_context``), or "" when
    the position is not in the text. A line longer than :data:`MAX_EXCERPT_CHARS` is cut to that many
    characters around the column, ``…`` marking each cut."""
    lines = text.splitlines()
    if not 1 <= pos.line <= len(lines):
        return ""
    line = lines[pos.line - 1]
    col = max(pos.column - 1, 0)
    if len(line) > MAX_EXCERPT_CHARS:
        start = max(0, min(col - MAX_EXCERPT_CHARS // 2, len(line) - MAX_EXCERPT_CHARS))
        end = start + MAX_EXCERPT_CHARS
        head, tail = ("…" if start > 0 else ""), ("…" if end < len(line) else "")
        line, col = head + line[start:end] + tail, col - start + len(head)
    return line + "\n" + " " * len(line[:col].expandtabs()) + "^\n"


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a `.ucut` program or a configuration.

    Attributes:
        message: what is wrong, in one sentence.
        pos: where (file, 1-based line and column).
        valid: the values that would be accepted here, when that set is known.
        code: a stable short identifier (e.g. ``sm90.cooperative-tile-m``) for tools and tests.
        severity: ``error``, ``warning`` or ``note`` (a summary, e.g. how many choices are legal).
    """

    message: str
    pos: Pos = field(default_factory=Pos)
    valid: tuple[str, ...] = ()
    code: str = "error"
    severity: str = "error"

    def format(self, source: str | None = None) -> str:
        """``file:line:col: error: message (valid: …)``; with ``source`` (the text the position is in), the
        source line follows with a caret under the column (:func:`excerpt`)."""
        text = f"{self.pos}: {self.severity}: {self.message}"
        if self.valid:
            text += f" (valid: {', '.join(repr(v) if v == ',' else v for v in self.valid)})"  # ',' in a ', ' list
        shown = excerpt(source, self.pos) if source else ""
        return f"{text}\n{shown.rstrip(chr(10))}" if shown else text

    def to_json(self) -> dict:
        """Machine-readable form, as printed by ``ucutlass check --json``."""
        return {
            "file": self.pos.file,
            "line": self.pos.line,
            "column": self.pos.column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "valid": list(self.valid),
        }


class UcutError(Exception):
    """Base class of every error ucutlass raises on purpose."""


class UcutSyntaxError(UcutError):
    """A `.ucut` text that does not parse or lower; ``diagnostics`` say where and why.

    Args:
        diagnostics: every problem found, in source order.
        context: the source line and caret of the one diagnostic (Lark's ``get_context``), printed last.
        source: the text the diagnostics point into: then each diagnostic is printed with its own line and
            caret instead (and ``context`` defaults to the first one's).
    """

    def __init__(self, diagnostics: Sequence[Diagnostic], context: str = "", source: str | None = None):
        diagnostics = list(diagnostics)
        if len(diagnostics) > MAX_DIAGNOSTICS:  # the first ones, and how many more
            rest = len(diagnostics) - MAX_DIAGNOSTICS
            last = diagnostics[MAX_DIAGNOSTICS]
            diagnostics = diagnostics[:MAX_DIAGNOSTICS] + [Diagnostic(
                f"{rest} more problem(s) not shown (at most {MAX_DIAGNOSTICS} are reported; fix these first)",
                Pos(last.pos.file, last.pos.line, last.pos.column), code="too-many", severity="note")]
        self.diagnostics = tuple(diagnostics)
        self.source = source
        self.context = context or (excerpt(source, self.diagnostics[0].pos) if source and self.diagnostics else "")
        super().__init__(self.format())

    def format(self) -> str:
        if self.source:
            return "\n".join(d.format(self.source) for d in self.diagnostics) + "\n"
        text = "\n".join(d.format() for d in self.diagnostics)
        return f"{text}\n{self.context}" if self.context else text

    def to_json(self) -> str:
        return json.dumps({"ok": False, "diagnostics": [d.to_json() for d in self.diagnostics]}, indent=2)


class CheckError(UcutSyntaxError):
    """A well-formed program that breaks an architecture rule (rejected before nvcc)."""


class ToolchainError(UcutError):
    """nvcc or the CUTLASS headers cannot be found or do not work."""


class CompileError(UcutError):
    """nvcc rejected a generated translation unit; ``log`` holds nvcc's message."""

    def __init__(self, message: str, log: str = "", source_path: str | None = None):
        self.log = log
        self.source_path = source_path
        super().__init__(message + (f"\n{log.strip()}" if log else ""))


class KernelRuntimeError(UcutError):
    """A compiled kernel refused its arguments (shape, dtype, alignment, device) or failed to launch."""


class ProblemError(UcutError):
    """A problem folder (definition.json + workload.jsonl) is missing or malformed."""


def diagnostics_json(diags: Iterable[Diagnostic]) -> list[dict]:
    """A list of :meth:`Diagnostic.to_json` records."""
    return [d.to_json() for d in diags]


__all__ = [
    "MAX_DIAGNOSTICS", "MAX_EXCERPT_CHARS", "Diagnostic", "UcutError", "UcutSyntaxError", "CheckError", "ToolchainError", "CompileError",
    "KernelRuntimeError", "ProblemError", "diagnostics_json",
]
