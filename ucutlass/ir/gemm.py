"""The GEMM kernel: D = epilogue(A·B [, C, extra inputs]), and its swapped (Dᵀ = B·Aᵀ) form."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import Pos
from .expr import Acc, Expr
from .operands import EpilogueInput, EpilogueOutput, Operand, Scale
from .values import (OMIT_DEFAULT, Choice, DType, EpilogueInputKind, Layout, Math, RasterOrder, ReductionMode, Setting,
                     canonical_json, spell_setting)

#: Settings of a GEMM kernel that may hold a :class:`Choice`, in report order.
GEMM_SETTINGS = ("target", "accum", "tile", "cluster", "schedule", "stages", "scheduler", "split_k", "raster",
                 "swizzle", "reduction_mode", "alignment", "swap_ab", "math")
#: ``alignment`` values (elements per access of every operand's contiguous dim, capped at 16 bytes).
ALIGNMENTS = (8, 4, 2, 1)
#: Settings passed to the kernel at run time (CUTLASS tile-scheduler arguments): they do not change the
#: compiled code, so configurations that differ only in them share one build.
RUNTIME_SETTINGS = ("split_k", "raster", "swizzle", "reduction_mode")
RUNTIME_DEFAULTS = {"split_k": 1, "raster": RasterOrder.auto, "swizzle": 1,
                    "reduction_mode": ReductionMode.deterministic}
#: The name every GEMM is compiled under (:meth:`GemmKernel.build_config`): a kernel's name changes nothing in
#: its binary, so the same configuration under two names is one build.
BUILD_NAME = "kernel"


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM kernel: D = epilogue(A·B [, C, extra inputs]).

    Shapes: A is M×K, B is K×N (declared either as ``[N, K]`` or ``[K, N]``), C and D are M×N.
    ``tile`` and ``cluster`` are (M, N, K) triples (TileShape, ClusterShape; on sm100 ``tile`` is the MMA
    tile, MmaTileShape_MNK, which a ``warpspecialized_2sm`` kernel splits over two CTAs); ``stages`` is the
    mainloop pipeline depth or None for ``auto`` (StageCountAutoCarveout). ``split_k`` (> 1: split-K
    with the stream-K scheduler), ``raster``, ``swizzle`` and ``reduction_mode`` are tile-scheduler arguments given
    at run time (:data:`RUNTIME_SETTINGS`): :meth:`build_digest` ignores them.
    """

    name: str
    target: Setting
    a: Operand
    b: Operand
    d: Operand
    c: Operand | None
    accum: Setting
    tile: Setting
    cluster: Setting
    schedule: Setting
    stages: Setting
    scheduler: Setting
    epilogue_inputs: tuple[EpilogueInput, ...] = ()
    epilogue: Expr = field(default_factory=Acc)
    #: extra outputs the epilogue stores or reduces into besides d, in declaration order (:class:`EpilogueOutput`)
    epilogue_outputs: tuple[EpilogueOutput, ...] = ()
    pos: Pos = field(default_factory=Pos, compare=False)
    # positions of each setting's value, for error messages about that setting
    setting_pos: Mapping[str, Pos] = field(default_factory=dict, compare=False, hash=False)
    # run-time settings (RUNTIME_SETTINGS): split-K factor, raster order, swizzle size, how splits add up
    split_k: Setting = 1
    raster: Setting = RasterOrder.auto
    swizzle: Setting = 1
    reduction_mode: Setting = ReductionMode.deterministic
    # elements per global access of each operand's contiguous dim (capped at 16 bytes); None = auto (16
    # bytes, TMA; ucutlass.bind lowers it to what a problem's extents allow)
    alignment: Setting = None
    #: swap AB: the kernel computes Dᵀ = B·Aᵀ (:func:`transposed`), so that the problem's N runs along the tile's M
    #: (the MMA's M side) and its few rows M (decode tokens) along the tile's N. None = auto (the target's rules
    #: decide: :func:`ucutlass.arch.resolve_swap_ab`), True or False.
    swap_ab: Setting = None
    #: how f32 a and b multiply (:class:`Math`): ``tf32`` (SM90 wgmma on TF32-rounded operands) or ``3xtf32``
    #: (about fp32 accuracy: SM80 OpMultiplyAddFastF32, ``templates/sm80_gemm_3xtf32.cu.j2``). Left out of the
    #: digest while ``tf32`` (:data:`OMIT_DEFAULT`).
    math: Setting = field(default=Math.tf32, metadata=OMIT_DEFAULT)

    # scale factors of a and b (FP8 per-tensor or blockwise, sm100 block-scaled), see Scale
    scale_a: Scale | None = None
    scale_b: Scale | None = None
    #: ``when M <= 64`` as ``("M", 64)``: the calls this kernel serves in a dispatch (:meth:`Program.dispatch`);
    #: None for the fallback and for a kernel alone. Not compared: which calls a kernel serves changes neither its
    #: code nor :meth:`digest` (the build cache key and the kernel cache see the same kernel).
    when: tuple[str, int] | None = field(default=None, compare=False)

    family = "gemm"

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The GEMM operands in ABI order: a, b, [c], d."""
        return tuple(op for op in (self.a, self.b, self.c, self.d) if op is not None)

    @property
    def scales(self) -> tuple[Scale, ...]:
        """The declared scale factors, scale_a before scale_b."""
        return tuple(s for s in (self.scale_a, self.scale_b) if s is not None)

    @property
    def blockwise(self) -> bool:
        """True when a scale is per block (the mainloop applies it), not per tensor (the epilogue does)."""
        return any(not s.per_tensor for s in self.scales)

    @property
    def batch(self) -> tuple[str, ...]:
        """The batch dims shared by a, b and d (CUTLASS's batch mode L = their product); () when not batched."""
        return self.a.batch

    def alignment_of(self, dtype: DType) -> int:
        """Elements per access for an operand of ``dtype``: ``alignment`` capped at 16 bytes (auto: 16 bytes)."""
        full = 128 // dtype.bits  # 16 bytes (32 for the 4-bit e2m1)
        return full if self.alignment is None else min(int(self.alignment), full)

    def choices(self) -> dict[str, Choice]:
        """Open choices of this kernel, keyed by setting name (``tile``, ``a.layout``, …)."""
        found: dict[str, Choice] = {}
        for key in GEMM_SETTINGS:
            value = getattr(self, key)
            if isinstance(value, Choice):
                found[key] = value
        for op in self.operands:
            for attr in ("dtype", "layout"):
                value = getattr(op, attr)
                if isinstance(value, Choice):
                    found[f"{op.name}.{attr}"] = value
        return found

    def is_concrete(self) -> bool:
        """True when no setting holds a :class:`Choice`."""
        return not self.choices()

    def resolve(self, picks: Mapping[str, Any]) -> "GemmKernel":
        """Replace choices by picked values (typed values, not spellings); unknown keys raise KeyError."""
        kernel = self
        updates: dict[str, Any] = {}
        op_updates: dict[str, dict[str, Any]] = {}
        open_ = self.choices()
        for key, value in picks.items():
            if key not in open_:
                raise KeyError(f"kernel {self.name!r} has no open choice {key!r}; open: {sorted(open_)}")
            if "." in key:
                opname, attr = key.split(".", 1)
                op_updates.setdefault(opname, {})[attr] = value
            else:
                updates[key] = value
        for opname, attrs in op_updates.items():
            updates[opname] = dataclasses.replace(getattr(kernel, opname), **attrs)
        return dataclasses.replace(kernel, **updates)

    def config_name(self) -> str:
        """CUTLASS-style procedural name derived from the fields, e.g.
        ``up_proj_sm90_bf16_bf16_bf16_f32_128x256x64_2x1x1_cooperative_persistent_sauto``."""
        spell = spell_setting
        parts = [self.name, spell(self.target)]
        parts += [spell(op.dtype) + ("t" if op.layout is Layout.col else "") for op in self.operands]
        parts += [spell(self.accum), spell(self.tile), spell(self.cluster), spell(self.schedule),
                  spell(self.scheduler), "s" + spell(self.stages)]
        parts += [f"{s.name}{s.dtype.value}" + ("x".join(str(b) for b in s.block) if not s.per_tensor else "")
                  for s in self.scales]
        if self.batch:
            parts.append("batched")
        if self.alignment is not None:
            parts.append("align" + spell(self.alignment))
        if self.math is not Math.tf32:
            parts.append(spell(self.math))
        if self.swap_ab is True:
            parts.append("swapab")
        elif isinstance(self.swap_ab, Choice):
            parts.append("swapab" + spell(self.swap_ab))
        runtime = {"split_k": "sk", "raster": "r", "swizzle": "sw", "reduction_mode": "red"}
        parts += [tag + spell(getattr(self, key)) for key, tag in runtime.items()
                  if getattr(self, key) != RUNTIME_DEFAULTS[key]]
        return "_".join(parts)

    def build_config(self) -> "GemmKernel":
        """This kernel with the run-time settings at their defaults and the name :data:`BUILD_NAME`: what the
        compiled code depends on (the kernels of a dispatch, renamed copies of tuned ones, share their builds)."""
        return dataclasses.replace(self, name=BUILD_NAME, **RUNTIME_DEFAULTS)

    def digest(self) -> str:
        """Stable sha256 of the semantic fields (positions excluded)."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def build_digest(self) -> str:
        """:meth:`digest` of :meth:`build_config`: equal for kernels that share one compiled binary."""
        return self.build_config().digest()


def precision(kernel) -> str:
    """The precision a kernel multiplies in, for reports: ``f32 via 3xtf32`` / ``f32 via tf32`` for f32 a and b
    (:class:`Math`), else the dtype of its first operand (``bf16``, ``f8e4m3``); ``?`` while open."""
    first = kernel.operands[0] if getattr(kernel, "operands", ()) else None
    dtype = getattr(first, "dtype", None)
    if isinstance(dtype, Choice) or dtype is None:
        return "?"
    if dtype is DType.f32 and isinstance(getattr(kernel, "math", None), Math):
        return f"f32 via {kernel.math.value}"
    return dtype.value


#: What the operand and scale names of a :func:`transposed` kernel stand for in the kernel it came from.
SWAPPED_NAMES = {"a": "b", "b": "a", "scale_a": "scale_b", "scale_b": "scale_a"}
_SWAPPED_MODES = {"M": "N", "N": "M"}
_FLIPPED_KIND = {EpilogueInputKind.row_vector: EpilogueInputKind.col_vector,
                 EpilogueInputKind.col_vector: EpilogueInputKind.row_vector}


def _swap_modes(dims: tuple[str, ...]) -> tuple[str, ...]:
    """``("M", "K")`` -> ``("N", "K")``; a scale's ``"N/128"`` -> ``"M/128"``; batch and other names unchanged."""
    out = []
    for dim in dims:
        name, _, div = dim.partition("/")
        name = _SWAPPED_MODES.get(name, name)
        out.append(f"{name}/{div}" if div else name)
    return tuple(out)


def transposed(kernel: GemmKernel) -> GemmKernel:
    """The same GEMM written as Dᵀ = B·Aᵀ: what a ``swap_ab`` kernel gives CUTLASS.

    CUTLASS's M is the problem's N and its N the problem's M: the returned kernel's ``a`` is the problem's b and its
    ``b`` the problem's a (:data:`SWAPPED_NAMES`), and M and N are exchanged in the dims of every operand, epilogue
    input and output, so each declaration keeps its memory and its layout reads the other way: ``d : bf16[M, N] row``
    becomes ``[N, M] row`` (CUTLASS's column-major D), a bias ``[N]`` (a row vector, Sm90RowBroadcast) becomes ``[M]``
    (a column vector, Sm90ColBroadcast), an ``[M]`` reduction over N (Sm90ColReduction) one over CUTLASS's M
    (Sm90RowReduction). The epilogue expression, the tile and every other setting are unchanged, and ``swap_ab`` is
    False: the result is an ordinary kernel that the rules and templates take as it is.
    """
    def flip(x):
        kind = getattr(x, "kind", None)
        changes: dict[str, Any] = {"dims": _swap_modes(x.dims)}
        if kind in _FLIPPED_KIND:
            changes["kind"] = _FLIPPED_KIND[kind]
        return dataclasses.replace(x, **changes)

    def rename(x, name):
        return None if x is None else dataclasses.replace(flip(x), name=name)

    setting_pos = {}
    for key, where in (kernel.setting_pos or {}).items():
        head, dot, rest = key.partition(".")
        setting_pos[(SWAPPED_NAMES.get(head, head) + dot + rest) if dot else key] = where
    return dataclasses.replace(
        kernel, a=rename(kernel.b, "a"), b=rename(kernel.a, "b"), c=flip(kernel.c) if kernel.c else None,
        d=flip(kernel.d), epilogue_inputs=tuple(flip(i) for i in kernel.epilogue_inputs),
        epilogue_outputs=tuple(flip(o) for o in kernel.epilogue_outputs),
        scale_a=rename(kernel.scale_b, "scale_a"), scale_b=rename(kernel.scale_a, "scale_b"),
        swap_ab=False, setting_pos=setting_pos)
