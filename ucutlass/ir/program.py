"""A parsed `.ucut` program: its kernels and source text; resolving picks substitutes values in the IR."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import Pos
from .kernel import Kernel
from .pipeline import Pipeline
from .values import Choice


@dataclass(frozen=True)
class Program:
    """A parsed `.ucut` file: its kernels and pipelines, plus the source text for reports and concrete
    re-rendering."""

    kernels: tuple[Kernel, ...]
    source: str = ""
    file: str = "<string>"
    #: ``pipeline NAME { … }`` blocks: the file's kernels and torch steps wired into one callable (:mod:`.pipeline`)
    pipelines: tuple[Pipeline, ...] = ()

    def pipeline(self, name: str | None = None) -> Pipeline | None:
        """The pipeline called ``name``; with None, the only pipeline, or None when the file has none.

        Raises:
            KeyError: no such pipeline, or ``name`` is None and the file has several.
        """
        if name is None:
            if len(self.pipelines) > 1:
                raise KeyError(f"{self.file} has {len(self.pipelines)} pipelines; name one of "
                               f"{[p.name for p in self.pipelines]}")
            return self.pipelines[0] if self.pipelines else None
        for p in self.pipelines:
            if p.name == name:
                return p
        raise KeyError(f"no pipeline {name!r} in {self.file}; pipelines: {[p.name for p in self.pipelines]}")

    def kernel(self, name: str | None = None) -> Kernel:
        """The kernel called ``name``, or the only kernel when ``name`` is None.

        Raises:
            KeyError: no such kernel, or ``name`` is None and the program has several.
        """
        if name is None:
            if len(self.kernels) != 1:
                raise KeyError(f"{self.file} has {len(self.kernels)} kernels; name one of "
                               f"{[k.name for k in self.kernels]}")
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in {self.file}; kernels: {[k.name for k in self.kernels]}")

    def dispatch(self) -> tuple[Kernel, ...]:
        """The kernels of a dispatch in the order a call tries them, or () when no kernel has ``when``.

        A program in which a kernel has ``when MODE <= NUMBER`` is one solution: each call runs the first kernel
        whose condition holds for the call's (M, N, K), the last kernel (no ``when``) every other call
        (:func:`ucutlass.runtime.pick`). The lowering checked that every kernel is a gemm binding the same
        tensors, that only the last lacks ``when`` and that each can run (:mod:`ucutlass.lang.dispatch`).
        """
        if not any(getattr(k, "when", None) for k in self.kernels):
            return ()
        return self.kernels

    def choices(self) -> dict[str, Choice]:
        """All open choices, keyed ``kernel.setting`` (e.g. ``up_proj.tile``)."""
        return {f"{k.name}.{key}": c for k in self.kernels for key, c in k.choices().items()}

    def is_concrete(self) -> bool:
        """True when no kernel has an open choice."""
        return all(k.is_concrete() for k in self.kernels)

    def resolve(self, picks: Mapping[str, Any]) -> "Program":
        """Pick values for choices keyed ``kernel.setting``; returns a new Program with new source text.

        ``picks`` values may be typed values or their `.ucut` spellings. The returned program's
        ``source`` has each resolved ``{…}`` replaced by the picked spelling, so comments survive.
        """
        all_choices = self.choices()
        per_kernel: dict[str, dict[str, Any]] = {}
        replacements: list[tuple[int, int, str]] = []
        for key, value in picks.items():
            if key not in all_choices:
                raise KeyError(f"no open choice {key!r} (valid: {', '.join(sorted(all_choices))})")
            choice = all_choices[key]
            if value in choice.spellings and value not in choice.options:
                value = choice.options[choice.spellings.index(value)]
            if value not in choice.options:
                raise ValueError(f"{key} = {value} is not one of the options (valid: {', '.join(choice.spellings)})")
            spelling = choice.spellings[choice.options.index(value)]
            kname, setting = key.split(".", 1)
            per_kernel.setdefault(kname, {})[setting] = value
            if choice.pos.start >= 0:
                replacements.append((choice.pos.start, choice.pos.end, spelling))
        kernels = tuple(k.resolve(per_kernel.get(k.name, {})) for k in self.kernels)
        if not self.source:
            return dataclasses.replace(self, kernels=kernels)
        edits = sorted(replacements)
        source = self.source
        for start, end, text in reversed(edits):
            source = source[:start] + text + source[end:]
        # The choices still open (and every position a diagnostic names) move with the text before them.
        return dataclasses.replace(self, kernels=_moved(kernels, edits, source), source=source)


def _moved(value: Any, edits: list[tuple[int, int, str]], source: str) -> Any:
    """``value`` with every :class:`Pos` in it moved as ``edits`` (``(start, end, text)`` replacements of the
    old source, sorted, not overlapping) move the text: offsets, then line and column from the new ``source``
    (a ``{…}`` may span lines). A position inside a replaced span moves to the start of its replacement."""
    def offset(old: int) -> int:
        shift = 0
        for start, end, text in edits:
            if old >= end:
                shift += len(text) - (end - start)
            elif old > start:
                return start + shift
            else:
                break
        return old + shift

    def line_col(off: int) -> tuple[int, int]:
        return source.count("\n", 0, off) + 1, off - source.rfind("\n", 0, off)

    def move(v: Any) -> Any:
        if isinstance(v, Pos):
            if v.start < 0:
                return v
            start, end = offset(v.start), offset(v.end)
            (line, column), (end_line, end_column) = line_col(start), line_col(end)
            return dataclasses.replace(v, line=line, column=column, end_line=end_line, end_column=end_column,
                                       start=start, end=end)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes = {}
            for f in dataclasses.fields(v):
                old = getattr(v, f.name)
                new = move(old)
                if new is not old:
                    changes[f.name] = new
            return dataclasses.replace(v, **changes) if changes else v
        if isinstance(v, tuple):
            items = tuple(move(x) for x in v)
            return items if any(a is not b for a, b in zip(items, v)) else v
        if isinstance(v, dict):
            items = {k: move(x) for k, x in v.items()}
            return items if any(items[k] is not v[k] for k in v) else v
        return v

    return move(value) if edits else value
