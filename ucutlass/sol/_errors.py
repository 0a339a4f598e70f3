"""Errors of the SOL analysis (subclasses of :class:`ucutlass.errors.UcutError`)."""

from __future__ import annotations

from ..errors import UcutError


class SolError(UcutError):
    """The reference of a problem cannot be counted (an op without a meta kernel and unknown values, …)."""


class HardwareError(UcutError):
    """Unknown hardware name, a malformed hardware entry, or no entry for the local GPU."""


class CalibrationError(HardwareError):
    """``calibrate`` cannot measure (no CUDA GPU, or a measurement failed)."""
