"""The attention kernel (FMHA forward): O = softmax(scale · Q·Kᵀ [+ causal mask]) · V [, LSE].

Grouped-query attention (GQA: query head h reads KV head h / (Hq / Hkv), K and V never repeated in memory) and
an optional LSE output (natural-log log-sum-exp of the scaled scores per row, as ``torch.logsumexp``, f32
[B, Hq, Sq]). Language: :mod:`ucutlass.lang.attention`; rules: :mod:`ucutlass.arch.sm90_attention`,
:mod:`ucutlass.arch.sm100_attention`; rendering: :mod:`ucutlass.codegen.attention`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import Pos
from .operands import Operand
from .values import Choice, DType, canonical_json, spell_setting

#: Masks: ``none`` (every key; keys past Sk masked by the collective's residual fusion) or ``causal`` (query i
#: sees keys j ≤ i, top-left aligned like torch's ``is_causal``). The 88 and 77 collectives have no sliding window.
MASKS = ("none", "causal")
#: Settings of an attention kernel, in report order.
ATTENTION_SETTINGS = ("target", "mask", "scale", "tile", "schedule", "stages", "persistent")
#: Extents passed at run time, in ``extents`` order.
EXTENTS = ("B", "Sq", "Sk", "Hq", "Hkv", "D")


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
