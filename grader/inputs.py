"""What a candidate is called on: input distributions per trial, routing skews, unlisted shapes, and the
per-call rescaling of timing inputs.

Everything here is deterministic given a seed, and runs in the parent (distributions, unlisted shapes)
or in both processes (:func:`rescale_factor`, :func:`rescale`), so the parent can recompute exactly what
a timed call saw.

- Distributions (one per correctness trial, :func:`variants_for`): ``normal`` is the problem's own
  generator; ``heavy_tailed`` multiplies every floating input by a log-normal factor with the same RMS
  (outliers up to ~50×); ``structured`` scales a quarter of the rows by 1e-2…1e-4 (tiny outputs, where a
  candidate that writes zeros would pass an absolute tolerance) and a few columns by 16 (LLM-style outlier
  channels). For problems that route or select (top-k, MoE), ``skewed_routing`` gives the experts a
  Zipf-like popularity (a few experts get most tokens, some only a handful) and ``adversarial_routing``
  sends nearly every token to the same few experts.
- Unlisted shapes (:func:`unlisted_workload`): a var axis moved to a value no listed workload has, so a
  candidate that hard-codes the tested shapes is caught.
- Rescaling (:func:`rescale`): before every timed call the floating inputs of the rotated set are
  ``base × s`` with a fresh factor ``s`` (0.80…0.95 and 1.05…1.25 on alternate uses of a set), so no timed
  call sees content seen before: a cache keyed by input pointer returns stale (wrong) outputs, one keyed by
  a fingerprint of the contents never hits.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Mapping, Sequence

#: Distribution names, in the order trials take them.
NORMAL = "normal"
HEAVY_TAILED = "heavy_tailed"
STRUCTURED = "structured"
SKEWED_ROUTING = "skewed_routing"
ADVERSARIAL_ROUTING = "adversarial_routing"

BASE_VARIANTS = (NORMAL, HEAVY_TAILED, STRUCTURED)
ROUTED_VARIANTS = (NORMAL, SKEWED_ROUTING, HEAVY_TAILED, ADVERSARIAL_ROUTING, STRUCTURED)
ALL_VARIANTS = frozenset(ROUTED_VARIANTS)

#: Log-normal sigma of the heavy-tailed factor exp(σz − σ²) (RMS-preserving).
HEAVY_SIGMA = 1.0
#: Structured inputs: fraction of rows made tiny, their scale range (log10), outlier columns and factor.
TINY_ROW_FRACTION = 0.25
TINY_ROW_LOG10 = (-4.0, -2.0)
OUTLIER_COLUMN_FRACTION = 0.02
OUTLIER_FACTOR = 16.0
#: Routing skews, in units of the logits' standard deviation.
SKEW_STEP = 0.6
HOT_BIAS = 4.0
HOT_EXPERTS = 2

#: Names that mark an input as routing logits when the definition does not say (with a top-k in the
#: reference); a definition says so with ``"grader": {"routing_inputs": [...]}``.
_ROUTING_WORDS = ("router", "routing", "gating", "gate_logit", "expert_logit", "expert_score")
_SELECT_WORDS = ("topk", "top_k", "argmax", "argsort", "sort(")


def grader_options(problem) -> Mapping[str, Any]:
    """The definition's optional ``"grader"`` section (``routing_inputs``, ``rescale_inputs``,
    ``unlisted_shapes``)."""
    opts = (getattr(problem, "extra", None) or {}).get("grader") or {}
    return opts if isinstance(opts, Mapping) else {}


def routing_inputs(problem) -> list[str]:
    """Inputs that hold routing logits: declared in the definition, else guessed from names when the
    reference selects (``topk``, ``argmax``, ``sort``)."""
    import torch  # noqa: F401  (dtype names below are torch's)

    declared = grader_options(problem).get("routing_inputs")
    if declared is not None:
        return [n for n in declared if n in problem.inputs]
    src = (problem.reference_source or "").lower()
    if not any(w in src for w in _SELECT_WORDS):
        return []
    return [n for n, s in problem.inputs.items()
            if s.shape and "float" in s.dtype and any(w in n.lower() for w in _ROUTING_WORDS)]


def variants_for(problem) -> tuple[str, ...]:
    """The distributions the correctness trials cycle through (5 for routed problems, else 3)."""
    return ROUTED_VARIANTS if routing_inputs(problem) else BASE_VARIANTS


def _generator(seed: int, device):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(int(seed) & 0x7FFFFFFFFFFFFFFF)
    return g


def _finish(x64, like):
    """Back to ``like``'s dtype, clamped to its range for fp8 (whose casts do not saturate)."""
    import torch

    dt = like.dtype
    if dt.itemsize == 1 and dt.is_floating_point:
        m = float(torch.finfo(dt).max)
        x64 = x64.clamp(-m, m)
    return x64.to(dt)


#: Elements per piece of :func:`_heavy` / :func:`_structured`: the variants of a large input are made piece by
#: piece, so their working copies stay ~0.5 GiB. L2_024's expert weights (2^31 elements, 4 GiB of bf16 each) as
#: one float64 tensor asked for 16 GiB more and ran an H100 out of memory in a tune (2026-12-06).
CHUNK_ELEMENTS = 1 << 26


def _work_dtype(x):
    """float64 for 32/64-bit inputs (their own precision kept), float32 for 16/8-bit ones (already exact there)."""
    import torch

    return torch.float64 if x.dtype.itemsize >= 4 else torch.float32


def _heavy(x, g):
    import torch

    work, src = _work_dtype(x), x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    flat_in, flat_out = src.view(-1), out.view(-1)
    for s in range(0, flat_in.numel(), CHUNK_ELEMENTS):
        piece = flat_in[s:s + CHUNK_ELEMENTS]
        z = torch.randn(piece.numel(), generator=g, device=x.device, dtype=work)
        flat_out[s:s + CHUNK_ELEMENTS] = _finish(piece.to(work) * torch.exp(HEAVY_SIGMA * z - HEAVY_SIGMA ** 2), x)
    return out


def _structured(x, g):
    import torch

    if x.dim() < 2 or x.numel() < 2:
        return x
    rows = x.numel() // x.shape[-1]
    dev = x.device
    row_scale = torch.ones(rows, dtype=torch.float64, device=dev)
    pick = torch.rand(rows, generator=g, device=dev, dtype=torch.float64) < TINY_ROW_FRACTION
    lo, hi = TINY_ROW_LOG10
    exps = lo + (hi - lo) * torch.rand(rows, generator=g, device=dev, dtype=torch.float64)
    row_scale = torch.where(pick, torch.pow(10.0, exps), row_scale)
    cols = torch.where(torch.rand(x.shape[-1], generator=g, device=dev, dtype=torch.float64)
                       < OUTLIER_COLUMN_FRACTION, OUTLIER_FACTOR, 1.0)
    work = _work_dtype(x)
    src = x.contiguous().view(rows, x.shape[-1])
    out = torch.empty(x.shape, dtype=x.dtype, device=dev)
    flat_out = out.view(rows, x.shape[-1])
    step = max(1, CHUNK_ELEMENTS // x.shape[-1])
    for r in range(0, rows, step):
        y = src[r:r + step].to(work) * row_scale[r:r + step, None].to(work) * cols[None, :].to(work)
        flat_out[r:r + step] = _finish(y, x)
    return out


def _expert_bias(x, g, kind: str):
    """A per-expert (last dim) bias for routing logits: Zipf-like ranks, or a few hot experts."""
    import torch

    e = x.shape[-1]
    xf = x.double()
    finite = xf[torch.isfinite(xf)]
    sd = float(finite.std()) if finite.numel() > 1 else 1.0
    sd = sd if math.isfinite(sd) and sd > 0 else 1.0
    perm = torch.randperm(e, generator=g, device=x.device).to(torch.float64)
    if kind == SKEWED_ROUTING:
        bias = -SKEW_STEP * sd * perm  # expert of rank r loses r steps
    else:
        bias = torch.where(perm < min(HOT_EXPERTS, e), HOT_BIAS * sd, 0.0)
    return _finish(xf + bias, x)


def apply_variant(inputs: Mapping[str, Any], variant: str, seed: int, routing: Sequence[str] = ()) -> dict[str, Any]:
    """The inputs of one trial drawn from ``variant`` (a new dict; the originals are not changed).

    Only floating tensors change; integer tensors and scalars stay as the problem made them. Routing
    inputs change only under the routing variants, the others only under the value variants.

    Raises:
        ValueError: an unknown variant name.
    """
    import torch

    if variant not in ALL_VARIANTS:
        raise ValueError(f"unknown input distribution {variant!r} (known: {', '.join(sorted(ALL_VARIANTS))})")
    out = dict(inputs)
    if variant == NORMAL:
        return out
    for idx, (name, v) in enumerate(inputs.items()):
        if not (isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.numel() > 1):
            continue
        g = _generator(seed * 1000003 + idx, v.device)
        is_routing = name in routing
        if variant in (SKEWED_ROUTING, ADVERSARIAL_ROUTING):
            if is_routing:
                out[name] = _expert_bias(v, g, variant)
        elif not is_routing:
            out[name] = _heavy(v, g) if variant == HEAVY_TAILED else _structured(v, g)
    return out


# --- unlisted shapes -----------------------------------------------------------------------------------

_STEPS = (1, -1, 2, -2, 3, -3, 5, 7, -5, 11)
#: The largest unit an unlisted shape moves by (32 elements: 16 bytes of the narrowest type, 4-bit).
MAX_UNIT = 32


def unlisted_workload(problem, workload):
    """A copy of ``workload`` with one var axis moved to a value no listed workload has, or None.

    The axis with the largest value moves by the first of +1, −1, +2, … units that gives a positive value and a
    combination of var axes that no workload of the problem lists. The unit is the greatest common divisor of the
    axis's listed values (at most :data:`MAX_UNIT`): when every workload has a sequence length that is a multiple
    of 8, the problem promises no other, and a kernel that needs it (16-byte TMA rows) is not failed for it.
    """
    from ucutlass.problem import Workload

    var = [n for n, a in problem.axes.items() if a.kind == "var" and n in workload.axes]
    if not var:
        return None
    listed = {tuple(sorted((k, int(v)) for k, v in w.axes.items())) for w in problem.workloads}
    axis = max(var, key=lambda n: (int(workload.axes[n]), -var.index(n)))
    unit = math.gcd(*[int(w.axes[axis]) for w in problem.workloads if axis in w.axes])
    unit = unit if 0 < unit <= MAX_UNIT else 1
    for step in _STEPS:
        value = int(workload.axes[axis]) + step * unit
        if value < 1:
            continue
        axes = {**workload.axes, axis: value}
        if tuple(sorted((k, int(v)) for k, v in axes.items())) not in listed:
            return Workload(uuid=f"{workload.uuid}~{axis}={value}", index=-1, axes=axes,
                            inputs=workload.inputs, tolerance=workload.tolerance)
    return None


# --- rescaling of timing inputs ------------------------------------------------------------------------

def rescale_factor(seed: int, set_index: int, use: int) -> float:
    """The factor of the ``use``-th preparation of timing set ``set_index``: 0.80…0.95 on even uses,
    1.05…1.25 on odd ones, so two consecutive calls on a set differ by at least ~10%."""
    h = hashlib.sha256(f"{int(seed)}/{int(set_index)}/{int(use)}".encode()).digest()
    u = int.from_bytes(h[:8], "little") / float(1 << 64)
    return 0.80 + 0.15 * u if use % 2 == 0 else 1.05 + 0.20 * u


def rescalable(v: Any) -> bool:
    """Whether a timing input is rescaled (a floating tensor with more than one element)."""
    import torch

    return isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.numel() > 1


def rescale(base, factor: float, out=None):
    """``base × factor`` in ``base``'s dtype (through float32 for 1-byte floats), into ``out`` if given.

    The worker and the parent both call this, so the parent can recompute what a timed call saw bit for
    bit (elementwise products are deterministic on a device).
    """
    import torch

    if base.dtype.itemsize == 1:
        m = float(torch.finfo(base.dtype).max)
        y = torch.mul(base.to(torch.float32), factor).clamp_(-m, m).to(base.dtype)
        if out is None:
            return y
        out.copy_(y)
        return out
    if out is None:
        return torch.mul(base, factor)
    return torch.mul(base, factor, out=out)


__all__ = [
    "NORMAL", "HEAVY_TAILED", "STRUCTURED", "SKEWED_ROUTING", "ADVERSARIAL_ROUTING", "BASE_VARIANTS",
    "ROUTED_VARIANTS", "grader_options", "routing_inputs", "variants_for", "apply_variant",
    "unlisted_workload", "rescale_factor", "rescalable", "rescale",
]
