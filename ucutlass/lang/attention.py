"""Attention (FMHA forward): lowering of ``kernel NAME : attention { … }``.

O = softmax(scale · Q·Kᵀ [+ causal mask]) · V per (batch, query head), with grouped-query attention (GQA:
query head h reads KV head h / (Hq / Hkv), K and V never repeated in memory) and an optional LSE output
(natural-log log-sum-exp of the scaled scores per row, as ``torch.logsumexp``, f32 [B, Hq, Sq]).

The kernels are CUTLASS's FMHA collectives, used from the installed ``nvidia-cutlass`` wheel and never copied:
sm90 builds ``cutlass::fmha::kernel::FmhaBuilder`` of ``examples/88_hopper_fmha`` (templates/sm90_fmha.cu.j2),
sm100 the ``Sm100FmhaFwdKernelTmaWarpspecialized`` of ``examples/77_blackwell_fmha`` (templates/sm100_fmha.cu.j2);
the two sets of headers never meet in one translation unit. Rules: :mod:`ucutlass.arch.sm90_attention`,
:mod:`ucutlass.arch.sm100_attention`.

Language (docs/DSL.md, "Attention")::

    kernel attn : attention {
      target = sm90
      q : bf16[B, Sq, Hq, 128] <- q         # BSHD ([B, S, H, D], PyTorch's (batch, seq, heads, dim))
      k : bf16[B, Sk, Hkv, 128] <- k        # or BHSD: [B, Hkv, Sk, 128]
      v : bf16[B, Sk, Hkv, 128] <- v
      o : bf16[B, Sq, Hq, 128] -> out
      lse : f32[B, Hq, Sq] -> lse           # optional
      mask = causal   scale = auto          # auto = 1/sqrt(D)
      tile = {128x128, 128x64}   schedule = {cooperative, pingpong}   persistent = {auto, true}   stages = auto
    }

Variants (:mod:`ucutlass.ir.attention`): ``softcap = 30.0`` (or ``softcap : f32 <- attn_logit_softcapping``, a
problem scalar), ``scale : f32 <- scaling`` (a problem scalar), ``window = 256`` (keys j ≥ i − 256), an additive
``bias : bf16[Sq, Sk] <- mask`` (or ``[B, Sq, Sk]``, ``[B, 1, Sq, Sk]``), head dims 96 and 192.

C ABI (the GEMM one, :mod:`ucutlass.codegen`): ``ucut_run(ptrs, scalars, extents, knobs, workspace, bytes,
stream)`` with ptrs ``q, k, v, o[, lse][, bias]``, scalars the bound ``scale`` / ``softcap`` in declaration order,
extents :data:`EXTENTS` and no knobs.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import did_you_mean
from ..ir.attention import SCORES
from ..ir import MASKS, AttentionKernel, DType, EpilogueInput, EpilogueInputKind, Layout, Operand, Pos, Schedule, Target
from .ast import Decl, SettingNode
from .settings import FAILED, SETTINGS, Bad, dtype_converter, stages_value

#: Schedules an attention kernel names (CUTLASS's KernelTmaWarpSpecializedCooperative / Pingpong on sm90).
SCHEDULES = ("auto", "cooperative", "pingpong")
#: ``persistent`` values: auto (the arch rule picks), true, false.
PERSISTENT = ("auto", "true", "false")

_OPERANDS = ("q", "k", "v", "o", "lse", "bias", "scale", "softcap")
_REQUIRED = ("q", "k", "v", "o")
#: Dims a bias may have: one [Sq, Sk] matrix for every batch and head, or one per batch.
BIAS_DIMS = (("Sq", "Sk"), ("B", "Sq", "Sk"), ("B", "1", "Sq", "Sk"))
#: Scalars an attention kernel may read from the problem (``NAME : f32 <- scalar``).
SCALARS = ("scale", "softcap")


# --- lowering ---------------------------------------------------------------------------------------------

def _bool_or_auto(atom) -> bool | None:

    if atom.kind == "name" and atom.text in PERSISTENT:
        return {"auto": None, "true": True, "false": False}[atom.text]
    raise Bad(f"persistent = {atom.text} is not one of auto, true, false{did_you_mean(atom.text, PERSISTENT)}",
              PERSISTENT)


def _tile2(atom) -> tuple[int, int]:

    if atom.kind == "shape":
        parts = tuple(int(p) for p in atom.text.split("x"))
        if len(parts) == 2 and all(p > 0 for p in parts):
            return parts  # type: ignore[return-value]
    raise Bad(f"tile = {atom.text} is not an attention tile BlockQ x BlockKV, e.g. 128x128",
              ("128x128", "128x64", "256x128"))


def _scale(atom) -> float | None:

    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number":
        value = float(atom.text)
        if value > 0 and math.isfinite(value):
            return value
    raise Bad(f"scale = {atom.text} is neither auto (1/sqrt(D)) nor a positive number", ("auto", "0.125"))


def _softcap(atom) -> float | None:

    if atom.kind == "name" and atom.text == "none":
        return None
    if atom.kind == "number":
        value = float(atom.text)
        if value > 0 and math.isfinite(value):
            return value
    raise Bad(f"softcap = {atom.text} is neither none nor a positive number (s -> c*tanh(s/c))", ("none", "30.0"))


def _window(atom) -> int | None:

    if atom.kind == "name" and atom.text == "none":
        return None
    if atom.kind == "number" and atom.text.isdigit() and int(atom.text) > 0:
        return int(atom.text)
    raise Bad(f"window = {atom.text} is neither none nor a positive integer (keys j >= i - window)",
              ("none", "256"))


def _enum(setting: str, valid: tuple[str, ...], convert=lambda t: t):
    def fn(atom):

        if atom.kind == "name" and atom.text in valid:
            return convert(atom.text)
        raise Bad(f"{setting} = {atom.text} is not one of {', '.join(valid)}{did_you_mean(atom.text, valid)}",
                  valid)
    return fn


def _settings():

    return {
        "target": SETTINGS["target"].convert,
        "mask": _enum("mask", MASKS),
        "scale": _scale,
        "tile": _tile2,
        "schedule": _enum("schedule", SCHEDULES, Schedule),
        "stages": stages_value,
        "persistent": _bool_or_auto,
        "accum": _enum("accum", ("f32",), DType),
        "softcap": _softcap,
        "window": _window,
        "scores": _enum("scores", SCORES),
    }


#: Defaults of the settings (typed): sm90, no mask, scale 1/sqrt(D), 128x128, auto schedule/stages/persistence.
ATTENTION_DEFAULTS: dict[str, Any] = {"target": Target.sm90, "mask": "none", "scale": None, "tile": (128, 128),
                                      "schedule": Schedule.auto, "stages": None, "persistent": None,
                                      "accum": DType.f32, "softcap": None, "window": None,
                                      "scores": "f32"}


def lower_attention(low, k) -> AttentionKernel | None:
    """Lower one ``kernel NAME : attention { … }`` AST (called by :mod:`ucutlass.lang.lower`).

    Args:
        low: the :class:`~ucutlass.lang.lowering.Lowering` collecting diagnostics (``low.error``, ``low.value``,
            ``low.fixed``).
        k: the kernel's AST (:class:`~ucutlass.lang.ast.KernelNode`).

    Returns:
        The kernel, or None after reporting errors (codes as the GEMM's: ``unknown-setting``,
        ``duplicate-setting``, ``bad-value``, ``unknown-operand``, ``duplicate-operand``, ``missing-operand``,
        ``bad-dims``, ``bad-binding``, ``unknown-dtype``, ``choice-not-allowed``, ``unsupported``).
    """

    before = len(low.diags)
    conv = _settings()
    values: dict[str, Any] = {}
    setting_pos: dict[str, Pos] = {}
    decls: dict[str, Decl] = {}
    for item in k.items:
        if isinstance(item, SettingNode):
            if item.name not in conv:
                hint = (f"; did you mean mask = {item.name}?" if item.name in MASKS and item.name != "none"
                        else did_you_mean(item.name, list(conv)))
                low.error("unknown-setting", f"unknown attention setting {item.name!r}{hint}", item.name_pos,
                          tuple(conv))
                continue
            if item.name in setting_pos:
                low.error("duplicate-setting", f"{item.name} is set twice (first at line "
                          f"{setting_pos[item.name].line})", item.name_pos)
                continue
            setting_pos[item.name] = item.value.pos
            value = low.value(item.name, item.value, conv[item.name])
            if value is not FAILED:
                values[item.name] = value
        elif isinstance(item, Decl):
            if item.name not in _OPERANDS:
                low.error("unknown-operand", f"{item.name!r} is not an attention operand", item.name_pos, _OPERANDS)
            elif item.name in decls:
                low.error("duplicate-operand", f"operand {item.name} is declared twice (first at line "
                          f"{decls[item.name].name_pos.line})", item.name_pos)
            else:
                decls[item.name] = item
        else:
            low.error("unsupported", "an attention kernel has no epilogue block", item.pos)
    missing = [n for n in _REQUIRED if n not in decls]
    if missing:
        low.error("missing-operand", f"attention kernel {k.name} needs q, k, v and o; missing: {', '.join(missing)}",
                  k.name_pos, tuple(f"{n} : bf16[B, S{'q' if n in 'qo' else 'k'}, H{'q' if n in 'qo' else 'kv'}, "
                                    "128]" for n in missing))
    ops: dict[str, Operand] = {}
    scalars = _scalars(low, decls, setting_pos, values)
    layout, head_dim = None, None
    for name in ("q", "k", "v", "o", "lse", "bias"):
        d = decls.get(name)
        if d is None:
            continue
        dtype = low.fixed(d.dtype, dtype_converter(name),
                          f"{name}: a dtype choice {{…}} is not supported for attention operands")
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        dpos = d.dims.pos if d.dims is not None else d.pos
        if name == "bias":
            if dims not in BIAS_DIMS:
                low.error("bad-dims", f"bias is over [{', '.join(dims)}]; it must be [Sq, Sk] (every batch and head), "
                          "[B, Sq, Sk] or [B, 1, Sq, Sk] (one per batch, every head)", dpos,
                          tuple(f"[{', '.join(b)}]" for b in BIAS_DIMS))
                ok = False
            if dtype is not None and dtype not in (DType.bf16, DType.f16, DType.f32):
                low.error("unknown-dtype", f"bias is {dtype.value}; it is bf16, f16 or f32", d.dtype.pos,
                          ("bf16", "f16", "f32"))
                ok = False
        elif name == "lse":
            if dims != ("B", "Hq", "Sq"):
                low.error("bad-dims", f"lse is over [{', '.join(dims)}]; it must be f32[B, Hq, Sq]", dpos,
                          ("[B, Hq, Sq]",))
                ok = False
            if dtype is not None and dtype is not DType.f32:
                low.error("unknown-dtype", f"lse is {dtype.value}; the collectives write it as f32", d.dtype.pos,
                          ("f32",))
                ok = False
        else:
            seq = ("Sq",) if name in ("q", "o") else ("Sk", "Sq")
            heads = ("Hq",) if name in ("q", "o") else ("Hkv", "Hq")
            this_layout = None
            if len(dims) == 4 and dims[0] == "B" and dims[3].isdigit():
                if dims[1] in seq and dims[2] in heads:
                    this_layout = "bshd"
                elif dims[2] in seq and dims[1] in heads:
                    this_layout = "bhsd"
            if this_layout is None:
                s, h = seq[0], heads[0]
                low.error("bad-dims", f"{name} is over [{', '.join(dims)}]; it must be [B, {s}, {h}, D] (BSHD) or "
                          f"[B, {h}, {s}, D] (BHSD) with D a number (the head dim)", dpos,
                          (f"[B, {s}, {h}, 128]", f"[B, {h}, {s}, 128]"))
                ok = False
            else:
                if layout is None:
                    layout, head_dim = this_layout, int(dims[3])
                elif this_layout != layout or int(dims[3]) != head_dim:
                    low.error("bad-dims", f"{name} is {this_layout.upper()} with D = {dims[3]}, but q is "
                              f"{layout.upper()} with D = {head_dim}: q, k, v and o share one layout and head dim",
                              dpos)
                    ok = False
            if dtype is not None and dtype not in (DType.bf16, DType.f16):
                low.error("unknown-dtype", f"{name} is {dtype.value}; attention takes bf16 or f16", d.dtype.pos,
                          ("bf16", "f16"))
                ok = False
        if d.layout is not None:
            low.error("bad-layout", f"{name}: attention operands take no row/col: the dim order says the layout "
                      "(BSHD or BHSD)", d.layout.pos)
            ok = False
        binding = None
        if d.source is not None:
            out = name in ("o", "lse")
            if d.source.kind == "literal":
                low.error("bad-binding", f"operand {name} is a tensor; it takes no value", d.source.pos)
                ok = False
            elif out and d.source.kind == "in":
                low.error("bad-binding", f"{name} is an output: bind it with '->'", d.source.pos, ("->",))
                ok = False
            elif not out and d.source.kind == "out":
                low.error("bad-binding", f"{name} is an input: bind it with '<-'", d.source.pos, ("<-",))
                ok = False
            binding = d.source.text
        if ok:
            ops[name] = Operand(name, dtype, dims, Layout.row, binding, d.pos)
    if all(n in ops for n in ("q", "k", "v", "o")):
        for n in ("k", "v", "o"):
            if ops[n].dtype != ops["q"].dtype:
                low.error("bad-value", f"{n} is {ops[n].dtype.value} but q is {ops['q'].dtype.value}: q, k, v and o "
                          "share one dtype", decls[n].dtype.pos, (ops["q"].dtype.value,))
        if ops["k"].dims != ops["v"].dims:
            low.error("bad-dims", "k and v must have the same dims", decls["v"].dims.pos, (", ".join(ops["k"].dims),))
        if ops["o"].dims != ops["q"].dims:
            low.error("bad-dims", "o must have the dims of q", decls["o"].dims.pos, (", ".join(ops["q"].dims),))
    if len(low.diags) > before:
        return None
    for key, default in ATTENTION_DEFAULTS.items():
        values.setdefault(key, default)
    values.pop("accum")
    return AttentionKernel(name=k.name, q=ops["q"], k=ops["k"], v=ops["v"], o=ops["o"], lse=ops.get("lse"),
                           layout=layout, head_dim=head_dim, pos=k.name_pos, setting_pos=setting_pos,
                           bias=ops.get("bias"), scalars=scalars, **values)


def _scalars(low, decls: dict[str, Decl], setting_pos: dict[str, Pos], values: dict[str, Any]
             ) -> tuple[EpilogueInput, ...]:
    """``scale : f32 <- s`` / ``softcap : f32 <- c`` (problem scalars; removed from ``decls``); ``= number`` sets
    the setting instead. Reports a scalar also set as a setting, dims, a dtype other than f32, a missing source."""
    out = []
    for name in sorted((n for n in SCALARS if n in decls), key=lambda n: decls[n].pos.start):
        d = decls.pop(name)
        if name in setting_pos:
            low.error("duplicate-setting", f"{name} is set twice: as a setting (line {setting_pos[name].line}) and "
                      "declared as a scalar", d.name_pos)
            continue
        dtype = low.fixed(d.dtype, dtype_converter(name), f"{name}: a dtype choice {{…}} is not supported")
        if dtype is not None and dtype is not DType.f32:
            low.error("unknown-dtype", f"{name} is {dtype.value}; a scalar of an attention kernel is f32", d.dtype.pos,
                      ("f32",))
            continue
        if d.dims is not None or d.layout is not None:
            low.error("bad-dims", f"{name} is a scalar: write `{name} : f32 <- NAME` (no dims, no layout)",
                      d.dims.pos if d.dims is not None else d.layout.pos)
            continue
        if d.source is None or d.source.kind == "out":
            low.error("bad-binding", f"{name} reads a problem scalar: write `{name} : f32 <- NAME` (or "
                      f"`{name} = 0.125`)", d.source.pos if d.source is not None else d.name_pos, ("<-",))
            continue
        if d.source.kind == "literal":
            value = float(d.source.text)
            if not (value > 0 and math.isfinite(value)):
                low.error("bad-value", f"{name} = {d.source.text} must be a positive number", d.source.pos)
                continue
            setting_pos[name] = d.source.pos
            values[name] = value
            continue
        if dtype is None:
            continue
        out.append(EpilogueInput(name, EpilogueInputKind.scalar, DType.f32, (), Layout.row, d.source.text, None, d.pos))
    return tuple(out)
