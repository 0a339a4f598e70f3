"""The state of one lowering (AST → IR): the :class:`Lowering` that collects every diagnostic, with the helpers
the families share (settings, operands, scales, slices) and, from :mod:`~ucutlass.lang.epilogue`, the epilogue's."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .. import ir
from ..errors import Diagnostic
from ..ir import Choice, EpilogueInput, Layout, Operand, Pos
from .ast import Atom, ChoiceNode, Decl, EpilogueNode, KernelNode, SettingNode, SourceNode, Value
from .epilogue import EpilogueLowering
from .settings import FAILED, SETTINGS, Bad, batch_ok, dtype_converter, layout_converter, schedule_converter
from .vocabulary import NAME_RE, OPERAND_DIMS, SLICE_FORMS, SLICEABLE

# --- lowering: AST → IR ----------------------------------------------------------------------------------

class Lowering(EpilogueLowering):
    """Resolves names and fills defaults, collecting every Diagnostic instead of stopping at the first."""

    def __init__(self, file: str):
        self.file = file
        self.diags: list[Diagnostic] = []

    def error(self, code: str, message: str, pos: Pos, valid: Sequence[str] = ()) -> None:
        self.diags.append(Diagnostic(message, pos, tuple(valid), code=code))

    def atom(self, atom: Atom, convert: Callable[[Atom], Any], failed: Any = None) -> Any:
        """One atom → its typed value; ``failed`` (None unless given) after reporting why it does not fit."""
        try:
            return convert(atom)
        except Bad as bad:
            self.error(bad.code, bad.message, atom.pos, bad.valid)
            return failed

    def fixed(self, value: Value, convert: Callable[[Atom], Any], choice_message: str) -> Any:
        """One atom → its typed value where choices ``{…}`` are not allowed; None after reporting a choice
        (``choice-not-allowed`` with ``choice_message``) or a value that does not fit."""
        if isinstance(value, ChoiceNode):
            self.error("choice-not-allowed", choice_message, value.pos)
            return None
        return self.atom(value, convert)

    def fixed_layout(self, d: Decl, applies: bool, misplaced: str, choice_message: str) -> Layout | None:
        """``d``'s layout (row when none is written); None after reporting one written where it does not apply
        (``bad-layout`` with ``misplaced``), a choice or an unknown layout."""
        if d.layout is None:
            return Layout.row
        if not applies:
            self.error("bad-layout", misplaced, d.layout.pos)
            return None
        return self.fixed(d.layout, layout_converter(d.name), choice_message)

    # program and kernels

    def setting(self, item: SettingNode, k: KernelNode, rules: Mapping[Any, Any], first_at: dict[str, Pos],
                setting_pos: dict[str, Pos], values: dict[str, Any]) -> None:
        """Read one GEMM setting of kernel ``k`` (a name of :data:`~ucutlass.lang.settings.SETTINGS`) into
        ``values``, its position into ``setting_pos``; ``duplicate-setting`` when ``first_at`` has it already.
        ``rules`` (target → rules module) lists the target's own schedules first among the valid ones."""
        if item.name in first_at:
            self.error("duplicate-setting", f"{item.name} is set twice (first at line "
                       f"{first_at[item.name].line})", item.name_pos)
            return
        first_at[item.name] = item.name_pos
        convert = SETTINGS[item.name].convert
        if item.name == "schedule":
            convert = schedule_converter(k, rules)
        value = self.value(item.name, item.value, convert)
        setting_pos[item.name] = item.value.pos
        if value is not FAILED:
            values[item.name] = value

    def first_declaration(self, item: Decl, what: str, declared: set[str], first_at: dict[str, Pos]) -> bool:
        """Records the declaration of an operand or scale (in ``declared`` and at ``first_at['.' + name]``); False
        after reporting ``duplicate-operand`` (``what`` names it in the message) when it was declared before."""
        if item.name in declared:
            self.error("duplicate-operand", f"{what} is declared twice (first at line "
                       f"{first_at['.' + item.name].line})", item.name_pos)
            return False
        declared.add(item.name)
        first_at["." + item.name] = item.name_pos
        return True

    def check_batch(self, operands: Mapping[str, Operand], inputs: Sequence[EpilogueInput]) -> None:
        """Batch dims (CUTLASS's mode L): a, b, d (and c) declare the same ones; epilogue inputs the same or none.

        Leading dims that only a and d would have are not declared: a row-major ``a : bf16[M, K]`` takes a
        ``[batch, seq, K]`` tensor and folds its leading dims into M.
        """
        if "a" not in operands:
            return  # a did not lower: its error says why
        batch = operands["a"].batch
        for op in operands.values():
            if op.batch != batch and not (op.name == "b" and not op.batch):  # b without batch dims: shared
                self.error("bad-dims", f"{op.name} has batch dims [{', '.join(op.batch)}] but a has "
                           f"[{', '.join(batch)}]: a, b, c and d declare the same batch dims in the same order "
                           "(together the batch mode L; b may have none: one b for every batch); a leading dim of a "
                           "and d alone is not declared, it folds into M (a : bf16[M, K] row takes a [batch, seq, K] "
                           "tensor)", op.pos, (f"[{', '.join(batch + op.dims)}]",))
        for inp in inputs:
            if inp.batch and inp.batch != batch:
                self.error("bad-dims", f"epilogue input {inp.name} has batch dims [{', '.join(inp.batch)}]; it takes "
                           f"the kernel's batch dims [{', '.join(batch)}] (one per batch) or none (shared by all "
                           "batches)", inp.pos, (f"[{', '.join(batch + inp.dims)}]", f"[{', '.join(inp.dims)}]"))

    def scale(self, d: Decl) -> ir.Scale | None:
        """``scale_a : f32 <- sa`` (per tensor) or ``scale_a : f32[M, K/128] row <- x_scale`` (per 1x128 block)."""
        name = d.name
        mn = "M" if name == "scale_a" else "N"
        example = f"{name} : f32[{mn}, K/128] row" if name == "scale_a" else f"{name} : f32[N/128, K/128] row"
        no_choice = f"{name}: choices {{…}} are not allowed in scale factors"
        dtype = self.fixed(d.dtype, dtype_converter(name), no_choice)
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        if dims:
            parts = []
            for dim in dims:
                base, _, div = dim.partition("/")
                parts.append(base)
                if div and (not div.isdigit() or int(div) < 1):
                    self.error("bad-dims", f"{name}: {dim}: a block size is a whole number > 0, as in K/128",
                               d.dims.pos, ("K/128",))
                    ok = False
            if sorted(parts) != sorted((mn, "K")):
                self.error("bad-dims", f"{name} is declared over [{', '.join(dims)}]; a scale of "
                           f"{ir.SCALE_OPERANDS[name]} is over [{mn}/BLOCK, K/BLOCK] (either order; no divisor: a "
                           f"block of 1), e.g. {example}, or has no dims (one scale for the tensor)",
                           d.dims.pos, (f"[{mn}, K/128]", f"[{mn}/128, K/128]", "no dims"))
                ok = False
        layout = self.fixed_layout(d, bool(dims), f"{name}: a per-tensor scale (no dims) has no layout", no_choice)
        ok &= layout is not None
        binding = None
        if d.source is not None:
            if d.source.kind != "in":
                self.error("bad-binding", f"{name} is an input: bind it with '<-' ({name} : ... <- NAME)",
                           d.source.pos, ("<-",))
                ok = False
            else:
                binding = d.source.text
        if not ok:
            return None
        return ir.Scale(name, dtype, tuple(dims), layout, binding, d.pos)  # type: ignore[arg-type]

    # values and choices

    def value(self, what: str, value: Value, convert: Callable[[Atom], Any]) -> Any:
        """One atom → typed value; a choice → :class:`Choice`. Returns ``FAILED`` after reporting."""
        if isinstance(value, Atom):
            return self.atom(value, convert, FAILED)
        options, spellings, positions, ok = [], [], [], True
        for atom in value.items:
            typed = self.atom(atom, convert, FAILED)
            if typed is FAILED:
                ok = False
                continue
            if atom.text in spellings or typed in options:
                self.error("duplicate-option", f"{atom.text} is listed twice in the choice for {what}", atom.pos)
                ok = False
                continue
            options.append(typed)
            spellings.append(atom.text)
            positions.append(atom.pos)
        return Choice(tuple(options), tuple(spellings), value.pos, tuple(positions)) if ok else FAILED

    # operands

    def operand(self, d: Decl, setting_pos: dict[str, Pos]) -> Operand | None:
        ok = True
        name = d.name
        expected = OPERAND_DIMS[name]
        dtype = self.value(f"{name}.dtype", d.dtype, dtype_converter(name))
        setting_pos[f"{name}.dtype"] = d.dtype.pos
        ok &= dtype is not FAILED
        example = f"{name} : bf16[{', '.join(expected)}] row"
        if d.dims is None:
            self.error("bad-dims", f"{name} needs its dims, e.g. {example}", d.dtype.pos,
                       (f"[{', '.join(expected)}]",))
            ok = False
        elif sorted(d.dims.names[-2:]) != sorted(expected) or not batch_ok(d.dims.names[:-2]):
            valid = (f"[{', '.join(expected)}]", f"[{', '.join(reversed(expected))}]")
            self.error("bad-dims", f"{name} is declared over [{', '.join(d.dims.names)}]; {name} must be over "
                       f"{valid[0]} or {valid[1]}, after any batch dims ([B, H, {', '.join(expected)}]: distinct "
                       "names other than M, N, K)", d.dims.pos, valid)
            ok = False
        layout: Any = Layout.row
        if d.layout is not None:
            layout = self.value(f"{name}.layout", d.layout, layout_converter(name))
            setting_pos[f"{name}.layout"] = d.layout.pos
            ok &= layout is not FAILED
        binding = None
        if d.source is not None:
            binding = d.source.text
            if d.source.kind == "literal":
                self.error("bad-binding", f"operand {name} is a tensor; only an epilogue scalar takes a value",
                           d.source.pos)
                ok = False
            elif name == "d" and d.source.kind == "in":
                self.error("bad-binding", f"d is the output: bind it with '->' (d : ... -> {binding})",
                           d.source.pos, ("->",))
                ok = False
            elif name != "d" and d.source.kind == "out":
                self.error("bad-binding", f"{name} is an input: bind it with '<-' ({name} : ... <- {binding})",
                           d.source.pos, ("<-",))
                ok = False
        view = self.slice(d.source) if d.source is not None and d.source.kind == "in" else ()
        if not ok or view is None:
            return None
        names = d.dims.names  # type: ignore[union-attr]
        return Operand(name, dtype, names[-2:], layout, binding, d.pos, batch=names[:-2], slice=view)

    def slice(self, source: SourceNode) -> tuple[str, ...] | None:
        """``<- x[:, -keep:]`` → ``(":", "-keep:")`` (() when there is no slice); None after reporting an entry
        other than ``:``, ``NAME:`` or ``-NAME:`` (NAME an axis of the problem)."""
        if source.slice is None:
            return ()
        entries, ok = [], True
        for start, stop, pos in source.slice.dims:
            written = f"{start}:{stop}"
            if stop or (start and not NAME_RE.fullmatch(start.lstrip("-"))):
                self.error("bad-binding", f"slice entry {written!r} of {source.text}[...] is not supported; an entry "
                           "is ':' (the whole dim), 'NAME:' (from axis NAME to the end) or '-NAME:' (the last NAME), "
                           "NAME an axis of the problem", pos, SLICE_FORMS)
                ok = False
            entries.append(written)
        return tuple(entries) if ok else None

    def misplaced_slices(self, k: KernelNode) -> None:
        """A slice (``<- x[...]``) binds a GEMM's a, b or c only: report it anywhere else (``bad-binding``)."""
        decls = [it for it in k.items if isinstance(it, Decl)]
        epilogue = [it for e in k.items if isinstance(e, EpilogueNode) for it in e.items if isinstance(it, Decl)]
        for d, kernel_level in [(d, True) for d in decls] + [(d, False) for d in epilogue]:
            if d.source is None or d.source.slice is None:
                continue
            if kernel_level and d.name in SLICEABLE.get(k.family, ()):
                continue
            where = "an output" if d.source.kind == "out" else f"{d.name} of a {k.family} kernel" if kernel_level \
                else f"epilogue input {d.name}"
            self.error("bad-binding", f"a slice (<- NAME[...]) binds a gemm kernel's a, b or c only, not {where}",
                       d.source.slice.pos, ("a", "b", "c"))
