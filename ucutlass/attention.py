"""Attention (FMHA forward): the ``kernel NAME : attention { … }`` kind, its IR, lowering and rendering.

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

C ABI (the GEMM one, :mod:`ucutlass.codegen`): ``ucut_run(ptrs, scalars, extents, knobs, workspace, bytes,
stream)`` with ptrs ``q, k, v, o[, lse]``, no scalars, extents :data:`EXTENTS` and no knobs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import __version__
from .errors import CheckError, UcutError
from .ir import Choice, DType, Layout, Operand, Pos, Schedule, Target, canonical_json, spell_setting

__all__ = ["AttentionKernel", "ATTENTION_SETTINGS", "ATTENTION_DEFAULTS", "MASKS", "EXTENTS", "AttentionAbi",
           "abi_of", "lower_attention", "template_values", "render", "TEMPLATES", "EXAMPLE_DIRS", "head_ratio"]

#: Masks: ``none`` (every key; keys past Sk masked by the collective's residual fusion) or ``causal`` (query i
#: sees keys j ≤ i, top-left aligned like torch's ``is_causal``). The 88 and 77 collectives have no sliding window.
MASKS = ("none", "causal")
#: Settings of an attention kernel, in report order.
ATTENTION_SETTINGS = ("target", "mask", "scale", "tile", "schedule", "stages", "persistent")
#: Extents passed at run time, in ``extents`` order.
EXTENTS = ("B", "Sq", "Sk", "Hq", "Hkv", "D")
#: Examples whose headers each target's template includes (``-I<wheel>/cutlass_library/source/examples/<dir>``).
EXAMPLE_DIRS = {"sm90": "88_hopper_fmha", "sm100": "77_blackwell_fmha"}
#: Templates per target.
TEMPLATES = {Target.sm90: "sm90_fmha.cu.j2", Target.sm100: "sm100_fmha.cu.j2"}
#: Schedules an attention kernel names (CUTLASS's KernelTmaWarpSpecializedCooperative / Pingpong on sm90).
SCHEDULES = ("auto", "cooperative", "pingpong")
#: ``persistent`` values: auto (the arch rule picks), true, false.
PERSISTENT = ("auto", "true", "false")

_OPERANDS = ("q", "k", "v", "o", "lse")
_REQUIRED = ("q", "k", "v", "o")


@dataclass(frozen=True)
class AttentionKernel:
    """One FMHA forward kernel: O = softmax(scale·Q·Kᵀ, mask)·V [, LSE].

    Shapes (``layout`` ``bshd``; ``bhsd`` swaps the two middle modes): Q and O [B, Sq, Hq, D], K and V
    [B, Sk, Hkv, D] with Hq a multiple of Hkv (GQA), LSE f32 [B, Hq, Sq]. D (``head_dim``) is fixed at compile
    time; B, Sq, Sk, Hq, Hkv are run-time extents. ``tile`` is (BlockQ, BlockKV) (the collective's TileShape
    without the head dim); ``schedule`` is the sm90 DispatchPolicy (cooperative / pingpong), ``stages`` the
    KV pipeline depth (88's Tag::kStagesKV; None = the collective's default), ``persistent`` the persistent
    tile scheduler (None = auto). ``scale`` None means 1/sqrt(D).
    """

    name: str
    target: Any
    q: Operand
    k: Operand
    v: Operand
    o: Operand
    lse: Operand | None
    layout: str
    head_dim: int
    mask: Any
    scale: Any
    tile: Any
    schedule: Any
    stages: Any
    persistent: Any
    pos: Pos = field(default_factory=Pos, compare=False)
    setting_pos: Mapping[str, Pos] = field(default_factory=dict, compare=False, hash=False)

    family = "attention"

    @property
    def operands(self) -> tuple[Operand, ...]:
        """Operands in ABI order: q, k, v, o[, lse]."""
        return tuple(op for op in (self.q, self.k, self.v, self.o, self.lse) if op is not None)

    @property
    def dtype(self) -> DType:
        """Element type of Q, K, V and O."""
        return self.q.dtype

    def choices(self) -> dict[str, Choice]:
        """Open choices keyed by setting name."""
        return {key: getattr(self, key) for key in ATTENTION_SETTINGS if isinstance(getattr(self, key), Choice)}

    def is_concrete(self) -> bool:
        """True when no setting holds a :class:`~ucutlass.ir.Choice`."""
        return not self.choices()

    def resolve(self, picks: Mapping[str, Any]) -> "AttentionKernel":
        """Replace choices by picked (typed) values; unknown keys raise KeyError."""
        open_ = self.choices()
        for key in picks:
            if key not in open_:
                raise KeyError(f"kernel {self.name!r} has no open choice {key!r}; open: {sorted(open_)}")
        return dataclasses.replace(self, **dict(picks))

    def config_name(self) -> str:
        """Procedural name, e.g. ``attn_sm90_bf16_bshd_d128_causal_128x128_cooperative_s5_p0``."""
        spell = spell_setting
        parts = [self.name, spell(self.target), spell(self.dtype), self.layout, f"d{self.head_dim}",
                 spell(self.mask), spell(self.tile), spell(self.schedule), "s" + spell(self.stages),
                 "p" + spell(self.persistent)]
        if self.scale is not None:
            parts.append("sc" + spell(self.scale).replace(".", "p"))
        if self.lse is not None:
            parts.append("lse")
        return "_".join(parts)

    def build_config(self) -> "AttentionKernel":
        """What the compiled code depends on: the whole kernel (no run-time settings)."""
        return self

    def digest(self) -> str:
        """Stable sha256 of the semantic fields (positions excluded)."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def build_digest(self) -> str:
        """Equal for kernels that share one compiled binary (= :meth:`digest`)."""
        return self.digest()


def head_ratio(kernel: AttentionKernel) -> bool:
    """True when K and V are declared over their own head count (``Hkv``: GQA possible), False for ``Hq``."""
    return kernel.k.dims[2 if kernel.layout == "bshd" else 1] != "Hq"


# --- lowering ---------------------------------------------------------------------------------------------

def _bool_or_auto(atom) -> bool | None:
    from .dsl import _Bad, _did_you_mean

    if atom.kind == "name" and atom.text in PERSISTENT:
        return {"auto": None, "true": True, "false": False}[atom.text]
    raise _Bad(f"persistent = {atom.text} is not one of auto, true, false{_did_you_mean(atom.text, PERSISTENT)}",
               PERSISTENT)


def _tile2(atom) -> tuple[int, int]:
    from .dsl import _Bad

    if atom.kind == "shape":
        parts = tuple(int(p) for p in atom.text.split("x"))
        if len(parts) == 2 and all(p > 0 for p in parts):
            return parts  # type: ignore[return-value]
    raise _Bad(f"tile = {atom.text} is not an attention tile BlockQ x BlockKV, e.g. 128x128",
               ("128x128", "128x64", "256x128"))


def _scale(atom) -> float | None:
    from .dsl import _Bad

    if atom.kind == "name" and atom.text == "auto":
        return None
    if atom.kind == "number":
        value = float(atom.text)
        if value > 0 and math.isfinite(value):
            return value
    raise _Bad(f"scale = {atom.text} is neither auto (1/sqrt(D)) nor a positive number", ("auto", "0.125"))


def _enum(setting: str, valid: tuple[str, ...], convert=lambda t: t):
    def fn(atom):
        from .dsl import _Bad, _did_you_mean

        if atom.kind == "name" and atom.text in valid:
            return convert(atom.text)
        raise _Bad(f"{setting} = {atom.text} is not one of {', '.join(valid)}{_did_you_mean(atom.text, valid)}",
                   valid)
    return fn


def _settings():
    from .dsl import SETTINGS, _stages

    return {
        "target": SETTINGS["target"].convert,
        "mask": _enum("mask", MASKS),
        "scale": _scale,
        "tile": _tile2,
        "schedule": _enum("schedule", SCHEDULES, Schedule),
        "stages": _stages,
        "persistent": _bool_or_auto,
        "accum": _enum("accum", ("f32",), DType),
    }


#: Defaults of the settings (typed): sm90, no mask, scale 1/sqrt(D), 128x128, auto schedule/stages/persistence.
ATTENTION_DEFAULTS: dict[str, Any] = {"target": Target.sm90, "mask": "none", "scale": None, "tile": (128, 128),
                                      "schedule": Schedule.auto, "stages": None, "persistent": None,
                                      "accum": DType.f32}


def lower_attention(low, k) -> AttentionKernel | None:
    """Lower one ``kernel NAME : attention { … }`` AST (called by :mod:`ucutlass.dsl`'s lowering).

    Args:
        low: the ``dsl._Lowering`` collecting diagnostics (``low.error``, ``low.value``, ``low.fixed``).
        k: the kernel's AST (``dsl._Kernel``).

    Returns:
        The kernel, or None after reporting errors (codes as the GEMM's: ``unknown-setting``,
        ``duplicate-setting``, ``bad-value``, ``unknown-operand``, ``duplicate-operand``, ``missing-operand``,
        ``bad-dims``, ``bad-binding``, ``unknown-dtype``, ``choice-not-allowed``, ``unsupported``).
    """
    from .dsl import _FAILED, _Decl, _did_you_mean, _dtype_converter, _Setting

    before = len(low.diags)
    conv = _settings()
    values: dict[str, Any] = {}
    setting_pos: dict[str, Pos] = {}
    decls: dict[str, _Decl] = {}
    for item in k.items:
        if isinstance(item, _Setting):
            if item.name not in conv:
                hint = (f"; did you mean mask = {item.name}?" if item.name in MASKS and item.name != "none"
                        else _did_you_mean(item.name, list(conv)))
                low.error("unknown-setting", f"unknown attention setting {item.name!r}{hint}", item.name_pos,
                          tuple(conv))
                continue
            if item.name in setting_pos:
                low.error("duplicate-setting", f"{item.name} is set twice (first at line "
                          f"{setting_pos[item.name].line})", item.name_pos)
                continue
            setting_pos[item.name] = item.value.pos
            value = low.value(item.name, item.value, conv[item.name])
            if value is not _FAILED:
                values[item.name] = value
        elif isinstance(item, _Decl):
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
    layout, head_dim = None, None
    for name in ("q", "k", "v", "o", "lse"):
        d = decls.get(name)
        if d is None:
            continue
        dtype = low.fixed(d.dtype, _dtype_converter(name),
                          f"{name}: a dtype choice {{…}} is not supported for attention operands")
        ok = dtype is not None
        dims = d.dims.names if d.dims is not None else ()
        dpos = d.dims.pos if d.dims is not None else d.pos
        if name == "lse":
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
                           layout=layout, head_dim=head_dim, pos=k.name_pos, setting_pos=setting_pos, **values)


# --- rendering -------------------------------------------------------------------------------------------

ABI_VERSION = 4  # = ucutlass.codegen.ABI_VERSION (checked in tests)
CPP_ELEMENT = {DType.bf16: "cutlass::bfloat16_t", DType.f16: "cutlass::half_t"}


@dataclass(frozen=True)
class AttentionAbi:
    """Argument order of an attention kernel's ``ucut_run`` (the GEMM's :class:`ucutlass.codegen.Abi` fields)."""

    ptr_names: tuple[str, ...]
    scalar_names: tuple[str, ...] = ()
    extents: tuple[str, ...] = EXTENTS
    knobs: tuple[str, ...] = ()


def abi_of(kernel: AttentionKernel) -> AttentionAbi:
    """Pointers ``q, k, v, o[, lse]``; no scalars; extents B, Sq, Sk, Hq, Hkv, D; no knobs."""
    return AttentionAbi(tuple(op.name for op in kernel.operands))


def template_values(kernel: AttentionKernel, source_file: str = "<string>") -> dict:
    """The values one render of ``sm90_fmha.cu.j2`` / ``sm100_fmha.cu.j2`` takes.

    Raises:
        CheckError: open choices remain, or an arch rule is broken.
    """
    from . import arch
    from .codegen import require_renderable

    require_renderable(kernel)
    rules = arch.rules_for(kernel)
    schedule = rules.resolve_schedule(kernel)
    persistent = rules.resolve_persistent(kernel)
    stages = kernel.stages
    abi = abi_of(kernel)
    info = {"abi": ABI_VERSION, "name": kernel.name, "config": kernel.config_name(), "family": "attention",
            "target": kernel.target.value, "ptrs": list(abi.ptr_names), "scalars": [], "extents": list(EXTENTS),
            "digest": kernel.digest(), "knobs": []}
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": kernel.name,
        "config_name": kernel.config_name(),
        "operands_desc": "   ".join(f"{op.name.upper()}: {op.dtype.value}[{', '.join(op.dims)}]"
                                    for op in kernel.operands),
        "element": CPP_ELEMENT[kernel.dtype],
        "head_dim": kernel.head_dim,
        "block_q": kernel.tile[0],
        "block_kv": kernel.tile[1],
        "causal": kernel.mask == "causal",
        "bshd": kernel.layout == "bshd",
        "has_lse": kernel.lse is not None,
        "scale_expr": (repr(float(kernel.scale)) + "f") if kernel.scale is not None
        else f"(1.0f / std::sqrt(float({kernel.head_dim})))",
        "cooperative": schedule is Schedule.cooperative,
        "persistent": persistent,
        "stages": stages or 0,
        "ptr_q": 0, "ptr_k": 1, "ptr_v": 2, "ptr_o": 3,
        "ptr_lse": abi.ptr_names.index("lse") if kernel.lse is not None else -1,
        "abi_version": ABI_VERSION,
        "info_json": json.dumps(info, sort_keys=True),
    }


def render(kernel: AttentionKernel, source_file: str = "<string>") -> str:
    """C++ source of one translation unit for a concrete, checked attention kernel.

    Raises:
        CheckError: open choices or a broken rule; UcutError: no template for the target.
    """
    from .codegen import _environment

    if kernel.target not in TEMPLATES:
        raise UcutError(f"no attention template for {kernel.target}; available: sm90, sm100")
    values = template_values(kernel, source_file)
    return _environment().get_template(TEMPLATES[kernel.target]).render(**values)
