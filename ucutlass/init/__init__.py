"""``ucutlass init``: a `.ucut` program written from a problem's reference (issue 17).

``capture`` (the reference's aten graph on fake tensors) → ``partition`` (kernels, torch steps, views) → ``emit``
(readable text) → ``program`` (the entry: write, then check with the emulated grade).
"""

from .capture import Capture, InitError, capture
from .program import InitResult, check_program, init_program, run_init

__all__ = ["Capture", "InitError", "InitResult", "capture", "check_program", "init_program", "run_init"]
