"""Errors of ucutlass, in one place.

Every user-facing error carries :class:`Diagnostic` records with file, line, column, a message and,
where there is a closed set, the valid choices: ``file:line:col: error: message (valid: a, b)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .ir import Pos


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

    def format(self) -> str:
        """``file:line:col: error: message (valid: …)``."""
        text = f"{self.pos}: {self.severity}: {self.message}"
        if self.valid:
            text += f" (valid: {', '.join(self.valid)})"
        return text

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
    """A `.ucut` text that does not parse or lower; ``diagnostics`` say where and why."""

    def __init__(self, diagnostics: Sequence[Diagnostic], context: str = ""):
        self.diagnostics = tuple(diagnostics)
        self.context = context
        super().__init__(self.format())

    def format(self) -> str:
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
    "Diagnostic", "UcutError", "UcutSyntaxError", "CheckError", "ToolchainError", "CompileError",
    "KernelRuntimeError", "ProblemError", "diagnostics_json",
]
