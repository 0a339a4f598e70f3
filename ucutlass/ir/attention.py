"""The attention kernel (FMHA forward): O = softmax(mod(scale · Q·Kᵀ)) · V [, LSE].

``mod`` is the score modifier of the variants, in this order: logit soft-capping (``softcap``: s ↦ c·tanh(s / c), as
Gemma 2/3), an additive ``bias`` ([Sq, Sk], [B, Sq, Sk] or [B, 1, Sq, Sk]: broadcast over heads, and over batches when
it has no B), the causal mask and the sliding ``window`` (query i sees keys j ≥ i − window). ``scale`` and
``softcap`` may be problem scalars (:attr:`AttentionKernel.scalars`). Head dims 96 and 192 run on the 128 and 256 tiles
(:func:`padded_head_dim`).

Grouped-query attention (GQA: query head h reads KV head h / (Hq / Hkv), K and V never repeated in memory) and
an optional LSE output (natural-log log-sum-exp of the scaled scores per row, as ``torch.logsumexp``, f32
[B, Hq, Sq]). Language: :mod:`ucutlass.lang.attention`; rules: :mod:`ucutlass.arch.sm90_attention`,
:mod:`ucutlass.arch.sm100_attention`; rendering: :mod:`ucutlass.codegen.attention`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import Pos
from .operands import EpilogueInput, Operand
from .values import Choice, DType, canonical_json, spell_setting

#: Masks: ``none`` (every key; keys past Sk masked by the collective's residual fusion) or ``causal`` (query i
#: sees keys j ≤ i, top-left aligned like torch's ``is_causal``). The 88 and 77 collectives have no sliding window.
MASKS = ("none", "causal")
#: Settings of an attention kernel, in report order.
ATTENTION_SETTINGS = ("target", "mask", "scale", "tile", "schedule", "stages", "persistent")
#: Extents passed at run time, in ``extents`` order.
EXTENTS = ("B", "Sq", "Sk", "Hq", "Hkv", "D")
#: Variant fields and their defaults: left out of the digest at their default, so older kernels keep their digests.
VARIANT_DEFAULTS = {"bias": None, "softcap": None, "window": None, "scalars": (), "scores": "f32"}
#: Score precision: ``f32`` (the FMHA's) or ``eager`` (each step of the modifier rounded to the operands' dtype, as an
#: eager PyTorch reference computing ``q @ k.T * scale``, ``/ c``, ``tanh``, ``* c``, ``+ mask`` in bf16 does).
SCORES = ("f32", "eager")
#: Head dims run on a wider tile: D zero-filled to it by TMA (88's can_implement takes D ≤ the tile's head dim).
PADDED_HEAD_DIMS = {96: 128, 192: 256}


def padded_head_dim(d: int) -> int:
    """The tile head dim a head dim ``d`` runs on: 96 → 128, 192 → 256 (Q·Kᵀ and P·V cost 128/96 = 4/3 of the
    FLOPs; the zero columns add nothing to the scores and the padded O columns are not stored), else ``d``."""
    return PADDED_HEAD_DIMS.get(d, d)


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
    #: additive score bias (bf16/f16/f32 [Sq, Sk], [B, Sq, Sk] or [B, 1, Sq, Sk]), added after scale and softcap
    bias: Operand | None = None
    #: soft-capping c (f32 > 0: s ↦ c·tanh(s / c) on the scaled scores), None = off; see ``scalars`` for a bound one
    softcap: Any = None
    #: sliding window: query i sees keys j with i − window ≤ j (None = unbounded)
    window: Any = None
    #: ``scale`` / ``softcap`` read from problem scalars at run time (kind scalar, value None), declaration order
    scalars: tuple[EpilogueInput, ...] = ()
    #: score precision (:data:`SCORES`)
    scores: Any = "f32"

    family = "attention"

    @property
    def operands(self) -> tuple[Operand, ...]:
        """Operands in ABI order: q, k, v, o[, lse][, bias]."""
        return tuple(op for op in (self.q, self.k, self.v, self.o, self.lse, self.bias) if op is not None)

    @property
    def tile_head_dim(self) -> int:
        """The head dim of the compiled tile (:func:`padded_head_dim`)."""
        return padded_head_dim(self.head_dim)

    def scalar(self, name: str) -> EpilogueInput | None:
        """The problem scalar bound to ``scale`` or ``softcap``, if any."""
        return next((s for s in self.scalars if s.name == name), None)

    @property
    def has_softcap(self) -> bool:
        """Soft-capping on (a literal or a problem scalar)."""
        return self.softcap is not None or self.scalar("softcap") is not None

    @property
    def is_variant(self) -> bool:
        """True when the scores need our score modifier (bias, softcap, window) rather than 88's fusions."""
        return self.bias is not None or self.has_softcap or self.window is not None or self.scores == "eager"

    @property
    def dtype(self) -> DType:
        """Element type of Q, K, V and O."""
        return self.q.dtype

    def choices(self) -> dict[str, Choice]:
        """Open choices keyed by setting name."""
        return {key: getattr(self, key) for key in ATTENTION_SETTINGS + ("softcap", "window", "scores")
                if isinstance(getattr(self, key), Choice)}

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
        for s in self.scalars:
            parts.append(f"{s.name}arg")
        if self.softcap is not None:
            parts.append("cap" + spell(self.softcap).replace(".", "p"))
        if self.window is not None:
            parts.append("win" + spell(self.window))
        if self.bias is not None:
            parts.append("bias" + "".join(d.lower() for d in self.bias.dims))
        if self.scores != "f32":
            parts.append(f"scores{spell(self.scores)}")
        return "_".join(parts)

    def build_config(self) -> "AttentionKernel":
        """What the compiled code depends on: the whole kernel (no run-time settings)."""
        return self

    def digest(self) -> str:
        """Stable sha256 of the semantic fields (positions excluded; variant fields only when set)."""
        data = json.loads(canonical_json(self))
        for key, default in VARIANT_DEFAULTS.items():
            if data.get(key) in (None, [], default):
                data.pop(key, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def build_digest(self) -> str:
        """Equal for kernels that share one compiled binary (= :meth:`digest`)."""
        return self.digest()


def head_ratio(kernel: AttentionKernel) -> bool:
    """True when K and V are declared over their own head count (``Hkv``: GQA possible), False for ``Hq``."""
    return kernel.k.dims[2 if kernel.layout == "bshd" else 1] != "Hq"
