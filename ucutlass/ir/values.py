"""IR values every family shares: element types, layouts, targets, schedules, open choices, and the
position-free JSON that every digest is computed from."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from ..errors import Pos


class DType(enum.Enum):
    """Element types a `.ucut` operand may have. The value is the `.ucut` spelling."""

    bf16 = "bf16"
    f16 = "f16"
    f32 = "f32"
    f8e4m3 = "f8e4m3"  # cutlass::float_e4m3_t, torch.float8_e4m3fn (OCP FP8, max 448)
    f8e5m2 = "f8e5m2"  # cutlass::float_e5m2_t, torch.float8_e5m2
    e2m1 = "e2m1"  # cutlass::float_e2m1_t (FP4; sm100 NVFP4), two per byte: torch.float4_e2m1fn_x2
    ue8m0 = "ue8m0"  # cutlass::float_ue8m0_t, a power-of-two scale factor (MX formats), torch.float8_e8m0fnu
    ue4m3 = "ue4m3"  # cutlass::float_ue4m3_t, the NVFP4 scale factor (stored as torch.float8_e4m3fn)

    @property
    def bits(self) -> int:
        """Width of one element in bits."""
        return {"bf16": 16, "f16": 16, "f32": 32, "e2m1": 4}.get(self.value, 8)

    @property
    def bytes(self) -> int:
        """Width of one element in bytes (0 for the 4-bit e2m1: use :attr:`bits` where it can occur)."""
        return self.bits // 8

    @property
    def is_fp8(self) -> bool:
        """True for the 8-bit float operand types f8e4m3 and f8e5m2 (wgmma/tcgen05 FP8 inputs)."""
        return self in (DType.f8e4m3, DType.f8e5m2)

    @property
    def torch_name(self) -> str:
        """The `torch.dtype` attribute name (also the SOL-ExecBench `dtype` string)."""
        return {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f8e4m3": "float8_e4m3fn",
                "f8e5m2": "float8_e5m2", "e2m1": "float4_e2m1fn_x2", "ue8m0": "float8_e8m0fnu",
                "ue4m3": "float8_e4m3fn"}[self.value]


class Layout(enum.Enum):
    """Memory order of an operand's shape *as declared*: ``row`` = last dim contiguous."""

    row = "row"
    col = "col"


class Target(enum.Enum):
    """GPU architecture a kernel is generated for (``sm90a`` / ``sm100a`` nvcc targets)."""

    sm90 = "sm90"
    sm100 = "sm100"


class Schedule(enum.Enum):
    """Mainloop KernelSchedule. ``auto`` lets the arch rules pick (``ucutlass.arch.sm90`` / ``.sm100``).

    The names are CUTLASS's type names without ``Kernel``, ``Tma`` and the arch suffix. sm90 takes
    ``cooperative``, ``pingpong`` and ``warpspecialized``; sm100 takes ``warpspecialized_1sm`` and
    ``warpspecialized_2sm`` (one tcgen05 MMA per SM, or one MMA over the two SMs of a CTA pair).
    """

    auto = "auto"
    cooperative = "cooperative"  # sm90 KernelTmaWarpSpecializedCooperative
    pingpong = "pingpong"  # sm90 KernelTmaWarpSpecializedPingpong
    warpspecialized = "warpspecialized"  # sm90 KernelTmaWarpSpecialized (not persistent)
    warpspecialized_1sm = "warpspecialized_1sm"  # sm100 KernelTmaWarpSpecialized1SmSm100
    warpspecialized_2sm = "warpspecialized_2sm"  # sm100 KernelTmaWarpSpecialized2SmSm100
    # sm90 FP8 inputs without the mainloop's periodic promotion of the wgmma accumulators to f32 (faster, less
    # exact over long K): KernelTmaWarpSpecialized{Cooperative,Pingpong,}FP8FastAccum
    cooperative_fp8_fastaccum = "cooperative_fp8_fastaccum"
    pingpong_fp8_fastaccum = "pingpong_fp8_fastaccum"
    warpspecialized_fp8_fastaccum = "warpspecialized_fp8_fastaccum"

    @property
    def base(self) -> "Schedule":
        """The schedule without its FP8 fast-accumulation variant (``cooperative_fp8_fastaccum`` -> ``cooperative``)."""
        return Schedule(self.value.replace("_fp8_fastaccum", ""))

    @property
    def fp8_fastaccum(self) -> bool:
        """True for the ``*_fp8_fastaccum`` schedules."""
        return self.value.endswith("_fp8_fastaccum")


class TileScheduler(enum.Enum):
    """CUTLASS tile scheduler: ``persistent`` (PersistentScheduler) or ``stream_k`` (StreamKScheduler)."""

    persistent = "persistent"
    stream_k = "stream_k"


class RasterOrder(enum.Enum):
    """Order in which the tile scheduler walks output tiles (CUTLASS RasterOrderOptions)."""

    auto = "auto"  # Heuristic
    along_m = "along_m"  # AlongM
    along_n = "along_n"  # AlongN


class ReductionMode(enum.Enum):
    """How the stream-K scheduler's CTAs that share an output tile (split-K or stream-K) add their partial sums
    (CUTLASS ``cutlass::gemm::kernel::detail::ReductionMode``, ``tile_scheduler_detail.hpp``)."""

    deterministic = "deterministic"  # Deterministic: in K order, each split waits for the one before (a turnstile)
    nondeterministic = "nondeterministic"  # Nondeterministic: after the first split, the others add at once


class Math(enum.Enum):
    """How a GEMM with f32 a and b multiplies (``math``): ``tf32`` rounds each operand to TF32 (10-bit mantissa)
    and runs one tensor-core MMA (SM90 wgmma); ``3xtf32`` splits each operand into a TF32 big part and a TF32
    remainder and adds three MMAs (big·big + big·small + small·big), about fp32 accuracy (CUTLASS 2.x
    ``arch::OpMultiplyAddFastF32`` on SM80 mma.sync, which the H200 runs: CUTLASS 4.2's SM90 collective builders
    have no 3xTF32 mainloop). The value is the `.ucut` spelling."""

    tf32 = "tf32"
    x3tf32 = "3xtf32"


#: Field metadata of an IR field that the digest JSON leaves out while it holds its default: a setting added after
#: digests were recorded (``math``) keeps every earlier kernel's digest, build cache key and golden render.
OMIT_DEFAULT = {"omit_default": True}


class EpilogueInputKind(enum.Enum):
    """How an extra epilogue input broadcasts over the M×N output tile.

    Named as CUTLASS names the broadcasts: ``row_vector`` is one row [N] repeated down the tile (a bias;
    Sm90RowBroadcast), ``col_vector`` one column [M] repeated across it (a per-row scale; Sm90ColBroadcast),
    ``matrix`` is a full M×N tensor (a residual; Sm90AuxLoad),
    ``scalar`` one value (alpha, beta; Sm90ScalarBroadcast).
    """

    row_vector = "row_vector"
    col_vector = "col_vector"
    matrix = "matrix"
    scalar = "scalar"


@dataclass(frozen=True)
class Choice:
    """An open search choice ``{a, b, …}``: the tuner picks one of ``options``.

    ``options`` hold already-typed values (e.g. ``Schedule.pingpong`` or ``(128, 128, 64)``);
    ``spellings`` hold their `.ucut` text, in the same order, for reports and Optuna (whose categorical
    distributions want plain strings).
    """

    options: tuple[Any, ...]
    spellings: tuple[str, ...]
    pos: Pos = field(default_factory=Pos, compare=False)
    positions: tuple[Pos, ...] = field(default=(), compare=False)  # of each option, for diagnostics


Setting = Union[Any, Choice]


def spell_setting(v: Any) -> str:
    """A setting's value as it appears in a procedural kernel name: ``{a|b}`` for an open choice, the enum's
    spelling, ``128x128x64`` for a shape, ``1``/``0`` for a flag, ``auto`` for None."""
    if isinstance(v, Choice):
        return "{" + "|".join(v.spellings) + "}"
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, tuple):
        return "x".join(str(x) for x in v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return "auto" if v is None else str(v)


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Pos):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__type__": type(value).__name__}
        for f in dataclasses.fields(value):
            if f.compare and not (f.metadata.get("omit_default") and getattr(value, f.name) == f.default):
                out[f.name] = _jsonable(getattr(value, f.name))
        return out
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def canonical_json(value: Any) -> str:
    """Sorted, position-free JSON of an IR value: the input of every digest."""
    return json.dumps(_jsonable(value), sort_keys=True, separators=(",", ":"))


def to_dict(value: Any) -> Any:
    """Plain JSON-able view of an IR value (positions dropped), for ``--json`` output and workers."""
    return _jsonable(value)
