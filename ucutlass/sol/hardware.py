"""GPU ceilings for T_SOL: tensor-core FLOP/s per precision, DRAM bytes/s, and where each number comes from.

Entries live in ``hardware.json`` (package data) and, for measured ones, in the user's cache
(``hardware-calibrated.json``, written by :func:`ucutlass.sol.calibrate.calibrate`). Each entry has a
``method``: ``datasheet`` (NVIDIA's published dense rates), ``solar`` (the constants NVIDIA's SOLAR uses for
SOL-ExecBench, so our bounds can be checked against its published ones) or ``calibrated`` (measured here).
"""

from __future__ import annotations


import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Mapping, Sequence

from ..paths import cache_dir  # one cache root for kernels and calibrations

from ..errors import did_you_mean
from ._errors import HardwareError
from .precision import FALLBACK

METHODS = ("datasheet", "solar", "calibrated")
CALIBRATED_FILE = "hardware-calibrated.json"

#: Short names accepted by ``ucutlass sol --gpu``.
ALIASES = {"h100": "h100-sxm", "h200": "h200-sxm", "b200": "b200", "gb200": "gb200", "solar": "b200-solar"}


@dataclass(frozen=True)
class Hardware:
    """The ceilings of one GPU, as one method gives them.

    Attributes:
        name: the entry's key (``h200-sxm``, ``b200-solar``, ``calibrated:NVIDIA H200``).
        gpu: the GPU, in words.
        method: ``datasheet`` | ``solar`` | ``calibrated``.
        flops: dense tensor-core FLOP/s per precision (``bf16``, ``fp16``, ``tf32``, ``fp8``, ``fp4`` …).
        dram_bytes_per_s: DRAM bandwidth, bytes/s.
        l2_bytes: L2 cache size in bytes (None if unknown).
        sm_count: streaming multiprocessors (None if unknown).
        overhead_s: fixed seconds added to every workload's T_SOL (launch and tail; SOLAR adds ~0.4 µs).
        tf32_priced_as: the precision whose rate prices fp32-input (``tf32``) matmuls: ``tf32``, or ``bf16``
            as SOLAR does.
        match: substrings of ``torch.cuda.get_device_name()`` this entry describes.
        sources: where each number comes from.
        extra: anything else the entry records (measurement details of a calibrated entry).
    """

    name: str
    gpu: str
    method: str
    flops: Mapping[str, float]
    dram_bytes_per_s: float
    l2_bytes: int | None = None
    sm_count: int | None = None
    overhead_s: float = 0.0
    tf32_priced_as: str = "tf32"
    match: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, object] = field(default_factory=dict)

    def rate(self, precision: str) -> tuple[float, str]:
        """(FLOP/s, the precision whose rate was used) for matmuls of ``precision``.

        ``tf32`` follows :attr:`tf32_priced_as`; a precision the GPU has no rate for falls back to the next
        one that bounds it from below (fp4 → fp8 → bf16).

        Raises:
            HardwareError: no rate for the precision nor for any fallback.
        """
        p = self.tf32_priced_as if precision == "tf32" else precision
        seen = []
        while p and p not in seen:
            if self.flops.get(p):
                return float(self.flops[p]), p
            seen.append(p)
            p = FALLBACK.get(p)
        raise HardwareError(f"{self.name}: no tensor-core rate for {precision!r} "
                            f"(rates for: {', '.join(sorted(self.flops))})")

    def describe(self, precisions: Sequence[str] = ()) -> str:
        """One line: name, GPU, method, the dense tensor-core rate of each of ``precisions`` (default bf16; a
        precision with no rate of its own shows the rate it is priced at, as :meth:`rate` prices it) and the
        bandwidth."""
        rates = []
        for p in dict.fromkeys(precisions or ["bf16"]):
            try:
                flops, priced = self.rate(p)
            except HardwareError:
                continue
            rates.append(f"{p} {flops / 1e12:,.0f}" + (f" (as {priced})" if priced != p else ""))
        text = (f"{self.name} ({self.gpu}; method {self.method}): "
                + (f"{', '.join(rates)} TFLOP/s dense, " if rates else "")
                + f"DRAM {self.dram_bytes_per_s / 1e12:.2f} TB/s")
        if self.overhead_s:
            text += f", +{self.overhead_s * 1e6:.2f} µs per workload"
        if self.tf32_priced_as != "tf32":
            text += f", fp32 matmuls priced at {self.tf32_priced_as}"
        return text

    def digest(self) -> str:
        """A stable digest of every number and source (a cache key: names can be reused by calibration)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        return {"name": self.name, "gpu": self.gpu, "method": self.method, "flops": dict(self.flops),
                "dram_bytes_per_s": self.dram_bytes_per_s, "l2_bytes": self.l2_bytes, "sm_count": self.sm_count,
                "overhead_s": self.overhead_s, "tf32_priced_as": self.tf32_priced_as, "match": list(self.match),
                "sources": dict(self.sources), **({"extra": dict(self.extra)} if self.extra else {})}


def from_json(name: str, raw: Mapping) -> Hardware:
    """A :class:`Hardware` from one JSON entry.

    Raises:
        HardwareError: a missing field or an unknown method.
    """
    try:
        method = raw["method"]
        if method not in METHODS:
            raise HardwareError(f"hardware {name!r}: method {method!r} (valid: {', '.join(METHODS)})")
        return Hardware(name=name, gpu=raw.get("gpu", name), method=method,
                        flops={k: float(v) for k, v in raw["flops"].items() if v is not None},
                        dram_bytes_per_s=float(raw["dram_bytes_per_s"]), l2_bytes=raw.get("l2_bytes"),
                        sm_count=raw.get("sm_count"), overhead_s=float(raw.get("overhead_s", 0.0)),
                        tf32_priced_as=raw.get("tf32_priced_as", "tf32"), match=tuple(raw.get("match", ())),
                        sources=dict(raw.get("sources", {})), extra=dict(raw.get("extra", {})))
    except KeyError as e:
        raise HardwareError(f"hardware {name!r}: missing field {e.args[0]!r}") from None


def _shipped() -> dict[str, Hardware]:
    raw = json.loads((resources.files("ucutlass.sol") / "hardware.json").read_text())
    return {k: from_json(k, v) for k, v in raw.items() if not k.startswith("_")}


def calibrated_path() -> Path:
    """The file holding calibrated entries, keyed by GPU name."""
    return cache_dir() / CALIBRATED_FILE


def calibrated_entries() -> dict[str, Hardware]:
    """Calibrated entries from the cache, keyed by ``torch.cuda.get_device_name()`` (empty if none)."""
    path = calibrated_path()
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise HardwareError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg} (delete it and re-run "
                            "`ucutlass calibrate`)") from None
    return {gpu: from_json(entry.get("name", f"calibrated:{gpu}"), entry) for gpu, entry in raw.items()}


def list_hardware() -> list[Hardware]:
    """Every shipped entry, then every calibrated one in the cache."""
    return list(_shipped().values()) + list(calibrated_entries().values())


def datasheet_for(device_name: str) -> Hardware | None:
    """The shipped datasheet entry whose ``match`` best (longest) matches a GPU name, or None."""
    best, best_len = None, 0
    for hw in _shipped().values():
        for pattern in hw.match:
            if pattern.lower() in device_name.lower() and len(pattern) > best_len:
                best, best_len = hw, len(pattern)
    return best


def load_hardware(name: str | Hardware) -> Hardware:
    """A hardware entry by name (``h200-sxm``, ``b200``, ``b200-solar``, an alias such as ``h200``, or ``local``).

    ``local`` is the current CUDA GPU: its calibrated entry if ``ucutlass calibrate`` stored one, else the
    datasheet entry matching ``torch.cuda.get_device_name()``.

    Raises:
        HardwareError: unknown name; ``local`` without a CUDA GPU or without an entry for it.
    """
    if isinstance(name, Hardware):
        return name
    key = ALIASES.get(name.lower(), name)
    if key == "local":
        return _local()
    shipped = _shipped()
    if key in shipped:
        return shipped[key]
    for gpu, hw in calibrated_entries().items():
        if key in (hw.name, gpu):
            return hw
    valid = list(dict.fromkeys(sorted(ALIASES) + sorted(shipped) + ["local"]))  # short names first, once each
    raise HardwareError(f"unknown hardware {name!r}{did_you_mean(name.lower(), valid)} (valid: {', '.join(valid)})")


def _local() -> Hardware:
    import torch

    if not torch.cuda.is_available():
        raise HardwareError("--gpu local needs a CUDA GPU (none is visible); name one instead: "
                            + ", ".join(sorted(_shipped())))
    device_name = torch.cuda.get_device_name()
    calibrated = calibrated_entries().get(device_name)
    if calibrated is not None:
        return calibrated
    sheet = datasheet_for(device_name)
    if sheet is None:
        raise HardwareError(f"no hardware entry for the local GPU {device_name!r}: run `ucutlass calibrate` "
                            "to measure it, or name an entry with --gpu")
    return sheet


__all__ = ["Hardware", "load_hardware", "list_hardware", "datasheet_for", "cache_dir", "calibrated_path",
           "calibrated_entries", "from_json", "ALIASES", "METHODS"]
