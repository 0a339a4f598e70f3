"""sm90 rules for attention kernels (CUTLASS ``examples/88_hopper_fmha``, FmhaBuilder), checked before nvcc.

Facts used (headers of the installed wheel, ``cutlass_library/source/examples/88_hopper_fmha``):
- ``collective/fmha_collective_tma_warpspecialized.hpp``: two MMA warpgroups by default
  (``Tag::kNumMmaWarpGroups`` = 2), each owning BlockQ / 2 query rows of the tile through a
  ``KernelTmaWarpSpecialized`` CollectiveBuilder (wgmma M = 64 per warpgroup); ``static_assert(Stages::value >= 2)``
  on the KV pipeline (``Tag::kStagesKV``, default 5); ``StagesQ`` = the number of MMA warpgroups; shared memory
  holds Q (StagesQ × BlockQ/2 × D) and a K/V union (stages × BlockKV × D); ``can_implement`` wants
  D ≤ the tile's head dim and D, Sk multiples of 16 bytes.
- ``kernel/fmha_kernel_builder.hpp``: the Pingpong policy is the cooperative kernel with
  ``Tag::kIsPersistent`` and ``Tag::kLoadsQSeparately`` forced on.
- ``kernel/fmha_kernel_tma_warpspecialized.hpp``: a persistent kernel keeps one epilogue TensorStorage per MMA
  warpgroup beside the mainloop's; a non-persistent one overlays them (a union).
- ``collective/fmha_fusion.hpp``: the mainloop calls ``Fusion{}.before_softmax(acc_qk, index_qk, problem_size)``
  on the unscaled Q·Kᵀ tile of every "masked" KV block (``get_masked_trip_count``), with (query, key) indices;
  a stateless, default-constructed Fusion: our score modifier (softcap, bias, window) reads its run-time values from
  ``__constant__`` memory (templates/sm90_fmha.cu.j2) and masks every KV block.
- ``can_implement``: D ≤ the tile's head dim, D % 8 == 0: D = 96 and 192 run on the 128 and 256 tiles, the missing
  columns zero-filled by TMA (4/3 of the FLOPs of Q·Kᵀ and P·V).
- Measured on the H200 (shared/reference/cutlass/README.md): BlockKV 256 at D = 128 fails at initialize
  (the 5 KV stages need 320 KiB); this is the ``sm90.attn-smem`` rule.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import Diagnostic
from ..ir import Choice, Schedule
from ._common import diag, kib, pos

#: Shared memory a CTA may use on an H100/H200: 227 KiB (CUDA C++ Programming Guide, compute capability 9.0).
SMEM_BYTES = 227 * 1024
#: Barriers and pipeline state beside the tensors (a few hundred bytes; rounded up).
SMEM_RESERVED = 1024
HEAD_DIMS = (32, 64, 96, 128, 192, 256)  # 88_hopper_fmha.cu's (run_fwd_32 ... run_fwd_256), 96 and 192 padded
BLOCK_Q = (128,)
BLOCK_KV = (64, 128, 256)
#: 88's default KV pipeline depth (Tag::kStagesKV).
DEFAULT_STAGES = 5
NUM_MMA_WARPGROUPS = 2

RULES: dict[str, str] = {
    "sm90.attn-head-dim": "attention head dim D is 32, 64, 96, 128, 192 or 256 (96, 192 on the 128, 256 tiles)",
    "sm90.attn-tile": "attention tile BlockQ is 128 (two MMA warpgroups x 64 rows), BlockKV 64, 128 or 256",
    "sm90.attn-pingpong-persistent": "attention pingpong is always persistent (88's FmhaBuilder forces it)",
    "sm90.attn-stages": "attention KV stages >= 2",
    "sm90.attn-smem": "attention Q, K/V stages and epilogue fit in 227 KiB of shared memory",
    "sm90.attn-extents": "given extents: Hq a multiple of Hkv, causal needs Sq <= Sk",
}


def resolve_schedule(kernel) -> Schedule:
    """``auto`` is cooperative (fastest of the measured variants on the H200)."""
    return Schedule.cooperative if kernel.schedule is Schedule.auto else kernel.schedule


def resolve_persistent(kernel) -> bool:
    """``auto``: persistent for pingpong (forced by the builder), not for cooperative (measured faster causal)."""
    if kernel.persistent is None:
        return resolve_schedule(kernel) is Schedule.pingpong
    return bool(kernel.persistent)


def smem_bytes(kernel, stages: int | None = None) -> int:
    """Estimated dynamic shared memory of the FMHA kernel (bytes): Q stages + K/V stages + epilogue storage.

    The epilogue's TMA store stages a 64 x 32 subtile twice per warpgroup (EpilogueTileAuto); it is added only
    for persistent kernels, where it does not overlay the mainloop's storage.
    """
    e = kernel.dtype.bytes
    d = kernel.tile_head_dim
    block_q, block_kv = kernel.tile
    stages = stages or kernel.stages or DEFAULT_STAGES
    q = NUM_MMA_WARPGROUPS * (block_q // NUM_MMA_WARPGROUPS) * d * e
    kv = stages * block_kv * d * e
    epi = NUM_MMA_WARPGROUPS * 2 * 64 * min(d, 32) * e if resolve_persistent(kernel) else 0
    return q + kv + epi + SMEM_RESERVED


def check_extents(kernel, extents: Mapping[str, int] | None, prefix: str) -> list[Diagnostic]:
    """Run-time extents a kernel cannot serve: Hq not a multiple of Hkv; causal with Sq > Sk; another D."""
    out: list[Diagnostic] = []
    if not extents:
        return out
    hq, hkv = extents.get("Hq"), extents.get("Hkv")
    if hq and hkv and hq % hkv:
        out.append(diag(f"{prefix}.attn-extents", f"Hq = {hq} is not a multiple of Hkv = {hkv} (grouped-query "
                        "attention shares each KV head among Hq / Hkv query heads)", kernel.k.pos))
    sq, sk = extents.get("Sq"), extents.get("Sk")
    if kernel.mask == "causal" and sq and sk and sq > sk:
        out.append(diag(f"{prefix}.attn-extents", f"causal with Sq = {sq} > Sk = {sk}: the top-left aligned mask "
                        "would let rows past Sk read keys past the end", pos(kernel, "mask"), ("none",)))
    d = extents.get("D")
    if d and d != kernel.head_dim:
        out.append(diag(f"{prefix}.attn-extents", f"the problem's head dim is {d}, the kernel's {kernel.head_dim}",
                        kernel.q.pos, (str(d),)))
    return out


def check_kernel(kernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every sm90 attention rule (:data:`RULES`) a concrete kernel breaks."""
    if not kernel.is_concrete():
        raise ValueError(f"kernel {kernel.name!r} has open choices {sorted(kernel.choices())}; resolve them first")
    out: list[Diagnostic] = []
    if kernel.head_dim not in HEAD_DIMS:
        out.append(diag("sm90.attn-head-dim", f"head dim {kernel.head_dim}: the sm90 FMHA takes D in 32, 64, 96, 128, "
                        "192, 256 (96 and 192 run on the 128 and 256 tiles)", kernel.q.pos, HEAD_DIMS))
    block_q, block_kv = kernel.tile
    if block_q not in BLOCK_Q or block_kv not in BLOCK_KV:
        valid = [f"{q}x{kv}" for q in BLOCK_Q for kv in BLOCK_KV]
        out.append(diag("sm90.attn-tile", f"tile {block_q}x{block_kv}: BlockQ is 128 (two MMA warpgroups of 64 "
                        "rows) and BlockKV 64, 128 or 256", pos(kernel, "tile"), valid))
    schedule = resolve_schedule(kernel)
    if schedule is Schedule.pingpong and kernel.persistent is False:
        out.append(diag("sm90.attn-pingpong-persistent", "schedule pingpong is always persistent (FmhaBuilder adds "
                        "Tag::kIsPersistent): use persistent = auto or true, or schedule cooperative",
                        pos(kernel, "persistent"), ("auto", "true")))
    if schedule not in (Schedule.cooperative, Schedule.pingpong):
        out.append(diag("sm90.attn-tile", f"schedule {schedule.value} is not an sm90 FMHA policy",
                        pos(kernel, "schedule"), ("auto", "cooperative", "pingpong")))
    if kernel.stages is not None and kernel.stages < 2:
        out.append(diag("sm90.attn-stages", f"stages = {kernel.stages}: the KV pipeline needs at least 2",
                        pos(kernel, "stages"), ("auto", "2", "3", "4", "5")))
    if not out:
        need = smem_bytes(kernel)
        if need > SMEM_BYTES:
            fit = [s for s in range(2, 9) if smem_bytes(kernel, s) <= SMEM_BYTES]
            stages = kernel.stages or DEFAULT_STAGES
            hint = f"at most {fit[-1]} KV stages fit" if fit else "no stage count fits: use a smaller BlockKV"
            out.append(diag("sm90.attn-smem", f"tile {block_q}x{block_kv}, D = {kernel.head_dim}, {stages} KV stages: "
                            f"~{kib(need)} of shared memory, more than 227 KiB; {hint}",
                            pos(kernel, "stages" if kernel.stages else "tile"),
                            [str(s) for s in fit] if fit else ("128x128", "128x64")))
    out += check_extents(kernel, extents, "sm90")
    return out
