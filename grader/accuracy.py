"""Accuracy against a ground truth: is the candidate about as accurate as the reference itself?

A workload tolerance (``|x − y| ≤ atol + rtol·|y|`` on 99% of elements) is lax on purpose: it must
admit an honest kernel that rounds differently from the reference. It also admits a kernel that computes
an fp32 problem in bf16, writes zeros where outputs are smaller than ``atol``, or skips 1% of the output.
The ground truth ``g`` closes that gap: the problem's reference run on the same inputs upcast to float64
(float32 when float64 fails), so the reference ``y``'s own error ``y − g`` measures what honest rounding
costs, and a candidate ``x`` may not be much worse.

Errors are *normalized* per element, ``e = |x − g| / (|g| + τ)`` with ``τ = rms(g over the row) / 16``
(a row is the last dimension when it has at least 16 elements, else the whole output): relative where
values are normal, absolute (in units of the row's scale) near zero, and blind neither to tiny rows nor
to huge ones. Two verdicts, both must hold:

- mean: ``mean(e_cand) ≤ ACCURACY_FACTOR · mean(e_ref) + ACCURACY_FLOOR_ULPS · u`` (``u`` the unit
  roundoff of the output dtype; factor 4). A lower precision raises every element's error: bf16 for an
  fp32 GEMM is ~10⁴× the reference's error, TF32 ~2000×, fp8 for a bf16 GEMM ~25×; honest kernels measured
  0.45–1.75× (fused fp32-accumulate epilogues are *more* accurate than torch's bf16 path, which rounds the
  product before the residual add).
- sparse: at most ``SPARSE_FRACTION`` (0.1%) of elements with
  ``e_cand > SPARSE_FACTOR · e_ref + SPARSE_OFFSET · (mean(e_ref) + u)``: zeros written for 0.5% of rows,
  or for the tiny rows of a structured input, are caught even when the mean barely moves.

The check is skipped (and says so) for non-floating outputs, and when the ground truth is no more precise
than the reference (``mean(e_ref) < u / 8``: a reference that casts to a fixed dtype, or an exact op);
non-finite ground-truth elements are left to the tolerance check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

#: Mean normalized error: candidate ≤ ACCURACY_FACTOR × reference + ACCURACY_FLOOR_ULPS × u.
ACCURACY_FACTOR = 4.0
ACCURACY_FLOOR_ULPS = 2.0
#: Sparse check: elements worse than SPARSE_FACTOR × their reference error + SPARSE_OFFSET × (mean + u)
#: may be at most SPARSE_FRACTION of all.
SPARSE_FACTOR = 4.0
SPARSE_OFFSET = 32.0
SPARSE_FRACTION = 1e-3
#: The ground truth must differ from the reference by at least this many u on average to be informative.
INFORMATIVE_ULPS = 0.125
#: τ = row RMS / ROW_SCALE_DIVISOR; rows shorter than MIN_ROW use the whole output's RMS.
ROW_SCALE_DIVISOR = 16.0
MIN_ROW = 16


def unit_roundoff(dtype) -> float:
    """Half the spacing of floats at 1 in ``dtype`` (2⁻²⁴ for float32, 2⁻⁸ for bfloat16)."""
    import torch

    return float(torch.finfo(dtype).eps) / 2.0


def _rows(t):
    """``t`` as [rows, row length]: its last dim when at least MIN_ROW long, else one row (a view when it can)."""
    return t.reshape(-1, t.shape[-1]) if t.dim() and t.shape[-1] >= MIN_ROW else t.reshape(1, -1)


def _blocks(rows: int, cols: int):
    """``(r0, r1, c0, c1)`` blocks of at most :data:`.check.CHUNK_ELEMENTS` elements covering [rows, cols]."""
    from .check import CHUNK_ELEMENTS

    cb = max(1, min(cols, CHUNK_ELEMENTS))
    rb = max(1, CHUNK_ELEMENTS // cb)
    for r0 in range(0, rows, rb):
        for c0 in range(0, cols, cb):
            yield r0, min(r0 + rb, rows), c0, min(c0 + cb, cols)


class _Scaled:
    """The ground truth ``g`` as rows with their scale τ = row RMS / ROW_SCALE_DIVISOR (floored), computed block by
    block; :meth:`errors` gives ``|x − g| / (|g| + τ)`` on one block as float64 (0 where ``g`` is not finite)."""

    def __init__(self, g):
        import torch

        self.g2 = _rows(g.detach())
        rows, cols = self.g2.shape
        sumsq = torch.zeros(rows, 1, dtype=torch.float64, device=self.g2.device)
        for r0, r1, c0, c1 in _blocks(rows, cols):
            gz = self._finite(r0, r1, c0, c1)[1]
            sumsq[r0:r1] += (gz * gz).sum(dim=-1, keepdim=True)
        rms_row = (sumsq / max(cols, 1)).sqrt()
        rms_all = float((sumsq.sum() / max(rows * cols, 1)).sqrt()) if rows * cols else 0.0
        self.tau = torch.clamp(rms_row / ROW_SCALE_DIVISOR, min=max(rms_all * 2.0 ** -30, 1e-300))

    def _finite(self, r0, r1, c0, c1):
        import torch

        g = self.g2[r0:r1, c0:c1].to(torch.float64)
        finite = torch.isfinite(g)
        return finite, torch.where(finite, g, torch.zeros((), dtype=torch.float64, device=g.device))

    def blocks(self):
        return _blocks(*self.g2.shape)

    def errors(self, x, block):
        """``x`` (same shape as ``g``) on ``block`` = (r0, r1, c0, c1): normalized errors, float64 [r1-r0, c1-c0]."""
        import torch

        r0, r1, c0, c1 = block
        finite, gz = self._finite(r0, r1, c0, c1)
        x2 = _rows(x.detach())[r0:r1, c0:c1].to(device=gz.device, dtype=torch.float64)
        e = (x2 - gz).abs() / (gz.abs() + self.tau[r0:r1])
        return torch.where(finite, e, torch.zeros((), dtype=torch.float64, device=e.device))


def normalized_errors(x, g):
    """``|x − g| / (|g| + τ)`` per element as float64 (0 where ``g`` is not finite), flattened; τ is the row's RMS
    of ``g`` / ROW_SCALE_DIVISOR (rows: the last dim when at least MIN_ROW long, else the whole tensor)."""
    import torch

    scaled = _Scaled(g)
    rows, cols = scaled.g2.shape
    e = torch.empty(rows, cols, dtype=torch.float64, device=scaled.g2.device)
    for blk in scaled.blocks():
        r0, r1, c0, c1 = blk
        e[r0:r1, c0:c1] = scaled.errors(x, blk)
    return e.reshape(-1)


@dataclass
class Accuracy:
    """How a candidate output's error against the ground truth compares with the reference's.

    Attributes:
        ok: passes (or the check was skipped).
        candidate_error / reference_error: mean normalized errors (None when skipped).
        sparse_fraction: fraction of elements far worse than the reference's own error there.
        skipped: why no verdict was given ('' when checked).
        reason: one line when not ok.
    """

    ok: bool
    candidate_error: float | None = None
    reference_error: float | None = None
    sparse_fraction: float | None = None
    skipped: str = ""
    reason: str = ""

    @property
    def ratio(self) -> float | None:
        if self.candidate_error is None or not self.reference_error:
            return None
        return self.candidate_error / self.reference_error


def check_accuracy(out, ref, truth, name: str = "output") -> Accuracy:
    """Compare a candidate output ``out`` and the reference ``ref`` against the ground truth ``truth``."""
    import torch

    ref = torch.as_tensor(ref)
    if not (out.dtype.is_floating_point and ref.dtype.is_floating_point):
        return Accuracy(True, skipped="not a floating output")
    if truth is None:
        return Accuracy(True, skipped="no ground truth")
    truth = torch.as_tensor(truth)
    if out.numel() == 0:
        return Accuracy(True, skipped="empty")
    if tuple(truth.shape) != tuple(out.shape):
        return Accuracy(True, skipped=f"ground truth has shape {tuple(truth.shape)}")
    u = unit_roundoff(out.dtype)
    # Block by block (bounded memory: a [batch 80, 1500, 5120] output is 4.9 GB per float64 temporary): the mean
    # errors first, then the elements far worse than the reference's own error there.
    scaled = _Scaled(truth)
    ref = ref.to(out.device)
    n = max(out.numel(), 1)
    sum_ref = sum_cand = 0.0
    for blk in scaled.blocks():
        sum_ref += float(scaled.errors(ref, blk).sum())
        sum_cand += float(scaled.errors(out, blk).sum())
    mean_ref, mean_cand = sum_ref / n, sum_cand / n
    if not math.isfinite(mean_cand):
        return Accuracy(False, mean_cand, mean_ref, None, reason=f"{name}: non-finite error against the ground truth")
    if not math.isfinite(mean_ref) or mean_ref < INFORMATIVE_ULPS * u:
        return Accuracy(True, mean_cand, mean_ref, None,
                        skipped="the ground truth is no more precise than the reference")
    bound = ACCURACY_FACTOR * mean_ref + ACCURACY_FLOOR_ULPS * u
    far_n = 0
    for blk in scaled.blocks():
        far_n += int((scaled.errors(out, blk) > SPARSE_FACTOR * scaled.errors(ref, blk)
                      + SPARSE_OFFSET * (mean_ref + u)).sum())
    sparse = far_n / n
    if mean_cand > bound:
        return Accuracy(False, mean_cand, mean_ref, sparse, reason=(
            f"{name}: mean error {mean_cand:.3g} against the float64 ground truth is {mean_cand / mean_ref:.3g}× "
            f"the reference's own ({mean_ref:.3g}); at most {ACCURACY_FACTOR:g}× + {ACCURACY_FLOOR_ULPS:g} ulp "
            "is allowed (a lower precision, skipped work or an approximation)"))
    if sparse > SPARSE_FRACTION:
        return Accuracy(False, mean_cand, mean_ref, sparse, reason=(
            f"{name}: {sparse:.3%} of elements are far less accurate than the reference's own error there "
            f"(at most {SPARSE_FRACTION:.1%} allowed): zeros, stale or skipped values within the tolerance"))
    return Accuracy(True, mean_cand, mean_ref, sparse)


#: Precision casts the ground truth ignores, by the dtype it computes in: a reference that rounds to bfloat16 on
#: purpose (``(x_norm * w).to(torch.bfloat16)`` before a linear layer, as L2_055's does) would otherwise either fail
#: in float64 ("expected scalar type BFloat16 but found Double") or round the truth. Casts to fp8 or integers are
#: quantization, part of the problem's math, and are kept.
PRECISION_CASTS = {"float64": ("bfloat16", "float16", "float32"), "float32": ("bfloat16", "float16")}


def keep_precision(dtype):
    """A ``TorchFunctionMode`` under which a floating cast to a less precise float (``.to(torch.bfloat16)``,
    ``.half()``, ``.float()``, ``dtype=torch.float32`` of ``softmax`` or a factory function) gives ``dtype`` instead:
    the reference's math without its intermediate rounding. Only bf16/f16/f32 targets are changed
    (:data:`PRECISION_CASTS`)."""
    import torch
    from torch.overrides import TorchFunctionMode

    low = {getattr(torch, n) for n in PRECISION_CASTS.get(str(dtype).replace("torch.", ""), ())}
    methods = {torch.Tensor.bfloat16: torch.bfloat16, torch.Tensor.half: torch.float16,
               torch.Tensor.float: torch.float32}

    def swap(v):
        return dtype if isinstance(v, torch.dtype) and v in low else v

    class KeepPrecision(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in methods and methods[func] in low and args and isinstance(args[0], torch.Tensor) \
                    and args[0].is_floating_point():
                return args[0].to(dtype) if args[0].dtype in low else args[0]
            if func in (torch.Tensor.to, torch.Tensor.type):
                args = tuple(swap(a) for a in args)
            if "dtype" in kwargs:
                kwargs["dtype"] = swap(kwargs["dtype"])
            return func(*args, **kwargs)

    return KeepPrecision()


def _upcast(inputs: Mapping[str, Any], dt) -> dict[str, Any]:
    """``inputs`` with every floating tensor converted to ``dt`` (a new tensor each), the rest as they are."""
    import torch

    return {k: (v.to(dt) if isinstance(v, torch.Tensor) and v.dtype.is_floating_point else v)
            for k, v in inputs.items()}


def ground_truth(problem, module, inputs: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The reference's outputs on ``inputs`` upcast to float64 (float32 if that fails), its precision casts
    kept at that dtype (:func:`keep_precision`).

    Returns:
        ``(outputs by name or None, dtype used or the reason there is none)``.
    """
    import torch

    floats = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.dtype.is_floating_point]
    if not floats:
        return None, "no floating inputs"
    notes = []
    for dt in (torch.float64, torch.float32):
        if dt is torch.float32 and all(v.dtype in (torch.float32, torch.float64) for v in floats):
            break  # nothing more precise than the inputs themselves
        try:  # the upcast too: float64 copies of large inputs may not fit (L2_024's 12 GiB of bf16 experts: 48 GiB)
            up = _upcast(inputs, dt)
            with keep_precision(dt):
                out = problem.run_reference(up, module=module)
            return {k: torch.as_tensor(v) for k, v in out.items()}, str(dt).replace("torch.", "")
        except Exception as e:  # the reference may not support the dtype (or fit in memory): the next, else skip
            if any(v.is_cuda for v in floats):
                torch.cuda.empty_cache()  # what a float64 run that ran out of memory left cached
            notes.append(f"{str(dt).replace('torch.', '')}: {type(e).__name__}: {str(e)[:120]}")
    return None, "reference fails in higher precision (" + "; ".join(notes) + ")"


__all__ = ["Accuracy", "check_accuracy", "ground_truth", "keep_precision", "PRECISION_CASTS", "normalized_errors", "unit_roundoff",
           "ACCURACY_FACTOR", "ACCURACY_FLOOR_ULPS", "SPARSE_FACTOR", "SPARSE_OFFSET", "SPARSE_FRACTION"]
