"""Lowering of the ``epilogue { … }`` block: inputs, outputs, statements and the expression tree of d."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from .. import ir
from ..errors import did_you_mean
from ..ir import (Acc, Binary, Cast, Const, DType, EpilogueInput, EpilogueInputKind, EpilogueOutput, Expr, Pos, Ref,
                  Src, Unary)
from .ast import Assign, BinOp, Call, ChoiceNode, Decl, EpilogueNode, NameNode, Neg, Num
from .limits import check_expression
from .settings import batch_ok, dtype_converter
from .vocabulary import ACTIVATIONS, DTYPES, EPILOGUE_DIMS, FUNCTIONS, REDUCTIONS


class EpilogueLowering:
    """The epilogue part of :class:`~ucutlass.lang.lower.Lowering` (a mixin: it reports through ``self.error``)."""

    def epilogue(self, epi: EpilogueNode | None, c_pos: Pos | None
                 ) -> tuple[tuple[EpilogueInput, ...], Expr, tuple[EpilogueOutput, ...]]:
        """The epilogue block → (inputs, the expression of d, extra outputs); errors are collected."""
        has_c = c_pos is not None
        if epi is None:
            if has_c:
                self.error("unused-input", "c is declared but there is no epilogue to read it: add "
                           "epilogue { d = acc + c }", c_pos)
            return (), Acc(), ()
        inputs: dict[str, EpilogueInput] = {}
        decl_pos: dict[str, Pos] = {}
        out_decls: dict[str, EpilogueOutput] = {}  # declared outputs (value not yet known)
        for item in epi.items:
            if isinstance(item, Decl) and item.source is not None and item.source.kind == "out":
                out = self.epilogue_output(item, decl_pos, out_decls)
                if out is not None:
                    out_decls[item.name] = out
            elif isinstance(item, Decl):
                inp = self.epilogue_input(item, decl_pos)
                if inp is not None:
                    inputs[item.name] = inp
        out_env: dict[str, Expr] = {}  # an assigned [M, N] output: what later statements read
        outputs: dict[str, EpilogueOutput] = {}
        reserved = {"acc": "the accumulator", "a": "an operand", "b": "an operand", "c": "an operand",
                    "d": "the output"}
        env: dict[str, Expr] = {}
        env_pos: dict[str, Pos] = {}
        assigned_later = {item.name for item in epi.items if isinstance(item, Assign)}
        used_inputs: set[str] = set()
        used_names: set[str] = set()
        failed: set[str] = set()  # intermediates whose expression had an error (already reported)
        final: Expr | None = None
        for item in epi.items:
            if not isinstance(item, Assign):
                continue
            if final is not None:
                self.error("bad-assignment", f"d must be the last assignment of the epilogue; {item.name} is "
                           "assigned after it", item.name_pos)
                continue
            ctx = ExprContext(has_c, inputs, decl_pos, env, assigned_later, used_inputs, used_names, failed,
                              out_decls, out_env)
            if item.name in out_decls:
                self.output_statement(item, out_decls[item.name], ctx, outputs, out_env)
                continue
            expr = self.bounded(self.expr(item.expr, ctx), item.name_pos)
            if item.name == "d":
                final = expr if expr is not None else Acc()
                continue
            if item.name in reserved:
                self.error("bad-assignment", f"{item.name} is {reserved[item.name]}; assign intermediate "
                           "values to new names and the result to d", item.name_pos)
            elif item.name in inputs or item.name in decl_pos:
                self.error("bad-assignment", f"{item.name} is an epilogue input (line {decl_pos[item.name].line}); "
                           "assign to a new name", item.name_pos)
            elif item.name in FUNCTIONS:
                self.error("bad-assignment", f"{item.name} is a function name", item.name_pos)
            elif item.name in env:
                self.error("bad-assignment", f"{item.name} is assigned twice (first at line "
                           f"{env_pos[item.name].line})", item.name_pos)
            elif expr is not None:
                env[item.name] = expr
                env_pos[item.name] = item.name_pos
            else:
                failed.add(item.name)
        if final is None:
            self.error("missing-output", "the epilogue never assigns d: end it with d = <expression of acc>",
                       epi.pos, ("d = acc",))
            return (), Acc(), ()
        for name, out in out_decls.items():
            if name not in outputs and name not in failed:
                self.error("missing-output", f"{name} is declared as an output but never assigned: write "
                           f"{name} = <expression> before d", out.pos)
        if not any(isinstance(node, Acc) for e in (final, *(o.value for o in outputs.values()))
                   for node in ir.walk(e)):
            self.error("unused-acc", "the epilogue never reads acc (the A·B product)", expr_pos(final, epi.pos))
        for name, pos in decl_pos.items():
            if name not in used_inputs:
                self.error("unused-input", f"{name} is declared but the epilogue never reads it", pos)
        if c_pos is not None and "c" not in used_inputs:
            self.error("unused-input", "c is declared but the epilogue never reads it (e.g. d = acc + c)", c_pos)
        for name, pos in env_pos.items():
            if name not in used_names:
                self.error("unused-name", f"{name} is computed but never used", pos)
        return tuple(inputs.values()), final, tuple(outputs[n] for n in out_decls if n in outputs)

    def epilogue_output(self, d: Decl, decl_pos: Mapping[str, Pos],
                        out_decls: Mapping[str, EpilogueOutput]) -> EpilogueOutput | None:
        """An epilogue declaration with ``->``: an extra [M, N] output (Sm90AuxStore) or an [M] / [N]
        reduction output (Sm90ColReduction / Sm90RowReduction, f32 only). Its value is set by its statement."""
        name = d.name
        if name in ("acc", "a", "b", "c", "d") or name in FUNCTIONS:
            what = "a function" if name in FUNCTIONS else "reserved in the epilogue (acc, a, b, c, d)"
            self.error("bad-name", f"{name!r} is {what}; name the output something else", d.name_pos)
            return None
        first = decl_pos.get(name) or (out_decls[name].pos if name in out_decls else None)
        if first is not None:
            self.error("duplicate-input", f"{name} is declared twice (first at line {first.line})", d.name_pos)
            return None
        if isinstance(d.dtype, ChoiceNode) or isinstance(d.layout, ChoiceNode):
            where = d.dtype.pos if isinstance(d.dtype, ChoiceNode) else d.layout.pos  # type: ignore[union-attr]
            self.error("choice-not-allowed", f"{name}: choices {{…}} are not allowed in epilogue outputs", where)
            return None
        dtype = self.atom(d.dtype, dtype_converter(name))  # type: ignore[arg-type]
        if dtype is None:
            return None
        dims = d.dims.names if d.dims is not None else ()
        kind = EPILOGUE_DIMS.get(dims)
        valid = ("[M, N]", "[N, M]", "[M]", "[N]")
        if kind is None or kind is EpilogueInputKind.scalar:
            self.error("bad-output", f"epilogue output {name} is over [{', '.join(dims)}]; an extra output is "
                       "[M, N] (stored like d), [M] (a reduction over N: one value per row) or [N] (a reduction "
                       "over M: one value per column)", d.dims.pos if d.dims else d.pos, valid)
            return None
        layout = self.fixed_layout(d, kind is EpilogueInputKind.matrix,
                                   f"{name}: a layout applies to [M, N] outputs only",
                                   f"{name}: choices {{…}} are not allowed in epilogue outputs")
        if layout is None:
            return None
        if kind is not EpilogueInputKind.matrix and dtype is not DType.f32:
            self.error("bad-output", f"{name} is a reduction output ([{dims[0]}]): CUTLASS's reductions "
                       f"accumulate and store in f32; declare {name} : f32[{dims[0]}]", d.dtype.pos, ("f32",))
            return None
        return EpilogueOutput(name, kind, dtype, dims, Const(0.0), None, layout, d.source.text,  # type: ignore
                              d.pos)

    def bounded(self, expr: Expr | None, pos: Pos) -> Expr | None:
        """``expr`` (intermediates inlined) within :mod:`ucutlass.lang.limits`' depth and size, else None after
        reporting it at ``pos``: the EVT tree CUTLASS would build from it, and every walk over it, stay bounded."""
        too_big = check_expression(expr, pos) if expr is not None else None
        if too_big is None:
            return expr
        self.error(too_big.code, too_big.message, too_big.pos)
        return None

    def output_statement(self, item: Assign, out: EpilogueOutput, ctx: "ExprContext",
                         outputs: dict[str, EpilogueOutput], out_env: dict[str, Expr]) -> None:
        """``name = expr`` for a declared output: store (an [M, N] output) or reduce (``sum_n`` / ``max_n`` into
        [M], ``sum_m`` / ``max_m`` into [N]). Later statements read an [M, N] output as stored (rounded to its
        dtype, as a PyTorch reference that keeps it would); a reduction cannot be read."""
        name = item.name
        if name in outputs:
            self.error("bad-assignment", f"output {name} is assigned twice", item.name_pos)
            return
        node = item.expr
        if out.kind is EpilogueInputKind.matrix:
            value = self.bounded(self.expr(node, ctx), item.name_pos)
            if value is None:
                ctx.failed.add(name)
                return
            if out.dtype is not DType.f32:
                value = Cast(out.dtype, value, expr_pos(value, item.pos))
            out_env[name] = value
            outputs[name] = dataclasses.replace(out, value=value)
            return
        dim = out.dims[0]
        want = [f for f, (_, into) in REDUCTIONS.items() if into == dim]
        if not (isinstance(node, Call) and node.name in REDUCTIONS):
            self.error("bad-output", f"{name} is a [{dim}] reduction output: assign it a reduction, e.g. "
                       f"{name} = {want[1]}(y)", item.name_pos, tuple(want))
            ctx.failed.add(name)
            return
        op, into = REDUCTIONS[node.name]
        if into != dim:
            self.error("bad-output", f"{node.name} gives one value per {'row' if into == 'M' else 'column'} "
                       f"([{into}]) but {name} is declared [{dim}]: use {want[0]} or {want[1]}", node.pos, tuple(want))
            ctx.failed.add(name)
            return
        if len(node.args) != 1:
            self.error("bad-call", f"{node.name} takes one argument, got {len(node.args)}", node.pos)
            ctx.failed.add(name)
            return
        value = self.bounded(self.expr(node.args[0], ctx), item.name_pos)
        if value is None:
            ctx.failed.add(name)
            return
        outputs[name] = dataclasses.replace(out, value=value, reduce=op)

    def epilogue_input(self, d: Decl, decl_pos: dict[str, Pos]) -> EpilogueInput | None:
        name = d.name
        if name in ("acc", "a", "b", "c", "d") or name in ACTIVATIONS:
            what = "a function" if name in ACTIVATIONS else "reserved in the epilogue (acc, a, b, c, d)"
            self.error("bad-name", f"{name!r} is {what}; name the input something else", d.name_pos)
            return None
        if name in decl_pos:
            self.error("duplicate-input", f"{name} is declared twice (first at line {decl_pos[name].line})",
                       d.name_pos)
            return None
        decl_pos[name] = d.name_pos
        no_choice = f"{name}: choices {{…}} are not allowed in epilogue inputs yet"
        dtype = self.fixed(d.dtype, dtype_converter(name), no_choice)
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        kind = EPILOGUE_DIMS.get(dims)
        batch: tuple[str, ...] = ()
        for n in (2, 1):  # leading batch dims before [M, N], [N] or [M]
            if kind is None and len(dims) > n and dims[-n:] in EPILOGUE_DIMS and batch_ok(dims[:-n]):
                kind, batch, dims = EPILOGUE_DIMS[dims[-n:]], dims[:-n], dims[-n:]
        if kind is None:
            self.error("bad-dims", f"epilogue input {name} is over [{', '.join(dims)}]; inputs are [N] (one value "
                       "per column), [M] (per row), [M, N] (a matrix) or no dims (a scalar)",
                       d.dims.pos if d.dims else d.pos, ("[N]", "[M]", "[M, N]", "[N, M]", "no dims"))
            ok = False
        layout = self.fixed_layout(d, kind is EpilogueInputKind.matrix,
                                   f"{name}: a layout applies to [M, N] inputs only", no_choice)
        ok &= layout is not None
        binding, value = None, None
        if d.source is not None:
            if d.source.kind == "out":
                self.error("unsupported", f"{name}: extra epilogue outputs (->) come later; bind inputs with '<-'",
                           d.source.pos, ("<-",))
                ok = False
            elif d.source.kind == "in":
                binding = d.source.text
            elif kind is not EpilogueInputKind.scalar:
                self.error("bad-binding", f"{name} is a tensor; only a scalar (no dims) takes a literal value",
                           d.source.pos)
                ok = False
            else:
                value = float(d.source.text)
        if not ok:
            return None
        return EpilogueInput(name, kind, dtype, dims, layout, binding, value, d.pos,  # type: ignore[arg-type]
                             batch=batch)

    def expr(self, node: Any, ctx: "ExprContext") -> Expr | None:
        """AST expression → IR expression with intermediates inlined; None after reporting an error."""
        if isinstance(node, Num):
            return Const(float(node.text), node.pos)
        if isinstance(node, NameNode):
            return self.name(node, ctx)
        if isinstance(node, Neg):
            arg = self.expr(node.arg, ctx)
            if arg is None:
                return None
            if isinstance(arg, Const):
                return Const(-arg.value, node.pos)
            return Binary("*", Const(-1.0, node.pos), arg, node.pos)
        if isinstance(node, Call):
            if node.name == "cast":
                return self.cast(node, ctx)
            if node.name in REDUCTIONS:
                into = REDUCTIONS[node.name][1]
                self.error("bad-call", f"{node.name} reduces a whole {'row' if into == 'M' else 'column'}: use it only "
                           f"as the value of an output declared [{into}], e.g. r : f32[{into}] -> r_out then "
                           f"r = {node.name}(y)", node.pos)
                return None
            args = [self.expr(a, ctx) for a in node.args]
            if node.name not in ACTIVATIONS:
                self.error("unknown-function", f"unknown function {node.name!r}"
                           f"{did_you_mean(node.name, FUNCTIONS)}", node.pos, FUNCTIONS)
                return None
            if len(node.args) != 1:
                self.error("bad-call", f"{node.name} takes one argument, got {len(node.args)}", node.pos)
                return None
            return Unary(node.name, args[0], node.pos) if args[0] is not None else None
        assert isinstance(node, BinOp)
        lhs, rhs = self.expr(node.lhs, ctx), self.expr(node.rhs, ctx)
        if node.op == "/":
            self.error("unsupported", "'/' is not supported yet: multiply by the reciprocal (x * 0.125)",
                       node.pos, ir.BINARY_OPS)
            return None
        if lhs is None or rhs is None:
            return None
        return Binary(node.op, lhs, rhs, node.pos)

    def cast(self, node: Call, ctx: "ExprContext") -> Expr | None:
        """``cast(x, DTYPE)``: x rounded to DTYPE (a no-op for f32)."""
        to = node.args[1] if len(node.args) == 2 else None
        if not isinstance(to, NameNode) or to.name not in DTYPES:
            self.error("bad-call", "cast takes an expression and a dtype, as in cast(acc + bias, bf16)",
                       to.pos if isinstance(to, (NameNode, Num)) else node.pos, DTYPES)
            return None
        arg = self.expr(node.args[0], ctx)
        if arg is None:
            return None
        if to.name == "f32" or (isinstance(arg, Cast) and arg.dtype.value == to.name):
            return arg  # f32 is the compute type; a second rounding to the same type changes nothing
        return Cast(DType(to.name), arg, node.pos)

    def name(self, node: NameNode, ctx: "ExprContext") -> Expr | None:
        name = node.name
        if name == "acc":
            return Acc(node.pos)
        if name == "c":
            if ctx.has_c:
                ctx.used_inputs.add("c")
                return Src(node.pos)
            self.error("undefined-name", "c is not declared: declare the source operand in the kernel, e.g. "
                       "c : bf16[M, N] row <- residual", node.pos)
            return None
        if name in ctx.inputs or name in ctx.decl_pos:
            ctx.used_inputs.add(name)
            return Ref(name, node.pos) if name in ctx.inputs else None
        if name in ctx.env:
            ctx.used_names.add(name)
            return ctx.env[name]
        if name in ctx.out_env:
            return ctx.out_env[name]
        if name in ctx.outputs and ctx.outputs[name].kind is not EpilogueInputKind.matrix:
            self.error("reads-output", f"{name} is a reduction output, complete only when the kernel ends: no "
                       "statement can read it (reduce the value you need into another output)", node.pos)
            return None
        if name in ctx.outputs and name not in ctx.assigned_later and name not in ctx.failed:
            self.error("undefined-name", f"{name} is an output read before it is assigned: write {name} = … "
                       "before this statement", node.pos)
            return None
        if name in ctx.failed:
            return None
        if name in ctx.assigned_later:
            self.error("undefined-name", f"{name} is used before it is assigned", node.pos)
            return None
        if name in ACTIVATIONS:
            self.error("undefined-name", f"{name} is a function: call it, as in {name}(acc)", node.pos)
            return None
        if name in ("a", "b", "d"):
            self.error("undefined-name", f"{name} is a GEMM operand; the epilogue reads acc (= A·B) and c",
                       node.pos)
            return None
        known = ["acc"] + (["c"] if ctx.has_c else []) + list(ctx.decl_pos) + list(ctx.env)
        self.error("undefined-name", f"{name!r} is not defined{did_you_mean(name, known)}", node.pos, known)
        return None


@dataclass
class ExprContext:
    has_c: bool
    inputs: Mapping[str, EpilogueInput]
    decl_pos: Mapping[str, Pos]
    env: Mapping[str, Expr]
    assigned_later: set[str]
    used_inputs: set[str]
    used_names: set[str]
    failed: set[str]
    outputs: Mapping[str, EpilogueOutput] = dataclasses.field(default_factory=dict)  # declared outputs
    out_env: Mapping[str, Expr] = dataclasses.field(default_factory=dict)  # assigned [M, N] outputs' values


def expr_pos(expr: Expr, default: Pos) -> Pos:
    pos = getattr(expr, "pos", None)
    return pos if isinstance(pos, Pos) and pos.line else default
