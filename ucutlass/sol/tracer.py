"""The machinery behind :mod:`ucutlass.sol.counting`: a dispatch mode that follows meta tensors.

Per tensor it keeps a small :class:`_Info`: the precision of its values, a CPU *shadow* with the same
values when the tensor is small, whether it is (a view of) a model input, the matmul that produced it,
and the structure of causal masks. Ops run on meta; where every operand has a shadow, the op also runs
on the shadows, so routing indices, ``nonzero`` and ``.item()`` see real values.

Length: one dispatch mode; the handlers of each op family share its per-tensor state and its dispatch table.
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from ._errors import SolError
from .flops import attention_flops, band_count, conv_flops, logical_last_dim
from .precision import ORDER, dtype_precision, matmul_precision, narrowest, widest

aten = torch.ops.aten
NEG_INF = float("-inf")

#: Largest integer/bool tensor (bytes) given a CPU shadow: routing masks and indices.
SHADOW_INT_BYTES = 1 << 28
#: Largest floating tensor (bytes) given a CPU shadow: scales and other small values.
SHADOW_FLOAT_BYTES = 1 << 23
#: Matmul-like ops above this many FLOP are not repeated on the CPU (their values rarely steer control flow).
SHADOW_MAX_FLOPS = 1 << 26


def _packets(*names: str) -> frozenset:
    return frozenset(getattr(aten, n) for n in names if hasattr(aten, n))


#: op packet → (index of operand A, index of operand B)
_MATMUL = {aten.mm: (0, 1), aten.addmm: (1, 2), aten.bmm: (0, 1), aten.baddbmm: (1, 2),
           aten.addbmm: (1, 2), aten.mv: (0, 1), aten.addmv: (1, 2), aten.dot: (0, 1), aten.vdot: (0, 1),
           aten._scaled_mm: (0, 1), aten._int_mm: (0, 1)}
_GROUPED = _packets("_grouped_mm", "_scaled_grouped_mm")
_CONV = _packets("convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose")
#: attention aten ops → layout of q/k/v: "bhsd" ([B, H, S, D]) or "bshd" ([B, S, H, D])
_ATTENTION = {p: layout for p, layout in (
    (getattr(aten, "_scaled_dot_product_flash_attention", None), "bhsd"),
    (getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None), "bhsd"),
    (getattr(aten, "_scaled_dot_product_efficient_attention", None), "bhsd"),
    (getattr(aten, "_scaled_dot_product_cudnn_attention", None), "bhsd"),
    (getattr(aten, "_flash_attention_forward", None), "bshd"),
    (getattr(aten, "_efficient_attention_forward", None), "bshd"),
) if p is not None}
_SCALAR = _packets("_local_scalar_dense", "is_nonzero", "equal")
_NONZERO = _packets("nonzero", "argwhere")
_INDEXING = _packets("select", "slice", "index", "index_select", "embedding")
_CONVERT = _packets("_to_copy", "_to_dtype", "to")
#: ops that move, convert or scale values without creating new information
_PRESERVING = _packets("clone", "contiguous", "cat", "stack", "index", "index_select", "gather", "neg", "abs",
                       "clamp", "clamp_min", "clamp_max", "mul", "div", "masked_fill", "where",
                       "constant_pad_nd", "repeat", "flip", "roll", "expand_copy", "permute_copy",
                       "view_copy", "_unsafe_view", "alias", "lift_fresh_copy")
#: ops through which a causal structure of the last two dims survives
_STRUCTURE = _PRESERVING | _CONVERT | _packets("_softmax", "_safe_softmax", "_log_softmax", "softmax",
                                               "exp", "sub", "add", "native_dropout", "dropout", "copy_")
#: ops that carry a matmul's output to a later mask (scaling and rearranging only)
_CARRY = _packets("mul", "div", "clone", "contiguous", "_to_copy", "_unsafe_view", "alias", "copy_")
_EMPTY = _packets("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
_CONST = {aten.full: 1, aten.full_like: 1, aten.new_full: 2, aten.fill_: 1}
_ONES = _packets("ones", "ones_like", "new_ones")
_NOT = _packets("logical_not", "bitwise_not")


@dataclass
class _Rec:
    """One counted op call; ``kept`` scales its FLOPs when a mask later hides part of its output."""

    op: str
    precision: str
    flops: int
    note: str = ""
    kept: tuple[int, int] | None = None  # (kept, total) score pairs

    @property
    def effective(self) -> int:
        return self.flops if self.kept is None else self.flops * self.kept[0] // self.kept[1]


class _Root:
    """Shared by a tensor and its views: ``stale`` once their storage was written without shadows."""

    __slots__ = ("stale",)

    def __init__(self):
        self.stale = False


@dataclass
class _Info:
    prec: str | None = None
    shadow: Any = None
    root: _Root | None = None
    input: str | None = None  # a full-size alias (view) of this model input
    producer: _Rec | None = None
    const: Any = None  # every element equals this value
    mask: tuple | None = None  # ((kind, c), value): value where j−i ≤ c ("lower") / ≥ c ("upper"), else 0
    kept: tuple | None = None  # (kind, c): positions of the last two dims not masked away


def _complement(region):
    kind, c = region
    return ("lower", c - 1) if kind == "upper" else ("upper", c + 1)


def _describe(region) -> str:
    kind, c = region
    if kind == "lower":
        return "causal mask: lower triangle incl. diagonal counted" if c == 0 else \
            f"banded mask: only scores with j - i <= {c} counted"
    return f"banded mask: only scores with j - i >= {c} counted"


def _count(region, rows: int, cols: int) -> int:
    kind, c = region
    return band_count(rows, cols, lower_to=c) if kind == "lower" else band_count(rows, cols, upper_from=c)


def _tensors(tree) -> list:
    """The tensors in nested tuples/lists/dicts (faster than pytree on the hot path)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    out = []
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
    return out


def _map(fn, tree):
    """``fn`` applied to every tensor in nested tuples/lists/dicts."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map(fn, x) for x in tree)
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    return tree


def _is_in(t, seq) -> bool:
    return any(t is s for s in seq)


@functools.lru_cache(maxsize=None)
def _written(func) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments an op writes in place."""
    return tuple((pos, a.name) for pos, a in enumerate(func._schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


class _DispatchMode(TorchDispatchMode):
    def __init__(self, tracer: "Tracer"):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.tracer.handle(func, args, kwargs or {})


class _FunctionMode(TorchFunctionMode):
    """Catches ``F.scaled_dot_product_attention`` before it decomposes into bmm + softmax."""

    def __init__(self, tracer: "Tracer"):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t = self.tracer
        if func is F.scaled_dot_product_attention and t.counting and not t.suppress:
            names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
            a = {**dict(zip(names, args)), **kwargs}
            t.record_attention("scaled_dot_product_attention", a["query"], a["key"], a["value"], "bhsd",
                               causal=bool(a.get("is_causal", False)), mask=a.get("attn_mask"))
            with t.suppressed():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class Tracer:
    """State of one counted run. Use :meth:`dispatch`, then :meth:`start_counting`, then :meth:`functions`."""

    def __init__(self):
        self.info = WeakIdKeyDictionary()
        self.records: list[_Rec] = []
        self.other_flops = 0
        self.other_calls = 0
        self._notes: dict[str, None] = {}
        self.data_dependent = False
        self.counting = False
        self.suppress = 0
        self._paused = 0
        self.inputs: dict[str, torch.Tensor] = {}
        self._input_ids: dict[int, str] = {}
        self.reads: dict[str, Any] = {}
        self.placeholders = 0

    # --- contexts ------------------------------------------------------------------------------------

    @contextmanager
    def dispatch(self):
        with _DispatchMode(self):
            yield self

    @contextmanager
    def functions(self):
        with _FunctionMode(self):
            yield self

    @contextmanager
    def paused(self):
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    @contextmanager
    def suppressed(self):
        self.suppress += 1
        try:
            yield
        finally:
            self.suppress -= 1

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    def note(self, text: str) -> None:
        self._notes.setdefault(text, None)

    # --- per-tensor info ------------------------------------------------------------------------------

    def _get(self, t) -> _Info | None:
        return self.info.get(t) if isinstance(t, torch.Tensor) else None

    def _info(self, t) -> _Info:
        i = self.info.get(t)
        if i is None:
            i = _Info(prec=dtype_precision(t.dtype), root=_Root())
            self.info[t] = i
        return i

    def prec(self, t) -> str | None:
        i = self._get(t)
        return i.prec if i is not None else dtype_precision(t.dtype)

    def _root(self, t) -> _Root:
        return self._info(t).root

    def shadow(self, t):
        """The CPU tensor with ``t``'s values, ``t`` itself when it is real, or None when unknown."""
        if not isinstance(t, torch.Tensor):
            return None
        if t.device.type != "meta":
            return t
        i = self.info.get(t)
        if i is None or i.shadow is None or i.root.stale:
            return None
        return i.shadow

    @staticmethod
    def shadow_fits(t) -> bool:
        size = t.numel() * t.element_size()
        limit = SHADOW_FLOAT_BYTES if (t.is_floating_point() or t.is_complex()) else SHADOW_INT_BYTES
        return size <= limit

    def set_shadow(self, meta, real) -> None:
        i = self._info(meta)
        i.shadow = real
        i.root = _Root()

    def adopt(self, value):
        """A caller's real input → a meta twin whose shadow holds the values (when small enough)."""
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            return value  # a scalar, or a tensor whose values are unknown anyway
        with self.paused():
            twin = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype,
                                       device="meta")
        if self.shadow_fits(value):
            self.set_shadow(twin, value.detach().to("cpu"))
        return twin

    def start_counting(self, inputs) -> None:
        """From now on count; ``inputs`` (name → meta tensor) are the model inputs whose reads are tracked."""
        self.counting = True
        for name, value in inputs.items():
            if isinstance(value, torch.Tensor):
                self.inputs[name] = value
                self._input_ids[id(value)] = name
                i = self._info(value)
                i.prec, i.input, i.producer, i.mask, i.kept = dtype_precision(value.dtype), None, None, None, None

    def _input_of(self, t) -> tuple[str | None, bool]:
        """(input name, whether ``t`` is the input object itself) for a model input or a view of one."""
        name = self._input_ids.get(id(t))
        if name is not None and self.inputs[name] is t:
            return name, True
        i = self._get(t)
        return (i.input, False) if i is not None else (None, False)

    # --- the dispatch handler ----------------------------------------------------------------------

    def handle(self, func, args, kwargs):
        if self._paused:
            return func(*args, **kwargs)
        packet = func.overloadpacket
        if packet in _SCALAR:
            return self._scalar(func, args, kwargs)
        try:
            out = func(*args, **kwargs)
        except Exception as err:  # no meta kernel, or a data-dependent shape
            converted = self._bool_indices(func, args)
            if converted is not None:
                return self.handle(func, converted, kwargs)
            out = self._fallback(func, args, kwargs, err)
        else:
            self._shadows(func, args, kwargs, out)
        if self.counting:
            alias = self._reads(func, args, kwargs)
            rec = None if self.suppress else self._count(func, args, kwargs, out)
            self._tags(func, args, kwargs, out, alias, rec)
        return out

    def _scalar(self, func, args, kwargs):
        shadows = [self.shadow(a) if isinstance(a, torch.Tensor) else a for a in args]
        if all(s is not None for s in shadows):
            return func(*shadows, **kwargs)
        self.placeholders += 1
        t = args[0]
        if func.overloadpacket is aten._local_scalar_dense and t.dtype != torch.bool:
            value = 1.0 if t.is_floating_point() else 1
        else:
            value = False
        self.note("values read with .item()/bool() that are unknown on meta were replaced by placeholders "
                  "(1.0, 1, False); the count assumes they do not change the work")
        return value

    def _bool_indices(self, func, args):
        """``x[mask]``: the boolean index as integer indices (from its values, or all-true); None if none."""
        if func.overloadpacket not in (aten.index, aten.index_put, aten.index_put_) or len(args) < 2:
            return None
        indices = list(args[1])
        changed = False
        for pos in range(len(indices) - 1, -1, -1):
            idx = indices[pos]
            if not (isinstance(idx, torch.Tensor) and idx.dtype in (torch.bool, torch.uint8)):
                continue
            sh = self.shadow(idx)
            with self.paused():
                if sh is not None:
                    cols = sh.nonzero().unbind(1)
                    metas = [torch.empty(tuple(c.shape), dtype=torch.long, device="meta") for c in cols]
                    if self.counting:
                        self.data_dependent = True
                else:
                    cols = [None] * idx.dim()
                    metas = [torch.empty((idx.numel(),), dtype=torch.long, device="meta") for _ in cols]
                    self.note("a boolean mask with unknown values was taken as all-true (upper bound)")
            for m, c in zip(metas, cols):
                if c is not None:
                    self.set_shadow(m, c)
            indices[pos:pos + 1] = metas
            changed = True
        return (args[0], indices, *args[2:]) if changed else None

    def _mutated(self, func, args, kwargs) -> list:
        out = []
        for pos, name in _written(func):
            out += _tensors(args[pos] if pos < len(args) else kwargs.get(name))
        return out

    def _cpu_call(self, func, args, kwargs):
        sargs, skwargs = _map(self.shadow, (args, kwargs))
        if isinstance(skwargs.get("device"), (torch.device, str)):
            skwargs = {**skwargs, "device": torch.device("cpu")}
        with self.paused():
            out = func(*sargs, **skwargs)
            if func.overloadpacket in _EMPTY:
                out.zero_()  # uninitialised memory would make shadows nondeterministic
        return out

    def _shadows(self, func, args, kwargs, out) -> None:
        tensors = _tensors((args, kwargs))
        outs = _tensors(out)
        mutated = self._mutated(func, args, kwargs)
        known = all(self.shadow(t) is not None for t in tensors)
        fits = func.is_view or all(self.shadow_fits(o) for o in outs if not _is_in(o, mutated))
        packet = func.overloadpacket
        if known and (packet in _CONV or packet in _ATTENTION or
                      (packet in _MATMUL or packet in _GROUPED) and outs and
                      2 * outs[0].numel() * tensors[_MATMUL.get(packet, (0, 1))[0]].shape[-1] > SHADOW_MAX_FLOPS):
            known = False  # too much CPU work for values that rarely matter
        if not (known and fits) or not (outs or mutated):
            for m in mutated:
                self._root(m).stale = True
            return
        try:
            sout = self._cpu_call(func, args, kwargs)
        except Exception:  # a shadow op that fails (odd dtype on CPU): forget the values
            for m in mutated:
                self._root(m).stale = True
            return
        for o, s in zip(outs, _tensors(sout)):
            if _is_in(o, mutated):
                continue
            i = self._info(o)
            i.shadow = s
            if func.is_view and tensors:
                i.root = self._root(tensors[0])

    def _fallback(self, func, args, kwargs, err):
        tensors = _tensors((args, kwargs))
        op = str(func.overloadpacket.__name__)
        if all(self.shadow(t) is not None for t in tensors):
            sout = self._cpu_call(func, args, kwargs)
            if self._mutated(func, args, kwargs):
                return args[0]
            with self.paused():
                meta = _map(lambda s: torch.empty_strided(tuple(s.shape), tuple(s.stride()), dtype=s.dtype,
                                                          device="meta"), sout)
            for m, s in zip(_tensors(meta), _tensors(sout)):
                self.set_shadow(m, s)
            if self.counting:
                self.data_dependent = True
            self.note(f"aten.{op} has no meta kernel or a data-dependent shape: run on the CPU from the "
                      f"known input values")
            return meta
        if func.overloadpacket in _NONZERO:
            x = args[0]
            self.note(f"aten.{op} of values too large to follow on the CPU: every element assumed non-zero — "
                      "an upper bound on the work, so T_SOL may be too high; pass the real inputs")
            with self.paused():
                return torch.empty((x.numel(), x.dim()), dtype=torch.long, device="meta")
        raise SolError(f"aten.{op} cannot run on meta tensors ({type(err).__name__}: {str(err)[:200]}) and "
                       "the values of its inputs are unknown (too large to shadow on the CPU)")

    # --- reads of model inputs ------------------------------------------------------------------------

    def _reads(self, func, args, kwargs) -> str | None:
        """Record which model inputs this op reads; return the input name a view op's output aliases."""
        packet = func.overloadpacket
        alias = None
        for t in _tensors((args, kwargs)):
            name, itself = self._input_of(t)
            if name is None:
                continue
            if packet in _INDEXING and args and t is args[0] and itself:
                part = self._indexed(func, args, kwargs, t)
                if part is not None:
                    self._read_part(name, t, *part)
                    continue
                self.reads[name] = "full"
            elif func.is_view and args and t is args[0]:
                alias = name
            else:
                self.reads[name] = "full"
        return alias

    def _indexed(self, func, args, kwargs, t):
        """(dim, indices) that an indexing op touches on ``t``; None when unknown or everything."""
        packet = func.overloadpacket
        if packet is aten.select:
            dim = args[1] % t.dim()
            return dim, np.array([args[2] % t.shape[dim]])
        if packet is aten.slice:
            dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % t.dim()
            start = args[2] if len(args) > 2 else kwargs.get("start")
            end = args[3] if len(args) > 3 else kwargs.get("end")
            step = args[4] if len(args) > 4 else kwargs.get("step", 1)
            idx = np.arange(*slice(start, end, step).indices(t.shape[dim]))
            return None if len(idx) == t.shape[dim] else (dim, idx)
        if packet is aten.index:
            given = [(d, i) for d, i in enumerate(args[1]) if i is not None]
            if not given:
                return None
            dim, index = given[0]
            where = (dim, index)
        elif packet is aten.index_select:
            where = (args[1] % t.dim(), args[2])
        elif packet is aten.embedding:
            where = (0, args[1])
        else:
            return None
        dim, index = where
        sh = self.shadow(index)
        if sh is None:
            return None
        self.data_dependent = True
        return dim, (sh.reshape(-1).long() % t.shape[dim]).numpy()

    def _read_part(self, name, t, dim, idx) -> None:
        state = self.reads.get(name)
        if state == "full":
            return
        masks = self.reads.setdefault(name, {})
        mask = masks.setdefault(dim, np.zeros(t.shape[dim], dtype=bool))
        mask[idx] = True

    def input_bytes(self, inputs) -> dict[str, int]:
        """Minimum bytes each input needs: all of it, the slices read, or 0 (never read, or a scalar)."""
        out = {}
        for name, value in inputs.items():
            if not isinstance(value, torch.Tensor):
                out[name] = 0
                continue
            nbytes = value.numel() * value.element_size()
            state = self.reads.get(name)
            if state is None:
                out[name] = 0
            elif state == "full":
                out[name] = nbytes
            else:
                sizes = [value.shape[d] for d in state]
                untouched = value.numel() // math.prod(sizes)
                for d, mask in state.items():
                    untouched *= value.shape[d] - int(mask.sum())
                out[name] = (value.numel() - untouched) * value.element_size()
        return out

    # --- counting ------------------------------------------------------------------------------------

    def _count(self, func, args, kwargs, out) -> _Rec | None:
        packet = func.overloadpacket
        outs = _tensors(out)
        if packet in _MATMUL or packet in _GROUPED:
            ia, ib = _MATMUL.get(packet, (0, 1))
            a, b = args[ia], args[ib]
            o = outs[0]
            k = logical_last_dim(a)
            if packet is aten.addbmm:
                flops = 2 * a.shape[0] * o.numel() * k
            elif packet in (aten.dot, aten.vdot):
                flops = 2 * k
            elif packet in _GROUPED and a.dim() == 2 and b.dim() == 2:
                flops = 2 * a.shape[0] * b.shape[-1] * k
            else:
                flops = 2 * o.numel() * k
            rec = _Rec(f"aten.{packet.__name__}", matmul_precision(self.prec(a), self.prec(b)), flops)
            ai = self._get(a)
            if ai is not None and ai.kept is not None and a.dim() >= 2:
                rows, cols = a.shape[-2], a.shape[-1]
                rec.kept = (_count(ai.kept, rows, cols), rows * cols)
                rec.note = _describe(ai.kept)
            self.records.append(rec)
            return rec
        if packet in _CONV:
            x, w = args[0], args[1]
            transposed = bool(args[6]) if packet in (aten.convolution, aten._convolution) and len(args) > 6 \
                else packet is getattr(aten, "cudnn_convolution_transpose", None)
            rec = _Rec(f"aten.{packet.__name__}", matmul_precision(self.prec(x), self.prec(w)),
                       conv_flops(outs[0].shape, w.shape, x.shape, transposed))
            self.records.append(rec)
            return None
        if packet in _ATTENTION:
            names = [a.name for a in func._schema.arguments]
            a = {**dict(zip(names, args)), **kwargs}
            mask_type = a.get("custom_mask_type", 0) or 0
            causal = bool(a.get("is_causal", False)) or mask_type in (1, 2)
            self.record_attention(f"aten.{packet.__name__}", a["query"], a["key"], a["value"], _ATTENTION[packet],
                                  causal=causal, mask=a.get("attn_mask", a.get("attn_bias", a.get("bias"))),
                                  bottom_right=mask_type == 2)
            return None
        tensors = _tensors((args, kwargs))
        if tensors and not func.is_view and any(o.is_floating_point() for o in outs):
            self.other_flops += max(t.numel() for t in tensors + outs)
            self.other_calls += 1
        return None

    def record_attention(self, op, q, k, v, layout, *, causal=False, mask=None, bottom_right=False) -> None:
        """Count softmax(Q·Kᵀ)·V: only the unmasked scores when causal or masked by a known band."""
        if layout == "bhsd" or q.dim() < 4:
            bh, sq, sk = math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2]
        else:  # [B, S, H, D]
            bh, sq, sk = q.shape[0] * q.shape[2], q.shape[1], k.shape[1]
        region = None
        if causal:
            region = ("lower", sk - sq if bottom_right else 0)
        elif isinstance(mask, torch.Tensor):
            mi = self._get(mask)
            if mi is not None and mi.mask is not None:
                band, value = mi.mask
                if mask.dtype == torch.bool and value:
                    region = band
                elif value == NEG_INF:
                    region = _complement(band)
        kept = None if region is None else _count(region, sq, sk)
        flops = attention_flops(bh, sq, sk, q.shape[-1], v.shape[-1], kept)
        prec = matmul_precision(widest(self.prec(q), self.prec(k)), self.prec(v))
        note = "" if region is None else _describe(region) + (" (bottom-right aligned)" if bottom_right else "")
        self.records.append(_Rec(op, prec, flops, note))

    # --- tags: precision, aliases, producers, masks -------------------------------------------------

    def _out_prec(self, func, args, o, tensors):
        packet = func.overloadpacket
        dp = dtype_precision(o.dtype)
        if dp not in ORDER:
            return dp
        if packet in _CONVERT and tensors:
            return narrowest(self.prec(tensors[0]), dp) or dp
        if packet is aten.copy_ and len(tensors) > 1:
            return narrowest(self.prec(tensors[1]), dp) or dp
        if func.is_view and tensors:
            return self.prec(tensors[0]) if tensors[0].dtype == o.dtype else dp
        if packet in _PRESERVING:
            if packet in (aten.cat, aten.stack):
                cands = [self.prec(t) for t in tensors if t.is_floating_point()]
            else:
                cands = [self.prec(t) for t in tensors if t.numel() == o.numel() and t.is_floating_point()]
            w = widest(*cands)
            return (narrowest(w, dp) or dp) if w else dp
        return dp

    def _tags(self, func, args, kwargs, out, alias, rec) -> None:
        outs = _tensors(out)
        if not outs:
            return
        packet = func.overloadpacket
        tensors = _tensors((args, kwargs))
        src = tensors[0] if tensors else None
        si = self._get(src)
        mutated = self._mutated(func, args, kwargs)
        for o in outs:
            i = self._info(o)
            i.prec = self._out_prec(func, args, o, tensors)
            if func.is_view and src is not None and o is not src:
                i.root = self._root(src)
            i.input = alias if func.is_view else (i.input if _is_in(o, mutated) else None)
            tail = tuple(o.shape[-2:])
            # constants and banded masks
            i.const, i.mask = None, None
            if packet in _CONST:
                i.const = self._value(args[_CONST[packet]] if len(args) > _CONST[packet]
                                      else kwargs.get("fill_value", kwargs.get("value")))
            elif packet in _ONES:
                i.const = True if o.dtype == torch.bool else 1
            elif packet in (aten.triu, aten.tril) and si is not None and si.const:
                d = args[1] if len(args) > 1 else kwargs.get("diagonal", 0)
                i.mask = (("upper" if packet is aten.triu else "lower", d), si.const)
            elif packet in _NOT and si is not None and si.mask is not None and si.mask[1] is True:
                i.mask = (_complement(si.mask[0]), True)
            elif (func.is_view or packet in _CONVERT or packet in (aten.clone, aten.expand)) and \
                    si is not None and si.mask is not None and tuple(src.shape[-2:]) == tail:
                i.mask = si.mask
            # matmul results, carried through scaling and views to a mask
            if rec is not None:
                i.producer = rec
            elif (func.is_view or packet in _CARRY) and si is not None and si.producer is not None \
                    and tuple(src.shape[-2:]) == tail and all(x.numel() < o.numel() for x in tensors[1:]):
                i.producer = si.producer
            elif not _is_in(o, mutated):
                i.producer = None
            # masks applied to scores, and what stays unmasked downstream
            kept = self._applied_mask(func, args, o)
            if kept is not None:
                i.kept = kept
            elif packet in _STRUCTURE or func.is_view:
                i.kept = next((self._get(t).kept for t in tensors if self._get(t) is not None
                               and self._get(t).kept is not None and tuple(t.shape[-2:]) == tail), None)
            else:
                i.kept = None

    def _value(self, v):
        """A Python number for a scalar argument (a 0-dim tensor only when its value is known)."""
        if isinstance(v, torch.Tensor):
            sh = self.shadow(v)
            return sh.reshape(-1)[0].item() if sh is not None and v.numel() == 1 else None
        return v

    def _applied_mask(self, func, args, o):
        """The kept region when this op applies a known band mask of −inf to full-size scores."""
        packet = func.overloadpacket
        tail = tuple(o.shape[-2:])
        if len(tail) < 2:
            return None
        scores, region = None, None
        if packet in (aten.add, aten.add_) and len(args) > 1 and all(isinstance(a, torch.Tensor) for a in args[:2]):
            for s, m in ((args[0], args[1]), (args[1], args[0])):
                mi = self._get(m)
                if mi is not None and mi.mask is not None and mi.mask[1] == NEG_INF and s.shape == o.shape \
                        and tuple(m.shape[-2:]) == tail:
                    scores, region = s, _complement(mi.mask[0])
        elif packet in (aten.masked_fill, aten.masked_fill_) and len(args) > 2 and self._value(args[2]) == NEG_INF:
            mi = self._get(args[1])
            if mi is not None and mi.mask is not None and mi.mask[1] is True:
                scores, region = args[0], _complement(mi.mask[0])
        elif packet is aten.where and len(args) > 2:
            mi = self._get(args[0])
            other = args[2]
            oi = self._get(other)
            is_inf = self._value(other) == NEG_INF or (oi is not None and oi.const == NEG_INF)
            if mi is not None and mi.mask is not None and mi.mask[1] is True and is_inf:
                scores, region = args[1], mi.mask[0]
        if region is None:
            return None
        si = self._get(scores)
        rec = si.producer if si is not None else None
        if rec is not None and rec.kept is None:
            rows, cols = tail
            rec.kept = (_count(region, rows, cols), rows * cols)
            rec.note = _describe(region)
        return region
