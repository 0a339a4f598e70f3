"""``ucutlass calibrate``: measure the local GPU's real ceilings and store them as a hardware entry.

Measures, with torch and CUDA events (warm-up, then the median of many timed calls, on random data —
not zeros, which some memory systems compress):

- DRAM bandwidth: a device-to-device copy of a buffer much larger than L2, counting read + write bytes;
- dense matmul rate per precision: bf16, fp16, tf32 (fp32 with TF32 allowed) and fp8 (``torch._scaled_mm``,
  where the GPU supports it), on square GEMMs large enough to fill every SM.

The entry (method ``calibrated``) is written to ``hardware-calibrated.json`` in the cache dir
(:func:`ucutlass.sol.hardware.cache_dir`), keyed by ``torch.cuda.get_device_name()``;
``load_hardware("local")`` prefers it to the datasheet.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Callable

from ._errors import CalibrationError
from .hardware import Hardware, calibrated_path, datasheet_for, from_json


def _time_ms(fn: Callable[[], object], *, warmup: int, iters: int) -> tuple[float, float, float]:
    """(median, min, max) milliseconds of ``fn`` over ``iters`` calls timed by CUDA events, after warm-up."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def measure_bandwidth(*, nbytes: int | None = None, warmup: int = 5, iters: int = 30) -> dict:
    """DRAM bandwidth of a device-to-device copy, in bytes/s (read + write bytes over the median time).

    Args:
        nbytes: buffer size; default max(1 GiB, 16 × L2).
    """
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    size = nbytes or max(1 << 30, 16 * int(getattr(props, "L2_cache_size", 0) or 0))
    src = torch.randint(-(2 ** 31), 2 ** 31 - 1, (size // 4,), dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    med, lo, hi = _time_ms(lambda: dst.copy_(src), warmup=warmup, iters=iters)
    moved = 2 * src.numel() * src.element_size()
    return {"bytes_per_s": moved / (med * 1e-3), "buffer_bytes": src.numel() * 4, "median_ms": med,
            "min_ms": lo, "max_ms": hi}


def measure_matmul(precision: str, *, n: int = 8192, warmup: int = 5, iters: int = 20) -> dict:
    """Dense n×n×n matmul rate for ``bf16``, ``fp16``, ``tf32`` or ``fp8``, in FLOP/s (2·n³ over the median).

    Raises:
        CalibrationError: unknown precision, or fp8 on a GPU without fp8 tensor cores.
    """
    import torch

    dev = "cuda"
    if precision in ("bf16", "fp16", "tf32"):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[precision]
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        try:
            med, lo, hi = _time_ms(lambda: torch.mm(a, b), warmup=warmup, iters=iters)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    elif precision == "fp8":
        if torch.cuda.get_device_capability() < (8, 9):
            raise CalibrationError("fp8 tensor cores need compute capability 8.9 or newer")
        a = torch.randn(n, n, device=dev).clamp_(-2, 2).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).clamp_(-2, 2).to(torch.float8_e4m3fn).t()  # column-major B
        one = torch.ones((), device=dev, dtype=torch.float32)
        med, lo, hi = _time_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16),
                               warmup=warmup, iters=iters)
    else:
        raise CalibrationError(f"cannot calibrate precision {precision!r} (valid: bf16, fp16, tf32, fp8)")
    return {"flops_per_s": 2 * n ** 3 / (med * 1e-3), "n": n, "median_ms": med, "min_ms": lo, "max_ms": hi}


def calibrate(*, save: bool = True, n: int = 8192, iters: int = 20, precisions=("bf16", "fp16", "tf32", "fp8"),
              bandwidth_bytes: int | None = None) -> Hardware:
    """Measure the current CUDA GPU and return (and by default store) a ``calibrated`` hardware entry.

    Args:
        save: write the entry to :func:`ucutlass.sol.hardware.calibrated_path`, keyed by the GPU name.
        n: GEMM size (n×n×n) for the matmul rates.
        iters: timed calls per measurement (the median is kept).
        precisions: which matmul precisions to measure; fp8 is skipped where unsupported.
        bandwidth_bytes: copy buffer size (default max(1 GiB, 16 × L2)).

    Raises:
        CalibrationError: no CUDA GPU is visible.
    """
    import torch

    if not torch.cuda.is_available():
        raise CalibrationError("ucutlass calibrate needs a CUDA GPU to measure, and none is visible "
                               "(torch.cuda.is_available() is False); run it on the GPU machine")
    device_name = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bw = measure_bandwidth(nbytes=bandwidth_bytes, iters=max(iters, 10))
    flops, details = {}, {"bandwidth": bw}
    for p in precisions:
        try:
            m = measure_matmul(p, n=n, iters=iters)
        except CalibrationError as e:
            details[p] = {"skipped": str(e)}
            continue
        flops[p] = m["flops_per_s"]
        details[p] = m
    sheet = datasheet_for(device_name)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    raw = {
        "name": f"calibrated:{device_name}", "gpu": device_name, "method": "calibrated",
        "match": [device_name], "flops": flops, "dram_bytes_per_s": bw["bytes_per_s"],
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None,
        "sm_count": props.multi_processor_count, "overhead_s": 0.0, "tf32_priced_as": "tf32",
        "sources": {
            "flops": f"measured by ucutlass calibrate at {when}: median of {iters} torch matmuls "
                     f"({n}x{n}x{n}, random data) timed with CUDA events",
            "dram_bytes_per_s": f"measured by ucutlass calibrate at {when}: device-to-device copy of "
                                f"{bw['buffer_bytes']} bytes, read + write bytes over the median time",
            "l2_bytes": "torch.cuda.get_device_properties", "sm_count": "torch.cuda.get_device_properties",
        },
        "extra": {"torch": torch.__version__, "measured_at": when, "details": details,
                  "datasheet": sheet.name if sheet else None},
    }
    hw = from_json(raw["name"], raw)
    if save:
        path = calibrated_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = json.loads(path.read_text()) if path.is_file() else {}
        entries[device_name] = raw
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(entries, indent=2))
        os.replace(tmp, path)
    return hw


def calibrate_command(*, save: bool = True) -> str:
    """The text ``ucutlass calibrate`` prints: what was measured, against the datasheet, and where it went.

    Raises:
        CalibrationError: no CUDA GPU is visible.
    """
    hw = calibrate(save=save)
    sheet = datasheet_for(hw.gpu)
    lines = [f"{hw.gpu}: {hw.sm_count} SMs, L2 {(hw.l2_bytes or 0) / 2 ** 20:.0f} MiB"]

    def vs(value, ref):
        return f" ({value / ref:.0%} of {sheet.name} datasheet)" if sheet and ref else ""

    lines.append(f"  DRAM copy    {hw.dram_bytes_per_s / 1e12:7.2f} TB/s"
                 + vs(hw.dram_bytes_per_s, sheet.dram_bytes_per_s if sheet else 0))
    for p, rate in hw.flops.items():
        lines.append(f"  matmul {p:<5} {rate / 1e12:7.0f} TFLOP/s" + vs(rate, sheet.flops.get(p) if sheet else 0))
    for p, d in hw.extra.get("details", {}).items():
        if isinstance(d, dict) and "skipped" in d:
            lines.append(f"  matmul {p:<5} skipped: {d['skipped']}")
    lines.append(f"stored as {hw.name!r} in {calibrated_path()}" if save else "not stored (save=False)")
    return "\n".join(lines)


__all__ = ["calibrate", "calibrate_command", "measure_bandwidth", "measure_matmul"]
