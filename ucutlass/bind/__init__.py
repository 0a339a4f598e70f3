"""Bind a kernel's operands to a problem's inputs and outputs (``<-`` / ``->`` in `.ucut`), per kernel family.

A binding checks, before anything is compiled, that every operand names a tensor of the problem with the same
dtype, that every problem input and output is used, and that the extents come out the same from every operand on
every workload; :attr:`Binding.kernel` is the kernel to build for the problem (a gemm's ``alignment = auto`` and
``swap_ab = auto`` decided for its workloads) and :meth:`Binding.callable` the destination-passing
``fn(*inputs, *outputs)`` over a loaded kernel.

Modules: one per family (:mod:`.gemm`, :mod:`.grouped`, :mod:`.attention`, :mod:`.conv`), :mod:`.slice` (views
of a bound tensor) and :mod:`.pipeline` (a pipeline: shapes flow, each kernel call bound through this table). This
``__init__`` holds the family table (:data:`BINDERS`) and the entry points that go through it:
:func:`bind`, :func:`resolve_alignment`, :func:`resolve_swap_ab`. Nothing here imports :mod:`ucutlass.runtime`: a
binding takes a loaded kernel as any object with ``abi`` and ``call`` (and ``modes`` for a gemm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .attention import SM90_SEQ_ALIGNMENT, AttentionBinding, AttentionSlot, bind_attention, extents_of
from .conv import bind_conv
from .gemm import Binding, Slot, auto_alignment, auto_swap_ab, bind_gemm, bind_operands
from .grouped import bind_grouped
from . import pipeline as _pipeline
from .pipeline import KernelCall, PipelineBinding
from .ports import Port, kernel_output_shapes, kernel_ports, rebound
from .slice import slice_index, slice_problem, slice_view

__all__ = [
    "BINDERS", "FamilyBinder", "family_of", "bind", "resolve_alignment", "resolve_swap_ab", "resolve_auto",
    "Binding", "Slot", "bind_gemm", "bind_operands", "auto_alignment", "auto_swap_ab", "bind_grouped", "bind_conv",
    "AttentionBinding", "AttentionSlot", "bind_attention", "extents_of", "SM90_SEQ_ALIGNMENT",
    "slice_index", "slice_view", "slice_problem",
    "bind_pipeline", "PipelineBinding", "KernelCall", "Port", "kernel_ports", "kernel_output_shapes", "rebound",
]


@dataclass(frozen=True)
class FamilyBinder:
    """What binding does for one kernel family.

    Attributes:
        bind: ``bind(kernel, problem) -> binding`` (raises :class:`ucutlass.errors.CheckError`).
        resolve_alignment: ``(kernel, extents per workload) -> kernel`` with ``alignment = auto`` decided, or None
            where the family has no such setting to decide (the kernel is kept).
        resolve_swap_ab: ``(kernel, extents per workload) -> kernel`` with ``swap_ab = auto`` decided, or None
            where the family does not swap.
    """

    bind: Callable[[Any, Any], Any]
    resolve_alignment: Callable[[Any, Sequence[Mapping[str, int]]], Any] | None = None
    resolve_swap_ab: Callable[[Any, Sequence[Mapping[str, int]]], Any] | None = None


#: The binder of each kernel family (``kernel.family``); a new family adds one row and one module.
BINDERS: dict[str, FamilyBinder] = {
    "gemm": FamilyBinder(bind_gemm, auto_alignment, auto_swap_ab),
    "grouped_gemm": FamilyBinder(bind_grouped),
    "attention": FamilyBinder(bind_attention),
    "conv": FamilyBinder(bind_conv),
}


def family_of(kernel: Any) -> str:
    """The kernel's family, the key of the per-family tables (:data:`BINDERS`, ``ucutlass.runtime.LAUNCHERS``):
    ``kernel.family``, ``"gemm"`` for an object without one."""
    return getattr(kernel, "family", "gemm")


def bind(kernel: Any, problem: Any) -> Any:
    """Bind ``kernel`` to ``problem`` (a :class:`ucutlass.problem.Problem`) and check the binding on every
    workload: a :class:`Binding` (gemm, grouped GEMM) or an :class:`AttentionBinding`.

    Raises:
        CheckError: an operand without a binding, a name the problem does not have (valid names listed),
            a dtype mismatch, an unused problem input or output, or extents that disagree.
    """
    return BINDERS[family_of(kernel)].bind(kernel, problem)


def resolve_alignment(kernel: Any, extents: Sequence[Mapping[str, int]]) -> Any:
    """``kernel`` with ``alignment = auto`` replaced by the largest alignment (8, 4, 2, 1 elements) that every
    operand's contiguous extent allows in every one of ``extents`` (:func:`ucutlass.bind.gemm.auto_alignment`);
    unchanged when 16 bytes (TMA) does, when ``alignment`` is given, or for a family without it (grouped GEMMs load
    with TMA only)."""
    resolve = BINDERS[family_of(kernel)].resolve_alignment
    return kernel if resolve is None else resolve(kernel, extents)


def resolve_swap_ab(kernel: Any, extents: Sequence[Mapping[str, int]]) -> Any:
    """``kernel`` with ``swap_ab = auto`` written ``true`` when its target's rules swap AB for the largest M of
    ``extents`` (:func:`ucutlass.arch.resolve_swap_ab`; sm90: every M at most 64); otherwise unchanged, and ``auto``
    still follows the kernel's ``when`` in a dispatch; other families do not swap. The tuner applies the same to its
    candidates (:meth:`ucutlass.search.SearchSpace.concrete`), so that what it builds is what a bound call loads."""
    resolve = BINDERS[family_of(kernel)].resolve_swap_ab
    return kernel if resolve is None else resolve(kernel, extents)


def resolve_auto(kernel: Any, extents: Sequence[Mapping[str, int]]) -> Any:
    """``alignment = auto`` (:func:`resolve_alignment`) then ``swap_ab = auto`` (:func:`resolve_swap_ab`) decided
    for ``extents`` (one ``{"M", "N", "K"}`` dict per workload, elements), as :func:`bind` decides them for
    :attr:`Binding.kernel`. The one function that ``ucutlass check --problem`` (per combination of open choices)
    and the tuner (:meth:`ucutlass.search.SearchSpace.concrete`) apply, so that they accept the same
    configurations and what they accept is what a bound call loads."""
    return resolve_swap_ab(resolve_alignment(kernel, extents), extents)


def bind_pipeline(program: Any, problem: Any, name: str | None = None) -> PipelineBinding:
    """Bind ``program``'s pipeline (``name``, or its only one) to ``problem``: shapes and dtypes flow on every
    workload and each kernel call is bound through :data:`BINDERS` (:func:`ucutlass.bind.pipeline.bind_pipeline`).

    Raises:
        CheckError: positioned diagnostics (``use-before-made``, ``undefined-name``, ``bad-step``, ``bad-call``,
            ``bad-return``, ``bind-…``).
        KeyError: the program has no such pipeline.
    """
    return _pipeline.bind_pipeline(program, problem, name, bind)
