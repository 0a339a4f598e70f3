"""sm100 rules for attention kernels (CUTLASS ``examples/77_blackwell_fmha``), checked before nvcc.

Facts used (``cutlass_library/source/examples/77_blackwell_fmha``): ``Sm100FmhaFwdMainloopTmaWarpspecialized``
runs two softmax warpgroups of 128 rows each over a 128-wide KV block, so the example instantiates only
TileShape 256 x 128 x D with D in 32, 64, 128 (``77_blackwell_fmha.cu``, run_fwd_32/64/128); its pipeline
depths are fixed inside the mainloop (no stage option); the tile scheduler is ``PersistentTileScheduler`` or
``IndividualTileScheduler`` (``Tag::kIsPersistent``, default persistent). GQA is native: the head mode is
((H_R, H_K), B) with a zero K/V stride over H_R.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import Diagnostic
from ..ir import Schedule
from ._common import diag, pos
from .sm90_attention import check_extents

HEAD_DIMS = (32, 64, 128)
TILES = ((256, 128),)

RULES: dict[str, str] = {
    "sm100.attn-head-dim": "attention head dim D is 32, 64 or 128",
    "sm100.attn-tile": "attention tile is 256x128 (two softmax warpgroups x 128 rows, BlockKV 128)",
    "sm100.attn-schedule": "attention schedule is auto (77 has one warp-specialized kernel)",
    "sm100.attn-stages": "attention stages are auto (fixed by 77's mainloop)",
    "sm100.attn-extents": "given extents: Hq a multiple of Hkv, causal needs Sq <= Sk",
    "sm100.attn-variant": "softcap, window, bias and scalar scale are sm90 only (our score modifier is in the sm90 "
                          "template; 77's mainloop has no fusion hook of that kind)",
}


def resolve_schedule(kernel) -> Schedule:
    """The one sm100 FMHA kernel (reported as ``auto``)."""
    return Schedule.auto


def resolve_persistent(kernel) -> bool:
    """``auto`` is persistent (77's default)."""
    return True if kernel.persistent is None else bool(kernel.persistent)


def check_kernel(kernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every sm100 attention rule (:data:`RULES`) a concrete kernel breaks."""
    if not kernel.is_concrete():
        raise ValueError(f"kernel {kernel.name!r} has open choices {sorted(kernel.choices())}; resolve them first")
    out: list[Diagnostic] = []
    if kernel.head_dim not in HEAD_DIMS:
        out.append(diag("sm100.attn-head-dim", f"head dim {kernel.head_dim}: the sm100 FMHA takes D in 32, 64, 128",
                        kernel.q.pos, HEAD_DIMS))
    if tuple(kernel.tile) not in TILES:
        out.append(diag("sm100.attn-tile", f"tile {kernel.tile[0]}x{kernel.tile[1]}: the sm100 FMHA runs 256x128",
                        pos(kernel, "tile"), ("256x128",)))
    if kernel.schedule is not Schedule.auto:
        out.append(diag("sm100.attn-schedule", f"schedule {kernel.schedule.value}: the sm100 FMHA has one schedule",
                        pos(kernel, "schedule"), ("auto",)))
    if kernel.stages is not None:
        out.append(diag("sm100.attn-stages", "stages: the sm100 FMHA fixes its pipeline depths",
                        pos(kernel, "stages"), ("auto",)))
    variants = [name for name, on in (("bias", kernel.bias is not None), ("softcap", kernel.has_softcap),
                                      ("window", kernel.window is not None),
                                      ("scale : f32 <- …", kernel.scalar("scale") is not None)) if on]
    if variants:
        out.append(diag("sm100.attn-variant", f"{', '.join(variants)}: the sm100 FMHA has no score modifier yet; "
                        "use target = sm90", pos(kernel, "target"), ("sm90",)))
    out += check_extents(kernel, extents, "sm100")
    return out
