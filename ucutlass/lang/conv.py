"""Convolution (``kernel NAME : conv``): lowering of an implicit-GEMM forward convolution into a ConvKernel.

```ucut
kernel subsample : conv {
  a : bf16[N, W, C] <- x          # activation, channels last (NWC; NHWC, NDHWC for 2-D, 3-D)
  b : bf16[K, S, C] <- weight     # filter KSC (KRSC, KTRSC)
  d : bf16[N, Q, K] -> out
  stride = 2   padding = 1   dilation = 1      # one number for every spatial dim, or 2x1 per dim
  epilogue { bias : bf16[K] <- conv_bias   d = gelu(acc + bias) }
}
```

The operands' dims are fixed by their number (:data:`ucutlass.ir.CONV_DIMS`): the rank (1, 2, 3 spatial dims) is
read from ``a``, and ``b`` and ``d`` must match it. The GEMM settings (tile, cluster, schedule, stages, …) mean what
they mean for a gemm over the implicit GEMM (M output pixels, N output channels K, K = C·window). The epilogue is the
gemm's over the implicit GEMM: ``[K]`` inputs (one value per output channel), scalars, an optional operand ``c``
shaped like ``d`` (a residual: CUTLASS's source C) read as ``c``, and ``[K]`` f32 outputs reduced over the output
pixels (``sum_m`` / ``max_m``: per-channel statistics, Sm90RowReduction).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .. import ir
from ..arch import CONV_RULES
from ..errors import did_you_mean
from ..ir import CONV_DIMS, ConvKernel, EpilogueInputKind, Layout, Operand, Pos
from .ast import Atom, ChoiceNode, Decl, KernelNode, SettingNode
from .settings import DEFAULTS, FAILED, SETTINGS, Bad, dtype_converter

if TYPE_CHECKING:
    from .lowering import Lowering

_EXAMPLES = {"a": "a : bf16[N, H, W, C] <- x", "b": "b : bf16[K, R, S, C] <- weight",
             "c": "c : bf16[N, P, Q, K] <- residual", "d": "d : bf16[N, P, Q, K] -> out"}
_ROLES = {"a": "the activation", "b": "the filter", "c": "the source (a residual)", "d": "the output"}
#: The operand whose dims each operand takes (c is shaped like d).
_DIMS_OF = {"a": "a", "b": "b", "c": "d", "d": "d"}
#: The operands every conv declares (c, a source the epilogue reads as ``c``, is optional).
_REQUIRED = ("a", "b", "d")


def _traversal(setting: str, minimum: int):
    """The converter of ``stride``, ``padding``, ``dilation``: a whole number (every spatial dim) or ``2x1`` (one per
    spatial dim, outermost first)."""
    def convert(atom: Atom) -> tuple[int, ...]:
        parts = atom.text.split("x") if atom.kind in ("shape", "number") else []
        if parts and all(p.isdigit() and int(p) >= minimum for p in parts):
            return tuple(int(p) for p in parts)
        raise Bad(f"{setting} = {atom.text} is not a whole number ≥ {minimum} (every spatial dim) or one per spatial "
                  "dim such as 2x2", (str(max(1, minimum)), "2x2"))
    return convert


def _groups(atom: Atom) -> int:
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
        return int(atom.text)
    raise Bad(f"groups = {atom.text} is not a whole number > 0", ("1",))


#: The settings a conv adds to the gemm's (:data:`ucutlass.ir.CONV_SETTINGS`): converter and default.
CONV_CONVERTERS = {"stride": (_traversal("stride", 1), (1,)), "padding": (_traversal("padding", 0), (0,)),
                   "dilation": (_traversal("dilation", 1), (1,)), "groups": (_groups, 1)}
assert tuple(CONV_CONVERTERS) == ir.CONV_SETTINGS
#: Every setting name of a conv kernel.
CONV_SETTING_NAMES = tuple(SETTINGS) + ir.CONV_SETTINGS


def lower_conv(lw: "Lowering", k: KernelNode) -> ConvKernel | None:
    """Lower one ``kernel NAME : conv { … }`` AST; None after reporting errors (through ``lw.error``)."""
    values: dict[str, Any] = {}
    setting_pos: dict[str, Pos] = {}
    first_at: dict[str, Pos] = {}
    decls: dict[str, Decl] = {}
    epilogue = None
    for item in k.items:
        if isinstance(item, SettingNode):
            if item.name in CONV_CONVERTERS:
                if item.name in first_at:
                    lw.error("duplicate-setting", f"{item.name} is set twice (first at line "
                             f"{first_at[item.name].line})", item.name_pos)
                    continue
                first_at[item.name] = item.name_pos
                setting_pos[item.name] = item.value.pos
                if isinstance(item.value, ChoiceNode):
                    lw.error("choice-not-allowed", f"{item.name} is part of what the convolution computes, not a "
                             "search choice: write one value", item.value.pos)
                    continue
                value = lw.atom(item.value, CONV_CONVERTERS[item.name][0], FAILED)
                if value is not FAILED:
                    values[item.name] = value
            elif item.name in SETTINGS:
                lw.setting(item, k, CONV_RULES, first_at, setting_pos, values)
            else:
                hint = (f"; {item.name} is an operand: declare it with ':' ({_EXAMPLES[item.name]})"
                        if item.name in _EXAMPLES else did_you_mean(item.name, list(CONV_SETTING_NAMES)))
                lw.error("unknown-setting", f"unknown setting {item.name!r}{hint}", item.name_pos, CONV_SETTING_NAMES)
        elif isinstance(item, Decl):
            if item.name not in _EXAMPLES:
                lw.error("unknown-operand", f"{item.name!r} is not a conv operand (a: the activation, b: the filter, "
                         "c: a source shaped like d, d: the output); extra inputs of the epilogue are declared inside "
                         "epilogue { }" + did_you_mean(item.name, list(_EXAMPLES)), item.name_pos, tuple(_EXAMPLES))
                continue
            if "." + item.name in first_at:
                lw.error("duplicate-operand", f"operand {item.name} is declared twice (first at line "
                         f"{first_at['.' + item.name].line})", item.name_pos)
                continue
            first_at["." + item.name] = item.name_pos
            decls[item.name] = item
        else:
            if epilogue is not None:
                lw.error("duplicate-epilogue", f"a kernel has one epilogue block (first at line {epilogue.pos.line})",
                         item.pos)
                continue
            epilogue = item

    missing = [n for n in _REQUIRED if n not in decls]
    if missing:
        lw.error("missing-operand", f"conv {k.name} needs operands a (activation), b (filter) and d (output); "
                 f"missing: {', '.join(missing)}", k.name_pos, tuple(_EXAMPLES[n] for n in missing))
    rank = _rank(lw, decls.get("a"))
    operands = {name: op for name, d in decls.items() if (op := _operand(lw, d, rank, setting_pos)) is not None}
    traversal = _traversal_values(lw, values, setting_pos, rank)
    inputs, expr, outputs = _epilogue(lw, epilogue, first_at.get(".c"), rank)
    if len(lw.diags) > lw.kernel_start:
        return None
    for name in SETTINGS:
        values.setdefault(name, DEFAULTS[name])
    values.update(traversal)
    values["group_count"] = values.pop("groups", 1)
    return ConvKernel(name=k.name, a=operands["a"], b=operands["b"], c=operands.get("c"), d=operands["d"],
                      epilogue_inputs=inputs, epilogue=expr, epilogue_outputs=outputs, pos=k.name_pos,
                      setting_pos=setting_pos, **values)


def _rank(lw: "Lowering", a: Decl | None) -> int | None:
    """Spatial dims of the conv, read from ``a``'s dims (None when a is missing or has no dims)."""
    if a is None or a.dims is None:
        return None
    n = len(a.dims.names) - 2
    if n not in CONV_DIMS:
        valid = tuple(f"[{', '.join(CONV_DIMS[r]['a'])}]" for r in CONV_DIMS)
        lw.error("bad-dims", f"a is declared over [{', '.join(str(x) for x in a.dims.names)}]: a conv's activation "
                 "has 1, 2 or 3 spatial dims between N and C", a.dims.pos, valid)
        return None
    return n


def _operand(lw: "Lowering", d: Decl, rank: int | None, setting_pos: dict[str, Pos]) -> Operand | None:
    name = d.name
    ok = True
    if isinstance(d.dtype, ChoiceNode):
        dtype: Any = lw.value(f"{name}.dtype", d.dtype, dtype_converter(name))
    else:
        dtype = lw.atom(d.dtype, dtype_converter(name), FAILED)
    setting_pos[f"{name}.dtype"] = d.dtype.pos
    ok &= dtype is not FAILED
    if d.dims is None:
        lw.error("bad-dims", f"{name} needs its dims, e.g. {_EXAMPLES[name]}", d.dtype.pos)
        ok = False
    elif rank is not None and tuple(str(x) for x in d.dims.names) != CONV_DIMS[rank][_DIMS_OF[name]]:
        want = CONV_DIMS[rank][_DIMS_OF[name]]
        lw.error("bad-dims", f"{name} ({_ROLES[name]}) is declared over [{', '.join(str(x) for x in d.dims.names)}]; "
                 f"a {rank}-D conv (a over [{', '.join(CONV_DIMS[rank]['a'])}]) declares {name} over "
                 f"[{', '.join(want)}], channels last", d.dims.pos, (f"[{', '.join(want)}]",))
        ok = False
    if d.layout is not None and (isinstance(d.layout, ChoiceNode) or d.layout.text != "row"):
        lw.error("bad-layout", f"{name}: a conv's tensors are channels last (row, the default: the last dim is "
                 "contiguous); declare the dims in memory order instead", d.layout.pos, ("row",))
        ok = False
    binding = None
    if d.source is not None:
        binding = d.source.text
        if d.source.kind == "literal":
            lw.error("bad-binding", f"operand {name} is a tensor; only an epilogue scalar takes a value", d.source.pos)
            ok = False
        elif (name == "d") != (d.source.kind == "out"):
            arrow = "->" if name == "d" else "<-"
            lw.error("bad-binding", f"{name} is {'the output' if name == 'd' else 'an input'}: bind it with '{arrow}' "
                     f"({name} : ... {arrow} {binding})", d.source.pos, (arrow,))
            ok = False
    if not ok or rank is None:
        return None
    return Operand(name, dtype, CONV_DIMS[rank][_DIMS_OF[name]], Layout.row, binding, d.pos)


def _traversal_values(lw: "Lowering", values: dict[str, Any], setting_pos: dict[str, Pos],
                      rank: int | None) -> dict[str, tuple[int, ...]]:
    """``stride``, ``padding``, ``dilation`` with one entry per spatial dim (a single number repeated)."""
    out: dict[str, tuple[int, ...]] = {}
    for name in ("stride", "padding", "dilation"):
        value = values.pop(name, CONV_CONVERTERS[name][1])
        if rank is None:
            continue
        if len(value) == 1:
            value = value * rank
        elif len(value) != rank:
            lw.error("bad-value", f"{name} = {'x'.join(map(str, value))} has {len(value)} entries; a {rank}-D conv "
                     f"takes one number or {rank}", setting_pos[name],
                     (str(value[0]), "x".join([str(value[0])] * rank)))
        out[name] = value
    return out


def _epilogue(lw: "Lowering", epi: Any, c_pos: Pos | None, rank: int | None
              ) -> tuple[tuple[ir.EpilogueInput, ...], ir.Expr, tuple[ir.EpilogueOutput, ...]]:
    """The gemm's epilogue lowering on the implicit GEMM: ``[K]`` declarations are its ``[N]`` (one value per output
    channel: an input row, or an f32 output reduced over the pixels with ``sum_m`` / ``max_m``), and ``c`` (at
    ``c_pos`` when declared) is readable. The IR keeps the conv's dims."""
    if epi is None:
        lw.epilogue(None, c_pos=c_pos)  # reports a declared c that nothing reads
        return (), ir.Acc(), ()
    d_dims = CONV_DIMS[rank]["d"] if rank is not None else None
    gemm_dims = {("K",): ("N",)}
    declared: dict[str, tuple[str, ...]] = {}
    items = []
    for item in epi.items:
        if isinstance(item, Decl) and item.dims is not None:
            names = tuple(str(x) for x in item.dims.names)
            if names not in gemm_dims:
                like_d = " (a tensor shaped like d is the operand c)" if names == d_dims else ""
                lw.error("unsupported", f"{item.name} is over [{', '.join(names)}]; a conv epilogue declares [K] (one "
                         f"value per output channel) or no dims (a scalar){like_d}; tensors shaped like d other than "
                         "c and d come later (CUTLASS's aux TMA copies take a GEMM's [M, N], not the conv's output "
                         "modes)", item.dims.pos, ("[K]", "no dims"))
                continue
            declared[item.name] = names
            item = dataclasses.replace(item, dims=dataclasses.replace(item.dims, names=gemm_dims[names]))
        items.append(item)
    start = len(lw.diags)
    inputs, expr, outputs = lw.epilogue(dataclasses.replace(epi, items=tuple(items)), c_pos=c_pos)
    if d_dims is not None:  # the epilogue's messages in the conv's words: [N] is [K], [M, N] is d's dims
        words = {"[M, N]": f"[{', '.join(d_dims)}]", "[N]": "[K]", "f32[N]": "f32[K]"}

        def conv_words(text: str) -> str:
            for gemm, conv in words.items():
                text = text.replace(gemm, conv)
            return text
        lw.diags[start:] = [dataclasses.replace(d, message=conv_words(d.message),
                                                valid=tuple(conv_words(v) for v in d.valid)) for d in lw.diags[start:]]
    return (tuple(dataclasses.replace(i, dims=declared[i.name]) if i.name in declared else i for i in inputs), expr,
            tuple(dataclasses.replace(o, dims=declared[o.name]) if o.name in declared else o for o in outputs))
