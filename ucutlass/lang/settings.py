"""Kernel settings: the table of GEMM settings (name, meaning, valid spellings, default, converter) and the
converters that read one written atom into a typed IR value, raising :class:`Bad` with the valid spellings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .. import ir
from ..errors import did_you_mean
from ..ir import DType, Layout, Math, Pos, RasterOrder, ReductionMode, Schedule, Target, TileScheduler
from .ast import Atom, Decl, KernelNode, SettingNode
from .vocabulary import (DTYPES, LAYOUTS, MATHS, OPERAND_DTYPES, RASTERS, REDUCTION_MODES, SCALE_DTYPES, SCHEDULERS, SCHEDULES,
                         TARGETS)


class Bad(Exception):
    """A value that does not fit where it is written: message and the valid spellings."""

    def __init__(self, message: str, valid: Sequence[str] = (), code: str = "bad-value"):
        super().__init__(message)
        self.message = message
        self.valid = tuple(valid)
        self.code = code


def _enum_converter(setting: str, enum_type: type, names: Sequence[str], what: str,
                    shown: Sequence[str] | None = None) -> Callable[["Atom"], Any]:
    """Converter of an enum setting: any of ``names`` converts; an error lists ``shown`` (default: ``names``)."""
    valid = tuple(shown) if shown is not None else tuple(names)

    def convert(atom: Atom) -> Any:
        if atom.kind == "name" and atom.text in names:
            return enum_type(atom.text)
        code = "unknown-dtype" if enum_type is DType else "bad-value"
        raise Bad(f"{setting} = {atom.text} is not {what}{did_you_mean(atom.text, valid)}", valid, code)
    return convert


def _shape_converter(setting: str, example: str) -> Callable[["Atom"], tuple[int, int, int]]:
    def convert(atom: Atom) -> tuple[int, int, int]:
        if atom.kind == "shape":
            parts = tuple(int(p) for p in atom.text.split("x"))
            if len(parts) == 3 and all(p > 0 for p in parts):
                return parts  # type: ignore[return-value]
        raise Bad(f"{setting} = {atom.text} is not a shape M x N x K with positive extents, e.g. {example}")
    return convert


def _whole_number(setting: str, examples: Sequence[str]) -> Callable[["Atom"], int]:
    def convert(atom: Atom) -> int:
        if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
            return int(atom.text)
        raise Bad(f"{setting} = {atom.text} is not a whole number > 0", examples)
    return convert


def _alignment(atom: Atom) -> int | None:
    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) in ir.ALIGNMENTS:
        return int(atom.text)
    raise Bad(f"alignment = {atom.text} is neither auto nor elements per access 8, 4, 2 or 1",
              ("auto",) + tuple(str(a) for a in ir.ALIGNMENTS))


#: Spellings of a flag setting that the rules may decide (``swap_ab``) and the IR value of each.
FLAGS = {"auto": None, "true": True, "false": False}


def _flag(setting: str) -> Callable[["Atom"], bool | None]:
    def convert(atom: Atom) -> bool | None:
        if atom.kind == "name" and atom.text in FLAGS:
            return FLAGS[atom.text]
        raise Bad(f"{setting} = {atom.text} is not one of auto, true, false{did_you_mean(atom.text, tuple(FLAGS))}",
                  tuple(FLAGS))
    return convert


def stages_value(atom: Atom) -> int | None:
    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
        return int(atom.text)
    raise Bad(f"stages = {atom.text} is neither auto nor a whole number of pipeline stages", ("auto", "2", "3", "4"))


@dataclass(frozen=True)
class SettingSpec:
    """One kernel setting: its name, what it holds, its default and how a written value is read.

    Attributes:
        name: the setting's name in `.ucut` (also the :class:`~ucutlass.ir.GemmKernel` field).
        doc: one line for the card and error messages.
        valid: the valid spellings when the set is closed, else examples.
        default: the spelling used when the setting is absent.
        convert: reads one atom into the typed IR value, raising ``Bad``.
    """

    name: str
    doc: str
    valid: tuple[str, ...]
    default: str
    convert: Callable[["Atom"], Any]


#: Settings of a ``gemm`` kernel, in :data:`ucutlass.ir.GEMM_SETTINGS` order.
SETTINGS: dict[str, SettingSpec] = {s.name: s for s in (
    SettingSpec("target", "GPU architecture", TARGETS, "sm90",
                _enum_converter("target", Target, TARGETS, "a known target")),
    SettingSpec("accum", "accumulator type of A·B", DTYPES, "f32",
                _enum_converter("accum", DType, DTYPES, "a dtype")),
    SettingSpec("tile", "CTA tile M x N x K (CUTLASS TileShape)", ("128x128x64", "128x256x64", "64x128x64"),
                "128x128x64", _shape_converter("tile", "128x128x64")),
    SettingSpec("cluster", "thread-block cluster M x N x K (CUTLASS ClusterShape)", ("1x1x1", "2x1x1", "1x2x1"),
                "1x1x1", _shape_converter("cluster", "2x1x1")),
    SettingSpec("schedule", "mainloop kernel schedule", SCHEDULES, "auto",
                _enum_converter("schedule", Schedule, SCHEDULES, "a schedule")),
    SettingSpec("stages", "mainloop pipeline stages: auto or a number", ("auto", "2", "3", "4"), "auto", stages_value),
    SettingSpec("scheduler", "tile scheduler", SCHEDULERS, "persistent",
                _enum_converter("scheduler", TileScheduler, SCHEDULERS, "a tile scheduler")),
    SettingSpec("split_k", "split-K factor, > 1 needs scheduler stream_k (given at run time)",
                ("1", "2", "4", "8"), "1", _whole_number("split_k", ("1", "2", "4", "8"))),
    SettingSpec("raster", "order the tile scheduler walks output tiles (given at run time)", RASTERS, "auto",
                _enum_converter("raster", RasterOrder, RASTERS, "a raster order")),
    SettingSpec("swizzle", "tile-scheduler swizzle size (given at run time)", ("1", "2", "4", "8"), "1",
                _whole_number("swizzle", ("1", "2", "4", "8"))),
    SettingSpec("reduction_mode", "how split-K / stream-K partial sums add up (given at run time)", REDUCTION_MODES,
                "deterministic", _enum_converter("reduction_mode", ReductionMode, REDUCTION_MODES, "a reduction mode")),
    SettingSpec("alignment", "elements per access of each operand's contiguous dim (auto: 16 bytes, TMA)",
                ("auto", "8", "4", "2", "1"), "auto", _alignment),
    SettingSpec("swap_ab", "compute Dᵀ = B·Aᵀ: the tile's M runs along N, its N along the (few) rows M",
                tuple(FLAGS), "auto", _flag("swap_ab")),
    SettingSpec("math", "how f32 a and b multiply: tf32 (one TF32 MMA) or 3xtf32 (three: about fp32 accuracy)",
                MATHS, "tf32", _enum_converter("math", Math, MATHS, "a math mode")),
)}
assert tuple(SETTINGS) == ir.GEMM_SETTINGS


def schedule_converter(k: "KernelNode", rules: Mapping[Target, Any]) -> Callable[["Atom"], Any]:
    """The ``schedule`` converter of kernel ``k``: an unknown name's error lists only the schedules of the kernel's
    target (``rules[target].SCHEDULES``; sm90 when no target is written; all of them when the target is open).
    Another target's schedule still converts, so that the target's rule names it (``sm100.schedule``: "the sm90
    ones are not")."""
    written = [it.value for it in k.items if isinstance(it, SettingNode) and it.name == "target"]
    target = written[0].text if written and isinstance(written[0], Atom) else None if written else "sm90"
    if target not in TARGETS:
        return SETTINGS["schedule"].convert
    own = tuple(s.value for s in rules[Target(target)].SCHEDULES)
    # the fp8 fast-accumulation schedules only where a is an fp8 operand (its dtype written as one name: f8e4m3)
    a = [getattr(it.dtype, "text", "") for it in k.items if isinstance(it, Decl) and it.name == "a"]
    if a and isinstance(a[0], str) and a[0] and not a[0].startswith("f8"):
        own = tuple(s for s in own if not s.endswith("_fp8_fastaccum"))
    return _enum_converter("schedule", Schedule, SCHEDULES, f"an {target} schedule", shown=own)


def atom_of(text: str) -> Atom:
    kind = "shape" if text[:1].isdigit() and "x" in text else "number" if text.isdigit() else "name"
    return Atom(kind, text, Pos())


#: The typed value of each setting when a kernel does not set it.
DEFAULTS: dict[str, Any] = {name: spec.convert(atom_of(spec.default)) for name, spec in SETTINGS.items()}


FAILED = object()


def batch_ok(names: Sequence[str]) -> bool:
    """Batch dims are distinct names other than the GEMM modes M, N, K."""
    return len(set(names)) == len(names) and not set(names) & {"M", "N", "K"} and \
        all(isinstance(n, str) and not n[:1].isdigit() for n in names)


def dtype_converter(owner: str) -> Callable[[Atom], DType]:
    def convert(atom: Atom) -> DType:
        if atom.kind == "name" and atom.text in DTYPES:
            return DType(atom.text)
        valid = SCALE_DTYPES if owner in ir.SCALE_OPERANDS else OPERAND_DTYPES
        raise Bad(f"unknown dtype {atom.text!r} for {owner}{did_you_mean(atom.text, valid)}", valid,
                  "unknown-dtype")
    return convert


def layout_converter(owner: str) -> Callable[[Atom], Layout]:
    def convert(atom: Atom) -> Layout:
        if atom.kind == "name" and atom.text in LAYOUTS:
            return Layout(atom.text)
        raise Bad(f"{atom.text!r} is not a layout for {owner}", LAYOUTS, "bad-layout")
    return convert
