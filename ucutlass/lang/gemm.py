"""Lowering of a ``kernel NAME : gemm { … }``: settings, operands, scales and the epilogue into a GemmKernel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import ir
from ..arch import TARGET_RULES
from ..errors import did_you_mean
from ..ir import GemmKernel, Operand, Pos
from .ast import Decl, EpilogueNode, KernelNode, SettingNode
from .settings import DEFAULTS, SETTINGS
from .vocabulary import OPERAND_DIMS, REQUIRED_OPERANDS

if TYPE_CHECKING:
    from .lowering import Lowering


def lower_gemm(low: "Lowering", k: KernelNode) -> GemmKernel | None:
    """Lower one ``kernel NAME : gemm { … }`` AST; None after reporting errors (through ``low.error``)."""
    values: dict[str, Any] = {}
    setting_pos: dict[str, Pos] = {}
    first_at: dict[str, Pos] = {}
    operands: dict[str, Operand] = {}
    declared: set[str] = set()
    epilogue: EpilogueNode | None = None
    scales: dict[str, ir.Scale] = {}
    for item in k.items:
        if isinstance(item, Decl) and item.name in ir.SCALE_OPERANDS:
            if not low.first_declaration(item, item.name, declared, first_at):
                continue
            scale = low.scale(item)
            if scale is not None:
                scales[item.name] = scale
            continue
        if isinstance(item, SettingNode):
            if item.name not in SETTINGS:
                hint = (f"; {item.name} is an operand: declare it with ':' ({item.name} : bf16[...])"
                        if item.name in OPERAND_DIMS else did_you_mean(item.name, list(SETTINGS)))
                low.error("unknown-setting", f"unknown setting {item.name!r}{hint}", item.name_pos,
                          tuple(SETTINGS))
                continue
            low.setting(item, k, TARGET_RULES, first_at, setting_pos, values)
        elif isinstance(item, Decl):
            if item.name not in OPERAND_DIMS:
                if item.name in SETTINGS:
                    msg = f"{item.name} is a setting: write {item.name} = value"
                    low.error("syntax", msg, item.name_pos, (f"{item.name} =",))
                else:
                    msg = (f"{item.name!r} is not a GEMM operand; extra inputs of the epilogue are declared "
                           f"inside epilogue {{ }}")
                    low.error("unknown-operand", msg, item.name_pos, tuple(OPERAND_DIMS))
                continue
            if not low.first_declaration(item, f"operand {item.name}", declared, first_at):
                continue
            op = low.operand(item, setting_pos)
            if op is not None:
                operands[item.name] = op
        else:
            if epilogue is not None:
                low.error("duplicate-epilogue", f"a kernel has one epilogue block (first at line "
                          f"{epilogue.pos.line})", item.pos)
                continue
            epilogue = item

    missing = [n for n in REQUIRED_OPERANDS if n not in declared]
    if missing:
        examples = {"a": "a : bf16[M, K] row", "b": "b : bf16[N, K] row", "d": "d : bf16[M, N] row"}
        low.error("missing-operand", f"kernel {k.name} needs operands a, b and d; missing: "
                  f"{', '.join(missing)}", k.name_pos, tuple(examples[n] for n in missing))
    inputs, expr, outputs = low.epilogue(epilogue, c_pos=first_at.get(".c"))
    if outputs and "a" in operands and operands["a"].batch:
        low.error("unsupported", "extra epilogue outputs (->) of a batched kernel are not supported yet",
                  outputs[0].pos)
    low.check_batch(operands, inputs)
    if scales and "a" in operands and operands["a"].batch:
        low.error("unsupported", "scale_a / scale_b of a batched kernel are not supported yet",
                  next(iter(scales.values())).pos)
    if len(low.diags) > low.kernel_start:
        return None
    for name in SETTINGS:
        values.setdefault(name, DEFAULTS[name])
    return GemmKernel(
        name=k.name, a=operands["a"], b=operands["b"], c=operands.get("c"), d=operands["d"],
        epilogue_inputs=inputs, epilogue=expr, epilogue_outputs=outputs, pos=k.name_pos, setting_pos=setting_pos,
        scale_a=scales.get("scale_a"), scale_b=scales.get("scale_b"), **values)
