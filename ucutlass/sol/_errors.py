"""Errors of the SOL analysis (subclasses of :class:`ucutlass.errors.UcutError`)."""

from __future__ import annotations

from ..errors import UcutError


class SolError(UcutError):
    """The reference of a problem cannot be counted (an op without a meta kernel and unknown values, …)."""


class BrokenReferenceError(SolError):
    """A problem's reference hung past its deadline or ended the process counting it (an exit, a signal).

    Attributes:
        problem_id: the problem.
        workload: the label of the workload being counted (or about to be) when it happened.
        timeout_s: the deadline that passed (None when the process ended).
        status: how the process ended (``exited with code 3``, ``was killed by signal SIGSEGV (11)``), or None.
    """

    def __init__(self, message: str, *, problem_id: str = "", workload: str = "", timeout_s: float | None = None,
                 status: str | None = None):
        super().__init__(message)
        self.problem_id, self.workload, self.timeout_s, self.status = problem_id, workload, timeout_s, status


class HardwareError(UcutError):
    """Unknown hardware name, a malformed hardware entry, or no entry for the local GPU."""


class CalibrationError(HardwareError):
    """``calibrate`` cannot measure (no CUDA GPU, or a measurement failed)."""
