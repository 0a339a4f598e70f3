"""SM90 rules for convolutions (``kernel NAME : conv``, CUTLASS 3.x implicit-GEMM fprop), checked before nvcc.

Header paths are relative to the ``nvidia-cutlass==4.2.0.0`` wheel's ``cutlass_library/source/include``.

- Schedule: the SM90 conv mainloop (``MainloopSm90TmaGmmaWarpSpecializedImplicitGemm``) takes only the
  non-persistent ``KernelImplicitTmaWarpSpecializedSm90``: ``cutlass/conv/dispatch_policy.hpp:81-83`` asserts
  "Persistent schedules not support for conv yet" for the cooperative and pingpong ones. So no stream-K, no split-K,
  and the tile scheduler's raster and swizzle do not apply (``sm90.conv-schedule``, ``sm90.conv-scheduler``).
- The builder (``cutlass/conv/collective/builders/sm90_gmma_builder.inl``) loads A with TMA im2col and B with tiled
  TMA, K-major both (fprop): 16-byte aligned channels (``is_aligned`` static_assert and ``can_implement`` in
  ``cutlass/conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:343-354``): ``sm90.conv-alignment`` (no
  ``alignment`` setting) and, given extents, ``sm90.conv-align`` (C and K × element bytes multiples of 16).
- ``can_implement`` (same file, 361-404): padding at most 65536 (1-D), 256 (2-D), 16 (3-D), the filter window
  ``(S-1)·dilation`` below 2^(16/rank) - 1 (the im2col TMA's offsets) and the im2col corners (-padding,
  padding - (S-1)·dilation) within ±2^(16/rank - 1) (so 2-D padding ≤ 128): ``sm90.conv-extents``, with the output
  extent ≥ 1.
- Element types: the wgmma inputs of a gemm (bf16, f16, f32 as tf32), one dtype for a and b (``sm90.conv-dtype``);
  ``groups`` = 1 (``sm90.conv-groups``: ``ConvProblemShape::groups`` is not read by the SM90 fprop mainloop).
- Tile, cluster, stages and shared memory are the sm90 GEMM rules (:mod:`ucutlass.arch.sm90`) on the GEMM view
  (:func:`gemm_view`): M = output pixels, N = output channels K, K = C·window, schedule ``warpspecialized``.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import Diagnostic
from ..ir import ConvKernel, Schedule, Target
from . import _common, sm90
from ._conv import check_extents, check_padding, check_setup, gemm_view

__all__ = ["check_kernel", "resolve_schedule", "gemm_view", "RULES", "SCHEDULES", "PADDING_LIMIT",
           "FILTER_OFFSET_LIMIT"]

#: Schedules of the SM90 conv kernel: ``auto`` and ``warpspecialized`` (KernelImplicitTmaWarpSpecializedSm90).
SCHEDULES = (Schedule.auto, Schedule.warpspecialized)
#: Largest padding per rank (TMA im2col, sm90_implicit_gemm_gmma_ss_warpspecialized.hpp:362).
PADDING_LIMIT = {1: 65536, 2: 256, 3: 16}
#: (window - 1) · dilation must be below this per rank (the im2col offsets, same file :392).
FILTER_OFFSET_LIMIT = {1: (1 << 16) - 1, 2: (1 << 8) - 1, 3: (1 << 5) - 1}

RULES: dict[str, str] = {
    "sm90.conv-schedule": "conv schedule is auto or warpspecialized (CUTLASS's SM90 conv is not persistent)",
    "sm90.conv-scheduler": "conv runs the plain tile order: persistent scheduler, split_k 1, raster auto, swizzle 1",
    "sm90.conv-groups": "conv groups = 1 (grouped and depthwise convolution are not built)",
    "sm90.conv-dtype": "conv a and b are one of bf16, f16, f32 (tf32); d bf16, f16 or f32",
    "sm90.conv-alignment": "conv operands are 16-byte aligned (alignment = auto: TMA im2col)",
    "sm90.conv-align": "given extents, C and K × element bytes are multiples of 16",
    "sm90.conv-extents": "given extents, padding, filter window and output extents within TMA im2col's limits",
    "sm90.conv-epilogue": "a conv epilogue has no [K] reductions (sum_m/max_m) yet: wrong on the H200",
}


def resolve_schedule(kernel: ConvKernel) -> Schedule:
    """``auto`` and ``warpspecialized`` are the one SM90 conv schedule: ``warpspecialized``."""
    _common.require_concrete_schedule(kernel)
    return Schedule.warpspecialized


def check_kernel(kernel: ConvKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule a concrete conv kernel breaks: :data:`RULES`, then the sm90 GEMM rules on :func:`gemm_view`.

    Args:
        kernel: a conv kernel without open choices.
        extents: optional extents by dim name (``{"N": 1, "W": 3000, "C": 1280, "K": 1280, "S": 3, "Q": 1500}``).

    Raises:
        ValueError: the kernel still has open choices.
    """
    _common.require_concrete(kernel)
    if kernel.target is not Target.sm90:
        raise ValueError(f"kernel {kernel.name!r} targets {kernel.target.value}: ucutlass.arch.check_kernel picks "
                         "the conv rules of its target")
    out = check_setup(kernel, "sm90", SCHEDULES, "CUTLASS's SM90 conv mainloop runs "
                      "KernelImplicitTmaWarpSpecializedSm90 only (dispatch_policy.hpp: \"Persistent schedules not "
                      "support for conv yet\")")
    if any(d.code == "sm90.conv-dtype" for d in out):
        return out
    reduced = [o.name for o in kernel.epilogue_outputs]
    if reduced:
        # Sm90RowReduction reduces across CTAs through an epilogue workspace that CUTLASS's SM90 conv kernel does not
        # set up: the two GPU tests of tests/test_conv_gpu.py read NaN on the H200 (2026-12-02), while the GEMM's
        # reductions (same EVT nodes, GemmUniversal's workspace) pass. Refused until the conv path allocates it.
        out.append(_common.diag("sm90.conv-epilogue", f"{', '.join(reduced)}: [K] reductions over a conv's output "
                                "pixels are not supported yet (CUTLASS's SM90 conv kernel sets up no epilogue "
                                "workspace for them); reduce d in a torch step or a separate kernel", kernel.pos,
                                ()))
        return out
    out += sm90.check_kernel(gemm_view(kernel))
    out += check_padding(kernel, "sm90", PADDING_LIMIT[kernel.rank])
    if extents:
        out += check_extents(kernel, extents, "sm90", FILTER_OFFSET_LIMIT[kernel.rank] - 1)
    return out
