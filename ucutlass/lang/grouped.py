"""Grouped GEMM (``kernel NAME : grouped_gemm``): lowering, C ABI and template values.

A grouped GEMM runs one GEMM per group g, D_g = epilogue(A_g · B_gᵀ): CUTLASS's SM90 ptr-array grouped GEMM
(``examples/57_hopper_grouped_gemm``; ``target = sm100``: ``examples/75_blackwell_grouped_gemm``, compile-only
here). It takes its operands the way MoE code holds them:

- ``a : bf16[M, K] row``: the rows of every group, sorted by group (tokens sorted by expert), M = all rows;
- ``b : bf16[G, N, K] row`` (one ``nn.Linear`` weight per group, stacked) or ``b : bf16[G, K, N] row``;
- ``d : bf16[M, N] row``: the output rows, in the order of ``a``;
- the group operand, one of :data:`ucutlass.ir.GROUP_OPERANDS`: ``m_sizes : i32[G]`` (rows per group, e.g.
  ``torch.bincount(expert_ids, minlength=G)``) or ``m_offsets : i32[G]`` (cumulative row ends,
  ``m_sizes.cumsum(0)``, the ``offs`` of ``torch._grouped_mm``), ``i32`` or ``i64``.

Each group's M is read on the device at run time (a group may have 0 rows); N, K and G come from the tensors'
shapes. Epilogue inputs: ``[N]`` (one row for every group), ``[G, N]`` (one row per group: a per-expert bias),
``[M]`` (one value per row, e.g. the routing weight of each sorted token) and scalars; no ``c`` and no ``[M, N]``
inputs (CUTLASS's ptr-array epilogue would need per-group TMA descriptors for them).

The lowering is called by :mod:`ucutlass.lang.lower` for the ``grouped_gemm`` family and reuses its value readers, so
errors read the same as for ``gemm``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .. import ir
from ..arch import GROUPED_RULES
from ..errors import did_you_mean
from ..ir import EpilogueInputKind, GroupedGemmKernel, IndexType, Layout, Operand, Pos
from .ast import ChoiceNode, Decl, KernelNode, SettingNode
from .settings import DEFAULTS, FAILED, SETTINGS, Bad, dtype_converter

if TYPE_CHECKING:
    from .lowering import Lowering

#: Operands of a grouped GEMM and the dims each may be declared over, in declared order.
GROUPED_OPERAND_DIMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "a": (("M", "K"),),
    "b": (("G", "N", "K"), ("G", "K", "N")),
    "d": (("M", "N"),),
    **{name: (("G",),) for name in ir.GROUP_OPERANDS},
}
#: dtypes of the group operand.
INDEX_TYPES = tuple(t.value for t in IndexType)

_EXAMPLES = {"a": "a : bf16[M, K] row", "b": "b : bf16[G, N, K] row", "d": "d : bf16[M, N] row",
             "m_sizes": "m_sizes : i32[G]", "m_offsets": "m_offsets : i32[G]"}


def lower_grouped(lw: "Lowering", k: "KernelNode") -> GroupedGemmKernel | None:
    """Lower one ``grouped_gemm`` kernel block; errors go to ``lw`` (the :class:`~ucutlass.lang.lowering.Lowering`),
    None when any.

    The settings are the ``gemm`` ones (:data:`ucutlass.SETTINGS`); the operands are those of
    :data:`GROUPED_OPERAND_DIMS`, all row-major, and exactly one group operand.
    """

    errors_before = len(lw.diags)
    values: dict[str, Any] = {}
    setting_pos: dict[str, Pos] = {}
    first_at: dict[str, Pos] = {}
    operands: dict[str, Operand] = {}
    epilogue = None
    for item in k.items:
        if isinstance(item, SettingNode):
            if item.name not in SETTINGS:
                hint = (f"; {item.name} is an operand: declare it with ':' ({_EXAMPLES[item.name]})"
                        if item.name in _EXAMPLES else did_you_mean(item.name, list(SETTINGS)))
                lw.error("unknown-setting", f"unknown setting {item.name!r}{hint}", item.name_pos, tuple(SETTINGS))
                continue
            lw.setting(item, k, GROUPED_RULES, first_at, setting_pos, values)
        elif isinstance(item, Decl):
            if item.name not in GROUPED_OPERAND_DIMS:
                if item.name == "c":
                    lw.error("unsupported", "a grouped_gemm has no source operand c yet (CUTLASS's ptr-array epilogue "
                             "would need one C pointer per group); add per-row or per-group inputs in the epilogue",
                             item.name_pos, tuple(GROUPED_OPERAND_DIMS))
                elif item.name in SETTINGS:
                    lw.error("syntax", f"{item.name} is a setting: write {item.name} = value", item.name_pos,
                             (f"{item.name} =",))
                else:
                    lw.error("unknown-operand", f"{item.name!r} is not a grouped_gemm operand (a, b, d and the group "
                             f"operand {' or '.join(ir.GROUP_OPERANDS)}); extra inputs of the epilogue are declared "
                             "inside epilogue { }" + did_you_mean(item.name, list(GROUPED_OPERAND_DIMS)),
                             item.name_pos, tuple(GROUPED_OPERAND_DIMS))
                continue
            if "." + item.name in first_at:
                lw.error("duplicate-operand", f"operand {item.name} is declared twice (first at line "
                         f"{first_at['.' + item.name].line})", item.name_pos)
                continue
            first_at["." + item.name] = item.name_pos
            op = _operand(lw, item, setting_pos)
            if op is not None:
                operands[item.name] = op
        else:
            if epilogue is not None:
                lw.error("duplicate-epilogue", f"a kernel has one epilogue block (first at line {epilogue.pos.line})",
                         item.pos)
                continue
            epilogue = item

    declared = {key[1:] for key in first_at if key.startswith(".")}
    missing = [n for n in ("a", "b", "d") if n not in declared]
    group_ops = [n for n in ir.GROUP_OPERANDS if n in declared]
    if not group_ops:
        missing.append("m_sizes (or m_offsets)")
    if missing:
        lw.error("missing-operand", f"grouped_gemm {k.name} needs operands a, b, d and a group operand "
                 f"(m_sizes or m_offsets); missing: {', '.join(missing)}", k.name_pos,
                 tuple(_EXAMPLES[n.split()[0]] for n in missing))
    if len(group_ops) > 1:
        lw.error("duplicate-operand", "declare one group operand: m_sizes (rows per group) or m_offsets "
                 "(cumulative row ends), not both", first_at[".m_offsets"], ir.GROUP_OPERANDS)
    inputs, expr = _epilogue(lw, epilogue)
    if len(lw.diags) > errors_before:
        return None
    for name in SETTINGS:
        values.setdefault(name, DEFAULTS[name])
    return GroupedGemmKernel(
        name=k.name, a=operands["a"], b=operands["b"], c=None, d=operands["d"], groups=operands[group_ops[0]],
        epilogue_inputs=inputs, epilogue=expr, pos=k.name_pos, setting_pos=setting_pos, **values)


def _operand(lw: "Lowering", d: Any, setting_pos: dict[str, Pos]) -> Operand | None:

    name = d.name
    allowed = GROUPED_OPERAND_DIMS[name]
    is_group = name in ir.GROUP_OPERANDS
    ok = True
    if is_group:
        def convert(atom: Any) -> IndexType:
            if atom.kind == "name" and atom.text in INDEX_TYPES:
                return IndexType(atom.text)
            raise Bad(f"{name} holds row counts or offsets: its dtype is i32 or i64, not {atom.text!r}"
                      f"{did_you_mean(atom.text, INDEX_TYPES)}", INDEX_TYPES, "unknown-dtype")
        if isinstance(d.dtype, ChoiceNode):
            lw.error("choice-not-allowed", f"{name}: its dtype is the problem's, not a choice", d.dtype.pos)
            dtype: Any = FAILED
        else:
            dtype = lw.value(f"{name}.dtype", d.dtype, convert)
    else:
        dtype = lw.value(f"{name}.dtype", d.dtype, dtype_converter(name))
        setting_pos[f"{name}.dtype"] = d.dtype.pos
    ok &= dtype is not FAILED
    valid = tuple(f"[{', '.join(dims)}]" for dims in allowed)
    if d.dims is None:
        lw.error("bad-dims", f"{name} needs its dims, e.g. {_EXAMPLES[name]}", d.dtype.pos, valid)
        ok = False
    elif tuple(str(x) for x in d.dims.names) not in allowed:
        what = {"a": "the rows of all groups, sorted by group", "b": "one weight per group, stacked",
                "d": "the output rows, in the order of a"}.get(name, "one value per group")
        lw.error("bad-dims", f"{name} is declared over [{', '.join(str(x) for x in d.dims.names)}]; in a grouped_gemm "
                 f"{name} ({what}) is over {' or '.join(valid)}", d.dims.pos, valid)
        ok = False
    layout: Any = Layout.row
    if d.layout is not None:
        if is_group:
            lw.error("bad-layout", f"{name} is a vector: it takes no layout", d.layout.pos)
            ok = False
        elif isinstance(d.layout, ChoiceNode) or d.layout.text != "row":
            hint = "; for B stored K x N per group declare b : bf16[G, K, N] row" if name == "b" else ""
            lw.error("bad-layout", f"{name}: a grouped_gemm takes row-major operands only (each group's rows are "
                     f"contiguous){hint}",
                     d.layout.pos, ("row",))
            ok = False
    binding = None
    if d.source is not None:
        binding = d.source.text
        if d.source.kind == "literal":
            lw.error("bad-binding", f"operand {name} is a tensor; only an epilogue scalar takes a value", d.source.pos)
            ok = False
        elif name == "d" and d.source.kind == "in":
            lw.error("bad-binding", f"d is the output: bind it with '->' (d : ... -> {binding})", d.source.pos, ("->",))
            ok = False
        elif name != "d" and d.source.kind == "out":
            lw.error("bad-binding", f"{name} is an input: bind it with '<-' ({name} : ... <- {binding})", d.source.pos,
                     ("<-",))
            ok = False
    if not ok:
        return None
    return Operand(name, dtype, tuple(str(x) for x in d.dims.names), layout, binding, d.pos)


def _epilogue(lw: "Lowering", epi: Any) -> tuple[tuple[ir.EpilogueInput, ...], ir.Expr]:
    """The epilogue lowering (:mod:`ucutlass.lang.epilogue`), with ``[G, N]`` inputs read as per-group rows and
    ``[M, N]`` ones refused."""

    if epi is None:
        return (), ir.Acc()
    per_group: set[str] = set()
    items = []
    for item in epi.items:
        if isinstance(item, Decl) and item.dims is not None and \
                tuple(str(x) for x in item.dims.names) == ("G", "N"):
            per_group.add(item.name)
            item = dataclasses.replace(item, dims=dataclasses.replace(item.dims, names=("N",)))
        items.append(item)
    result = lw.epilogue(dataclasses.replace(epi, items=tuple(items)), c_pos=None)
    inputs, expr = result[0], result[1]
    for extra in (result[2] if len(result) > 2 else ()):  # extra outputs (->)
        lw.error("unsupported", f"{extra.name}: a grouped_gemm epilogue writes d only; extra outputs come later",
                 extra.pos, ("d",))
        break
    out = []
    for inp in inputs:
        if inp.kind is EpilogueInputKind.matrix:
            lw.error("unsupported", f"{inp.name}: a grouped_gemm epilogue takes [N], [G, N] (one row per group), "
                     "[M] (one value per row) and scalar inputs; [M, N] inputs come later", inp.pos,
                     ("[N]", "[G, N]", "[M]", "no dims"))
            continue
        if getattr(inp, "batch", ()):  # leading dims other than [G, N]'s (a batched GEMM's batch inputs)
            lw.error("bad-dims", f"{inp.name} is over [{', '.join(inp.batch + inp.dims)}]; a grouped_gemm epilogue "
                     "input is [N], [G, N] (one row per group), [M] (one value per row) or a scalar", inp.pos,
                     ("[N]", "[G, N]", "[M]", "no dims"))
            continue
        if inp.name in per_group:
            inp = dataclasses.replace(inp, dims=("G", "N"))
        out.append(inp)
    return tuple(out), expr


# --- ABI and template values ----------------------------------------------------------------------------------
