"""Rules of a ``gemm`` with ``math = 3xtf32`` on sm90: what the 3xTF32 kernel can build, checked before nvcc.

CUTLASS 4.2's SM90 collective builders have no 3xTF32 mainloop, so a ``3xtf32`` kernel is a CUTLASS 2.x
``device::GemmUniversal`` with ``arch::Sm80`` and ``arch::OpMultiplyAddFastF32`` (mma.sync m16n8k8 TF32, each f32
operand split into a TF32 big part and a TF32 remainder, three MMAs per product: about fp32 accuracy; CUTLASS
example 27, ``examples/27_ampere_3xtf32_fast_accurate_tensorop_gemm``), which the H200 runs
(``templates/sm80_gemm_3xtf32.cu.j2``). What it cannot be is refused here with the setting to change:
- f32 a and b, no scales; c and d one dtype (f32, bf16 or f16), d row-major (``sm90.3xtf32-dtype``);
- the CTA tile from :data:`TILE_MS` x :data:`TILE_NS` x :data:`TILE_KS`, 4 or 8 warps of :func:`warp_shape`
  (``sm90.3xtf32-tile``), :data:`MIN_STAGES` or more stages that fit shared memory (``sm90.3xtf32-stages``);
- no cluster, wgmma schedule, stream-K, split-K, raster, swizzle or swap AB: the 2.x kernel has none of them
  (``sm90.3xtf32-settings``);
- an epilogue CUTLASS 2.x's ``LinearCombination`` / ``LinearCombinationGeneric`` computes: at most one activation
  around alpha·acc + beta·X with literal alpha, beta and X either ``c``, one ``[N]`` bias (read as C with a row
  stride of 0) or one ``[M, N]`` row-major matrix of d's dtype (``sm90.3xtf32-epilogue``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from ..errors import Diagnostic
from ..ir import (DType, EpilogueInputKind, GemmKernel, Math, RasterOrder, Ref, Schedule, Src, Target,
                  TileScheduler, Unary, linear_combination, walk)
from . import _common
from ._common import diag as _diag
from ._common import pos as _pos
from ._common import spell as _spell

#: Rule codes of a ``math = 3xtf32`` kernel, with what each checks (the card lists them).
RULES: dict[str, str] = {
    "sm90.3xtf32-dtype": "math = 3xtf32: a and b f32 without scales; c and d one dtype (f32, bf16, f16), d row-major",
    "sm90.3xtf32-tile": "math = 3xtf32: tile M and N in 64, 128, 256 (at most 8 warps of 64x64), tile K 16 or 32",
    "sm90.3xtf32-stages": "math = 3xtf32: stages >= 3 and within 227 KiB of shared memory",
    "sm90.3xtf32-settings": "math = 3xtf32: target sm90, schedule auto, cluster 1x1x1, scheduler persistent, "
                            "split_k 1, raster auto, swizzle 1, swap_ab false or auto",
    "sm90.3xtf32-epilogue": "math = 3xtf32: d = act(alpha*acc + beta*x), x one of c, an [N] bias, an [M, N] input",
    "sm90.3xtf32-family": "math = 3xtf32 is a gemm setting (grouped_gemm and conv run tf32)",
}

TILE_MS = (64, 128, 256)
TILE_NS = (64, 128, 256)
#: tile K: 16 or 32 f32 (64 or 128 bytes a row, as CUTLASS's SM80 3xTF32 kernels tile it)
TILE_KS = (16, 32)
#: warps a CTA may have (128 or 256 threads): more than 8 warps of 64x64 would leave too few registers per thread
WARP_COUNTS = (4, 8)
#: mma.sync m16n8k8 for TF32 (``cutlass/arch/mma_sm80.h``)
INSTRUCTION_SHAPE = (16, 8, 8)
#: the SM80 multistage mainloop (``cutlass/gemm/threadblock/mma_multistage.h``) wants at least 3 stages
MIN_STAGES = 3
#: ``stages = auto``: 4 (every tile of the table fits 4 stages: 256x128x32 takes 192 KiB)
AUTO_STAGES = 4
#: shared memory of an H100/H200 CTA: 227 KiB (``sm90.SMEM_CAPACITY_BYTES``)
SMEM_CAPACITY_BYTES = 232448
#: activations the 2.x epilogue applies (``cutlass/epilogue/thread/activation.h`` through LinearCombinationGeneric)
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
OUTPUT_DTYPES = (DType.f32, DType.bf16, DType.f16)
SCHEDULES = (Schedule.auto,)


def uses_3xtf32(kernel) -> bool:
    """True for a kernel whose ``math`` is ``3xtf32`` (any family; only a gemm can build it)."""
    return getattr(kernel, "math", Math.tf32) is Math.x3tf32


def warp_shape(tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """WarpShape of a CTA tile: 64 rows (columns) a warp when the tile has 128 or more, else 32."""
    m, n, k = tile
    return (64 if m >= 128 else 32, 64 if n >= 128 else 32, k)


def stages_of(kernel: GemmKernel) -> int:
    """The mainloop stages the kernel is built with (``auto``: :data:`AUTO_STAGES`)."""
    return kernel.stages or AUTO_STAGES


def smem_bytes(kernel: GemmKernel, stages: int) -> int:
    """Shared memory of the mainloop: stages x (tile M + tile N) x tile K f32 (the epilogue's is a union with it)."""
    m, n, k = kernel.tile
    return stages * (m + n) * k * 4


@dataclass(frozen=True)
class LinComb:
    """The epilogue as CUTLASS 2.x computes it: ``d = activation(alpha*acc + beta*source)``.

    Attributes:
        activation: one of :data:`ACTIVATIONS`, or None (``LinearCombination``).
        alpha, beta: literal f32 factors.
        source: ``"c"``, the name of an ``[N]`` bias (read as C with a row stride of 0) or of an ``[M, N]`` input, or
            None (beta is 0: C is not read).
        broadcast: True when the source is an ``[N]`` bias.
    """

    activation: str | None
    alpha: float
    beta: float
    source: str | None
    broadcast: bool = False


def _literal_scalars(kernel: GemmKernel) -> dict[str, float]:
    return {i.name: i.value for i in kernel.epilogue_inputs
            if i.kind is EpilogueInputKind.scalar and i.value is not None}


def lincomb(kernel: GemmKernel) -> LinComb | str:
    """The epilogue of ``kernel`` as a :class:`LinComb`, or a message saying why the 2.x epilogue cannot compute it."""
    if kernel.epilogue_outputs:
        return "extra epilogue outputs (->) need the SM90 EVT; the 2.x epilogue writes d only"
    sources = [i for i in kernel.epilogue_inputs if i.kind is not EpilogueInputKind.scalar]
    runtime = [i.name for i in kernel.epilogue_inputs if i.kind is EpilogueInputKind.scalar and i.value is None]
    if runtime:
        return (f"scalar {runtime[0]} is read from the problem; the 2.x epilogue takes literal factors "
                "(alpha : f32 = 0.5)")
    if len(sources) + (kernel.c is not None) > 1:
        return ("it reads more than one tensor besides acc; the 2.x epilogue reads one (c, an [N] bias or an "
                "[M, N] input)")
    expr = kernel.epilogue
    activation = None
    if isinstance(expr, Unary):
        activation, expr = expr.op, expr.arg
        if activation not in ACTIVATIONS:
            return f"activation {activation} is not one of {', '.join(ACTIVATIONS)}"
    source, broadcast = ("c", False) if kernel.c is not None else (None, False)
    if sources:
        inp = sources[0]
        if inp.kind is EpilogueInputKind.col_vector:
            return f"{inp.name} is an [M] vector; the 2.x epilogue broadcasts an [N] bias only"
        if inp.dtype is not kernel.d.dtype:
            return (f"{inp.name} is {inp.dtype.value} but d is {kernel.d.dtype.value}: the 2.x epilogue reads it as "
                    "d's type")
        if inp.batch:
            return f"{inp.name} has batch dims; the 2.x epilogue reads one for every batch"
        if inp.kind is EpilogueInputKind.matrix and _common.contiguous(inp.dims, inp.layout) != "N":
            return f"{inp.name} is contiguous in M; the 2.x epilogue reads it row-major like d"
        source, broadcast = inp.name, inp.kind is EpilogueInputKind.row_vector
        expr = _substitute(expr, inp.name)
    if any(isinstance(e, Unary) for e in walk(expr)):
        return "an activation inside the expression; the 2.x epilogue applies one, last: act(alpha*acc + beta*x)"
    found = linear_combination(expr, _literal_scalars(kernel))
    if found is None:
        return "it is not alpha*acc + beta*x (x one of c, an [N] bias, an [M, N] input) under at most one activation"
    alpha, beta = found
    if beta == 0.0:
        source, broadcast = None, False
    return LinComb(activation, alpha, beta, source, broadcast)


def _substitute(expr, name: str):
    """``expr`` with input ``name`` read as the source C (:class:`~ucutlass.ir.Src`)."""
    if isinstance(expr, Ref) and expr.name == name:
        return Src()
    if dataclasses.is_dataclass(expr):
        changes = {f.name: _substitute(getattr(expr, f.name), name) for f in dataclasses.fields(expr)
                   if dataclasses.is_dataclass(getattr(expr, f.name))}
        return dataclasses.replace(expr, **changes) if changes else expr
    return expr


def resolve_schedule(kernel: GemmKernel) -> Schedule:
    """A 3xTF32 kernel has one schedule (the SM80 multistage mainloop): ``auto``."""
    return Schedule.auto


def resolve_swap_ab(kernel: GemmKernel, m_max: int | None = None) -> bool:
    """A 3xTF32 kernel never swaps AB (``swap_ab = true`` breaks ``sm90.3xtf32-settings``)."""
    return False


def _check_settings(kernel: GemmKernel) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    lacks = "the SM80 3xTF32 kernel has no"
    for key, ok, valid, why in (
            ("target", kernel.target is Target.sm90, "sm90",
             "the 3xTF32 kernel is built for sm90 (the H100, H200) only"),
            ("schedule", kernel.schedule is Schedule.auto, "auto", f"{lacks} wgmma schedules"),
            ("cluster", tuple(kernel.cluster) == (1, 1, 1), "1x1x1", f"{lacks} thread-block clusters"),
            ("scheduler", kernel.scheduler is TileScheduler.persistent, "persistent", f"{lacks} stream-K scheduler"),
            ("split_k", kernel.split_k == 1, "1", f"{lacks} split-K"),
            ("raster", kernel.raster is RasterOrder.auto, "auto", f"{lacks} raster order argument"),
            ("swizzle", kernel.swizzle == 1, "1", f"{lacks} swizzle argument"),
            ("swap_ab", kernel.swap_ab is not True, "auto", f"{lacks} swapped form")):
        if not ok:
            value = {True: "true", False: "false"}.get(getattr(kernel, key), None) or _spell(getattr(kernel, key))
            out.append(_diag("sm90.3xtf32-settings", f"{key} = {value} with math = 3xtf32: {why}",
                             _pos(kernel, key), (valid,)))
    return out


def _check_dtypes(kernel: GemmKernel) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for op in (kernel.a, kernel.b):
        if op.dtype is not DType.f32:
            out.append(_diag("sm90.3xtf32-dtype", f"{op.name} is {op.dtype.value}: math = 3xtf32 splits f32 "
                             "operands into TF32 parts; declare f32 (or math = tf32)", _pos(kernel, f"{op.name}.dtype"),
                             ("f32",)))
    for s in kernel.scales:
        out.append(_diag("sm90.3xtf32-dtype", f"{s.name}: math = 3xtf32 takes no scale factors", s.pos or kernel.pos))
    if kernel.d.dtype not in OUTPUT_DTYPES:
        out.append(_diag("sm90.3xtf32-dtype", f"d is {kernel.d.dtype.value}; math = 3xtf32 writes f32, bf16 or f16",
                         _pos(kernel, "d.dtype"), tuple(d.value for d in OUTPUT_DTYPES)))
    if kernel.c is not None and kernel.c.dtype is not kernel.d.dtype:
        out.append(_diag("sm90.3xtf32-dtype", f"c is {kernel.c.dtype.value} but d is {kernel.d.dtype.value}: the 2.x "
                         "epilogue reads c as d's type", _pos(kernel, "c.dtype"), (kernel.d.dtype.value,)))
    for op in (kernel.c, kernel.d):
        if op is not None and op.contiguous_dim != "N":
            out.append(_diag("sm90.3xtf32-dtype", f"{op.name} is contiguous in {op.contiguous_dim}; math = 3xtf32 "
                             f"writes row-major [M, N]", _pos(kernel, f"{op.name}.layout"), ("row",)))
    return out


def _tile_ok(tile: tuple[int, int, int]) -> bool:
    m, n, k = tile
    wm, wn, _ = warp_shape(tile)
    return m in TILE_MS and n in TILE_NS and k in TILE_KS and (m // wm) * (n // wn) in WARP_COUNTS


def _check_tile(kernel: GemmKernel) -> list[Diagnostic]:
    if _tile_ok(tuple(kernel.tile)):
        return []
    first = ["128x128x16", "128x64x16", "64x64x16"]
    valid = first + [f"{m}x{n}x{k}" for m in TILE_MS for n in TILE_NS for k in TILE_KS
                     if _tile_ok((m, n, k)) and f"{m}x{n}x{k}" not in first]
    written = bool(kernel.setting_pos and "tile" in kernel.setting_pos)
    what = f"tile {_spell(kernel.tile)}" if written else \
        f"the default tile {_spell(kernel.tile)} (no tile written: add tile = 128x128x32)"
    return [_diag("sm90.3xtf32-tile", f"{what} with math = 3xtf32: the SM80 kernel tiles M and N "
                  f"in {', '.join(map(str, TILE_MS))} over 4 or 8 warps (at most 64x64 each) and K in 16 or 32 f32",
                  _pos(kernel, "tile" if written else "math"), valid)]


def _check_stages(kernel: GemmKernel) -> list[Diagnostic]:
    if kernel.stages is None:
        return []
    fits = [s for s in range(MIN_STAGES, 9) if smem_bytes(kernel, s) <= SMEM_CAPACITY_BYTES]
    if kernel.stages >= MIN_STAGES and smem_bytes(kernel, kernel.stages) <= SMEM_CAPACITY_BYTES:
        return []
    return [_diag("sm90.3xtf32-stages", f"stages = {kernel.stages} with math = 3xtf32 and tile {_spell(kernel.tile)}: "
                  f"the SM80 mainloop needs {MIN_STAGES} or more, and {_common.kib(smem_bytes(kernel, kernel.stages))} "
                  f"of shared memory is over {_common.kib(SMEM_CAPACITY_BYTES)}" if kernel.stages >= MIN_STAGES else
                  f"stages = {kernel.stages} with math = 3xtf32: the SM80 multistage mainloop needs {MIN_STAGES} or "
                  "more",
                  _pos(kernel, "stages"), ["auto"] + [str(s) for s in fits])]


def check_kernel(kernel: GemmKernel, extents: Mapping[str, int] | None = None) -> list[Diagnostic]:
    """Every rule of :data:`RULES` a concrete ``math = 3xtf32`` gemm breaks (an empty list when it builds).

    Args:
        kernel: a gemm without open choices, ``math = 3xtf32``, ``target = sm90``.
        extents: problem extents by dim name; when given, each contiguous extent is checked against the elements
            per access (``sm90.align``).
    """
    _common.require_concrete(kernel)
    out = _check_dtypes(kernel) + _check_settings(kernel) + _check_tile(kernel) + _check_stages(kernel)
    form = lincomb(kernel)
    if isinstance(form, str):
        out.append(_diag("sm90.3xtf32-epilogue", f"epilogue of {kernel.name} with math = 3xtf32: {form}",
                         kernel.epilogue_inputs[0].pos if kernel.epilogue_inputs else kernel.pos,
                         ("d = acc", "d = gelu_tanh(acc + bias)", "d = alpha*acc + beta*c")))
    return out + _common.check_alignment(kernel, extents, "sm90")


def check_family(kernel) -> list[Diagnostic]:
    """``sm90.3xtf32-family``: ``math = 3xtf32`` on a kernel of another family than gemm (a grouped GEMM, a conv:
    ``ucutlass.arch.check_kernel`` asks this of those only)."""
    if not uses_3xtf32(kernel):
        return []
    return [_diag("sm90.3xtf32-family", f"math = 3xtf32 on {kernel.family} {kernel.name}: only a gemm builds the "
                  "3xTF32 kernel (SM80 OpMultiplyAddFastF32); write math = tf32", _pos(kernel, "math"), ("tf32",))]


__all__ = ["RULES", "LinComb", "lincomb", "uses_3xtf32", "warp_shape", "stages_of", "smem_bytes", "check_kernel",
           "check_family", "resolve_schedule", "resolve_swap_ab", "INSTRUCTION_SHAPE", "AUTO_STAGES", "MIN_STAGES"]
