"""A compiled pipeline: every kernel call's .so loaded once, the steps run as one callable (:mod:`ucutlass.bind.pipeline`).

The pipeline is bound to the problem (shapes flow, each kernel call bound as :func:`ucutlass.bind.bind` would bind
it), each bound kernel is loaded from the .so built from it (found by its build digest: one .so serves every call of
the same bound kernel), and :meth:`ucutlass.bind.PipelineBinding.callable` gives one destination-passing
``fn(*inputs, *outputs)``: kernel outputs are allocated once per tuple of argument shapes and reused, every kernel and
torch step runs on torch's current stream, torch steps go through the allow-list; on a GPU the call is replayed as a
CUDA graph from its second call with the same arguments (:mod:`.graphs`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from ..bind import bind_pipeline
from ..errors import KernelRuntimeError
from .base import KernelLauncher
from .graphs import CudaGraphed


def load_pipeline(program: Any, problem: Any, so_paths: Mapping[str, str | os.PathLike], name: str | None,
                  load_kernel: Callable[[Any, Any], KernelLauncher]) -> Callable[..., None]:
    """``program``'s pipeline as one callable on compiled kernels.

    Args:
        program: a concrete :class:`ucutlass.ir.Program` with a pipeline (``name``, or its only one).
        problem: the :class:`ucutlass.problem.Problem`.
        so_paths: ``{build digest: .so path}`` for every bound kernel of the pipeline's calls
            (:attr:`ucutlass.bind.KernelCall.bound_kernel`, :meth:`build_digest`).
        load_kernel: ``(so_path, kernel) -> launcher`` (:func:`ucutlass.runtime.load_kernel`).

    Returns:
        A destination-passing ``fn(*inputs, *outputs)`` in the problem's order (a :class:`.graphs.CudaGraphed`);
        ``fn.pipeline`` is the binding.

    Raises:
        CheckError: the pipeline does not bind. KernelRuntimeError: a bound kernel has no .so in ``so_paths``.
    """
    binding = bind_pipeline(program, problem, name)
    loaded: dict[str, KernelLauncher] = {}

    def load(kernel: Any) -> KernelLauncher:
        digest = kernel.build_digest()
        if digest not in loaded:
            if digest not in so_paths:
                raise KernelRuntimeError(f"{program.file}: no .so for kernel {kernel.name} ({kernel.config_name()}, "
                                         f"digest {digest[:12]}) of the pipeline")
            loaded[digest] = load_kernel(so_paths[digest], kernel)
        return loaded[digest]

    return CudaGraphed(binding.callable(load))
