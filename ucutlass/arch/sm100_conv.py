"""SM100 rules for convolutions (``kernel NAME : conv`` with ``target = sm100``: CUTLASS's tcgen05 implicit-GEMM fprop;
compiled here, runs on a B200 only), checked before nvcc.

Header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's ``cutlass_library/source/include``.

- Schedules: the SM100 conv builder (``cutlass/conv/collective/builders/sm100_umma_builder.inl:75-80``) takes
  ``KernelImplicitTmaWarpSpecialized1SmSm100`` and ``...2SmSm100`` (``auto`` picks as for a gemm,
  :func:`ucutlass.arch.sm100.resolve_schedule`): ``sm100.conv-schedule``. The rest of the setup is the sm90 conv's
  (:func:`ucutlass.arch._conv.check_setup`: the plain tile order, ``groups = 1``, bf16/f16/f32 inputs, TMA).
- ``can_implement`` (``cutlass/conv/collective/sm100_implicit_gemm_umma_warpspecialized.hpp:482-536``): 16-byte
  aligned channels, the im2col filter offset ``(S-1)·dilation`` at most 2^(16/rank) - 1 and its corners (-padding,
  padding - (S-1)·dilation) within ±2^(16/rank - 1): ``sm100.conv-align``, ``sm100.conv-extents``.
- Tile (the MMA tile), cluster, stages, shared memory: the sm100 GEMM rules (:mod:`ucutlass.arch.sm100`) on the GEMM
  view (:func:`ucutlass.arch._conv.gemm_view`).
"""

from __future__ import annotations

from typing import Mapping

from ..errors import Diagnostic
from ..ir import ConvKernel, Schedule, Target
from . import _common, sm100
from ._conv import check_extents, check_padding, check_setup, gemm_view

__all__ = ["check_kernel", "resolve_schedule", "RULES", "SCHEDULES", "FILTER_OFFSET_LIMIT"]

#: Schedules of the SM100 conv kernel (``auto`` resolves to one of the others).
SCHEDULES = (Schedule.auto, Schedule.warpspecialized_1sm, Schedule.warpspecialized_2sm)
#: (window - 1) · dilation must be at most this per rank (the im2col offsets, the collective's :531).
FILTER_OFFSET_LIMIT = {1: (1 << 16) - 1, 2: (1 << 8) - 1, 3: (1 << 5) - 1}

RULES: dict[str, str] = {
    "sm100.conv-schedule": "conv schedule is auto, warpspecialized_1sm or warpspecialized_2sm",
    "sm100.conv-scheduler": "conv runs the plain tile order: persistent scheduler, split_k 1, raster auto, swizzle 1",
    "sm100.conv-groups": "conv groups = 1",
    "sm100.conv-dtype": "conv a and b are one of bf16, f16, f32 (tf32); d bf16, f16 or f32",
    "sm100.conv-alignment": "conv operands are 16-byte aligned (alignment = auto: TMA im2col)",
    "sm100.conv-align": "given extents, C and K × element bytes are multiples of 16",
    "sm100.conv-extents": "given extents, the filter window within TMA im2col's offsets, an output extent ≥ 1",
    "sm100.conv-epilogue": "an sm100 conv epilogue writes d only (the [K] reductions are sm90's)",
}


def resolve_schedule(kernel: ConvKernel) -> Schedule:
    """``auto``: ``warpspecialized_2sm`` when cluster M is even and tile M a multiple of 128, else ``_1sm``
    (:func:`ucutlass.arch.sm100.resolve_schedule`)."""
    _common.require_concrete_schedule(kernel)
    return sm100.resolve_schedule(kernel)


def check_kernel(kernel: ConvKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule a concrete sm100 conv kernel breaks: :data:`RULES`, then the sm100 GEMM rules on the GEMM view.

    Raises:
        ValueError: the kernel still has open choices or targets another architecture.
    """
    _common.require_concrete(kernel)
    if kernel.target is not Target.sm100:
        raise ValueError(f"kernel {kernel.name!r} targets {kernel.target.value}: ucutlass.arch.check_kernel picks "
                         "the conv rules of its target")
    out = check_setup(kernel, "sm100", SCHEDULES, "CUTLASS's SM100 conv builder takes "
                      "KernelImplicitTmaWarpSpecialized1SmSm100 and ...2SmSm100 (sm100_umma_builder.inl:75-80)")
    if any(d.code in ("sm100.conv-dtype", "sm100.conv-schedule") for d in out):
        return out
    aux = [o.name for o in kernel.epilogue_outputs]
    if aux:
        out.append(_common.diag("sm100.conv-epilogue", f"{', '.join(aux)}: an sm100 conv epilogue writes d only so "
                                "far ([K] reductions: sm90)", kernel.pos, ("target = sm90",)))
        return out
    out += sm100.check_kernel(gemm_view(kernel, resolve_schedule(kernel)))
    out += check_padding(kernel, "sm100", None)
    if extents:
        out += check_extents(kernel, extents, "sm100", FILTER_OFFSET_LIMIT[kernel.rank])
    return out
