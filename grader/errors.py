"""The grader's own error: misuse of the grader or a broken problem, never a failing candidate.

A candidate that crashes, hangs or computes the wrong thing is a failed :class:`WorkloadResult`, not an
exception; :class:`GraderError` is for what no candidate could fix (an unknown solution file type, a
reference that raises, a worker that cannot start).
"""

from __future__ import annotations

from ucutlass.errors import UcutError


class GraderError(UcutError):
    """The grader cannot grade at all: bad arguments, a broken reference, a worker that will not start."""


__all__ = ["GraderError"]
