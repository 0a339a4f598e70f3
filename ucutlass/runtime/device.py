"""Which GPU a compiled kernel's code runs on, checked before any launch.

Kernels are compiled for an arch-specific target (``sm_90a``, ``sm_100a``), whose code runs only on GPUs of
exactly that compute capability (CUDA C++ Programming Guide, "Feature Set Compiler Targets": ``a`` targets are not
forward compatible): :func:`check_device` refuses, before any launch, an sm100 kernel on an H200 or an sm90 kernel
on a B200. Every family's launcher calls it when it plans a call; the CLI and the grader's loader call it before
compiling or grading.
"""

from __future__ import annotations

from typing import Any

from ..errors import KernelRuntimeError
from ..ir import Target

#: The compute capability whose GPUs run each target's code, and how to name the target in messages.
TARGET_CAPABILITY: dict[Target, tuple[int, int]] = {Target.sm90: (9, 0), Target.sm100: (10, 0)}
TARGET_NAME: dict[Target, str] = {Target.sm90: "Hopper, sm_90a", Target.sm100: "Blackwell, sm_100a"}


def device_mismatch(target: Target, device: Any = None) -> str | None:
    """Why a kernel built for ``target`` cannot run on ``device`` (a CUDA device or index; None: the current
    one), or None when it can. Needs CUDA; ``torch.cuda.get_device_capability`` tells the GPU's arch."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == TARGET_CAPABILITY[target]:
        return None
    return (f"kernel built for {target.value} ({TARGET_NAME[target]}); this GPU is sm_{major}{minor} "
            f"({torch.cuda.get_device_name(device)}): compile only here")


def check_device(target: Target, device: Any = None) -> None:
    """Raise :class:`KernelRuntimeError` when a kernel built for ``target`` cannot run on ``device``.

    Example message: ``kernel built for sm100 (Blackwell, sm_100a); this GPU is sm_90 (NVIDIA H200):
    compile only here``.
    """
    why = device_mismatch(target, device)
    if why:
        raise KernelRuntimeError(why)
