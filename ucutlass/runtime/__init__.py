"""Run time: load a compiled kernel (.so) with ctypes and call it on torch tensors; the grader's loader.

Calls go on the current torch CUDA stream of the tensors' device; the workspace comes from torch's allocator.
Everything a kernel would reject later (the GPU's architecture, device, dtype, shape, strides, 16-byte alignment)
is checked first and reported with the operand's name.

Modules: :mod:`.base` (the launch base every family derives from: library, ABI, plan cache, workspace, launch,
status text), :mod:`.device` (which GPU a target's code runs on), one launcher per kernel family (:mod:`.gemm`,
:mod:`.grouped`, :mod:`.attention`, :mod:`.conv`), :mod:`.dispatch` (the kernel of a call in a per-shape dispatch),
:mod:`.pipeline` (a pipeline's kernels loaded and its steps run as one callable), :mod:`.custom_op` (a program as a
torch custom op, for models under ``torch.compile``). This
``__init__`` holds the family table (:data:`LAUNCHERS`), :func:`load_kernel` and the grader's loader
:func:`load_solution` (named ``"ucutlass.runtime:load_solution"`` in every :class:`ucutlass.grader.SolutionRef`
that :mod:`ucutlass.solution` writes).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..bind import bind, extents_of, family_of
from ..bind.attention import SM90_SEQ_ALIGNMENT
from ..errors import KernelRuntimeError
from .attention import AttentionCompiledKernel
from .conv import ConvCompiledKernel
from .base import STATUS_RANGES, KernelLauncher, status_text
from .device import TARGET_CAPABILITY, TARGET_NAME, check_device, device_mismatch
from .dispatch import describe, dispatch_callable, pick
from .gemm import CompiledKernel, extent_values
from .grouped import GroupedCompiledKernel, index_type_of
from .pipeline import load_pipeline
from .custom_op import register_custom_op

__all__ = [
    "LAUNCHERS", "load_kernel", "load_solution", "load_pipeline",
    "KernelLauncher", "CompiledKernel", "GroupedCompiledKernel", "AttentionCompiledKernel", "ConvCompiledKernel",
    "check_device", "device_mismatch", "TARGET_CAPABILITY", "TARGET_NAME", "STATUS_RANGES", "status_text",
    "extent_values", "index_type_of", "extents_of", "SM90_SEQ_ALIGNMENT",
    "pick", "dispatch_callable", "describe", "register_custom_op",
]

#: The launcher class of each kernel family (``kernel.family``); a new family adds one row and one module.
LAUNCHERS: dict[str, type[KernelLauncher]] = {
    "gemm": CompiledKernel,
    "grouped_gemm": GroupedCompiledKernel,
    "attention": AttentionCompiledKernel,
    "conv": ConvCompiledKernel,
}


def load_kernel(so_path: str | os.PathLike, kernel: Any) -> KernelLauncher:
    """Load ``so_path`` (built from ``kernel``) as a callable of the kernel's family (:data:`LAUNCHERS`): a
    :class:`CompiledKernel` for a gemm, :class:`GroupedCompiledKernel`, :class:`AttentionCompiledKernel`.

    Raises:
        KernelRuntimeError: the library does not load, has another ABI, or was built from another kernel.
    """
    return LAUNCHERS[family_of(kernel)](so_path, kernel)


def load_solution(payload: Mapping[str, Any], problem: Any):
    """Grader loader for a compiled `.ucut` solution (``SolutionRef.loader = "ucutlass.runtime:load_solution"``).

    Args:
        payload: as :mod:`ucutlass.solution` writes it. One kernel: ``{"so_path": …, "source": <concrete .ucut
            text>, "file": …, "kernel": name or None}``; a dispatch (:meth:`ucutlass.ir.Program.dispatch`):
            ``{"so_paths": {kernel name: path, …}, "source": …, "file": …}``, one .so per kernel of the dispatch;
            a pipeline: ``{"pipeline": name or None, "so_paths": {build digest: path, …}, "source": …, "file": …}``
            (:func:`load_pipeline`).
        problem: the :class:`ucutlass.problem.Problem` the program binds to.

    Returns:
        A destination-passing callable ``fn(*inputs, *outputs)`` in the problem's definition order; for a dispatch,
        each call runs the kernel whose ``when`` its modes meet (:func:`dispatch_callable`).

    Raises:
        KernelRuntimeError: a kernel built for another GPU, a .so that does not load or is missing from
            ``so_paths``, or ``so_paths`` for a program that is no dispatch.
    """
    from ..lang import parse  # the parser loads only when a solution does

    program = parse(payload["source"], payload.get("file", "<solution>"))
    if "pipeline" in payload:
        import torch

        if torch.cuda.is_available():
            for kernel in program.kernels:
                check_device(kernel.target)
        return load_pipeline(program, problem, payload["so_paths"], payload["pipeline"], load_kernel)
    if "so_paths" in payload:
        kernels = program.dispatch()
        if not kernels:
            raise KernelRuntimeError(f"{program.file}: the payload names so_paths, but no kernel has a when "
                                     "(a dispatch); give one kernel's so_path and kernel instead")
        missing = [k.name for k in kernels if k.name not in payload["so_paths"]]
        if missing:
            raise KernelRuntimeError(f"{program.file}: no .so for kernel(s) {', '.join(missing)} of the dispatch "
                                     f"(so_paths has {', '.join(payload['so_paths']) or 'none'})")
    else:
        kernels = (program.kernel(payload.get("kernel")),)
    import torch

    if torch.cuda.is_available():
        for kernel in kernels:
            check_device(kernel.target)  # refuse before grading starts (the first call would refuse too)
    runs = []
    for kernel in kernels:
        binding = bind(kernel, problem)  # binding.kernel: alignment = auto lowered to what the workloads allow
        so_path = payload["so_paths"][kernel.name] if "so_paths" in payload else payload["so_path"]
        runs.append(binding.callable(load_kernel(so_path, getattr(binding, "kernel", kernel))))
    if "so_paths" not in payload:
        return runs[0]
    # modes from the fallback's plan: every kernel binds the same tensors, so any would give the same ones
    return dispatch_callable(runs, [k.when for k in kernels], runs[-1].modes)
