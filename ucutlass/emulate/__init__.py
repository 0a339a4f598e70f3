"""Emulation: a program's kernels run as plain torch ops from their IR, on the CPU or a GPU, with no nvcc.

An emulator takes what a compiled kernel takes (its :class:`ucutlass.codegen.Abi`: pointers, then scalars) and
writes what it writes, so the same binding (:mod:`ucutlass.bind`) and dispatch
(:func:`ucutlass.runtime.dispatch_callable`) drive it: what emulation grades is what the program *means*, bound to the problem exactly as the compiled kernel
is. ``ucutlass grade FILE PROBLEM --emulate`` grades it (loader :data:`LOADER`); CI checks every shipped program
that way. Numbers: f32 products of the operands' exact values (TF32 off), rounded to the kernel's ``accum``,
the epilogue in f32 (:mod:`.epilogue`), each output rounded once to its dtype: within a problem's tolerance of the
compiled kernel, which sums the same products in another order.

Modules: :mod:`.epilogue` (the expression tree), one per family (:mod:`.gemm`, :mod:`.grouped`, :mod:`.attention`,
:mod:`.conv`);
this ``__init__`` holds the family table :data:`EMULATORS` and the grader's loader :func:`load_solution`.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..bind import bind, bind_pipeline, family_of
from ..errors import KernelRuntimeError
from .attention import AttentionEmulator
from .conv import ConvEmulator
from .epilogue import evaluate
from .gemm import GemmEmulator, exact_f32
from .grouped import GroupedEmulator

__all__ = ["EMULATORS", "LOADER", "emulate_kernel", "emulate_pipeline", "load_solution", "evaluate", "exact_f32",
           "GemmEmulator", "GroupedEmulator", "AttentionEmulator", "ConvEmulator"]

#: The emulator class of each kernel family (``kernel.family``); a new family adds one row and one module.
EMULATORS: dict[str, type] = {
    "gemm": GemmEmulator,
    "grouped_gemm": GroupedEmulator,
    "attention": AttentionEmulator,
    "conv": ConvEmulator,
}

#: The grader loader of emulated `.ucut` solutions (``SolutionRef.loader``).
LOADER = "ucutlass.emulate:load_solution"


def emulate_kernel(kernel: Any):
    """The emulator of ``kernel`` (a concrete kernel as bound to a problem): an object with ``abi``,
    ``call(values)`` and ``modes(values)`` like a loaded compiled kernel (:data:`EMULATORS`, by family)."""
    return EMULATORS[family_of(kernel)](kernel)


def emulate_pipeline(program: Any, problem: Any, name: str | None = None):
    """``program``'s pipeline bound to ``problem`` and run as torch ops: kernels through their emulators
    (:func:`emulate_kernel`), torch steps through the allow-list (:mod:`ucutlass.ir.torch_ops`).

    Args:
        program: a concrete :class:`ucutlass.ir.Program` with a pipeline (``name``, or its only one).
        problem: the :class:`ucutlass.problem.Problem`.

    Returns:
        A destination-passing ``fn(*inputs, *outputs)`` in the problem's order (``fn.pipeline``: the binding).

    Raises:
        CheckError: the pipeline does not bind (:func:`ucutlass.bind.bind_pipeline`).
    """
    return bind_pipeline(program, problem, name).callable(emulate_kernel)


def load_solution(payload: Mapping[str, Any], problem: Any):
    """Grader loader for an emulated `.ucut` solution (``SolutionRef.loader = "ucutlass.emulate:load_solution"``).

    Args:
        payload: ``{"source": <.ucut text>, "file": …, "kernel": name or None}`` (open choices are resolved as
            :func:`.choices.emulation_picks` says: they do not change what a kernel computes), or with
            ``"dispatch": true`` the program's dispatch (:meth:`ucutlass.ir.Program.dispatch`) as one solution,
            or with ``"pipeline": name`` the program's pipeline (:func:`emulate_pipeline`).
        problem: the :class:`ucutlass.problem.Problem` the program binds to.

    Returns:
        A destination-passing callable ``fn(*inputs, *outputs)`` in the problem's definition order.

    Raises:
        KernelRuntimeError: ``dispatch`` for a program with no ``when``, or a kernel emulation cannot run.
        UcutError: no combination of an open kernel's choices passes the rules and binds.
    """
    from ..lang import parse
    from ..runtime.dispatch import dispatch_callable

    from .choices import emulation_picks

    program = parse(payload["source"], payload.get("file", "<solution>"))
    if program.choices():  # open choices (what `check` accepts): one combination stands for all (.choices)
        if "pipeline" in payload:
            picks = emulation_picks(program, problem, pipeline=payload["pipeline"])
        else:
            names = [k.name for k in program.dispatch()] if payload.get("dispatch") else [payload.get("kernel")]
            picks = emulation_picks(program, problem, kernels=None if names == [None] else names)
        program = program.resolve(picks)
    if "pipeline" in payload:
        return emulate_pipeline(program, problem, payload["pipeline"])
    if payload.get("dispatch"):
        kernels = program.dispatch()
        if not kernels:
            raise KernelRuntimeError(f"{program.file}: a dispatch was asked for, but no kernel has a when")
    else:
        kernels = (program.kernel(payload.get("kernel")),)
    runs = []
    for kernel in kernels:
        binding = bind(kernel, problem)
        runs.append(binding.callable(emulate_kernel(getattr(binding, "kernel", kernel))))
    if not payload.get("dispatch"):
        return runs[0]
    return dispatch_callable(runs, [k.when for k in kernels], runs[-1].modes)
