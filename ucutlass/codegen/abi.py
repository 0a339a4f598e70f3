"""The C ABI of every generated translation unit: ``ucut_run(ptrs, scalars, extents, knobs, workspace,
workspace_bytes, stream)``, and the argument order of each family's entry point (:func:`abi_of`)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import arch, ir
from ..ir import EpilogueInputKind, GemmKernel, GroupedGemmKernel

# 3: a batched kernel's extents end with each operand's batch stride; 4: the knob reduction_mode, and a swapped
# kernel's extents are (N, M, K)
ABI_VERSION = 4


@dataclass(frozen=True)
class Abi:
    """Argument order of a compiled kernel's ``ucut_run``.

    Attributes:
        ptr_names: names of the device pointers in ``ptrs`` order: ``a``, ``b``, [``c``], ``d``, then
            the epilogue's tensor inputs, then its extra outputs (``->``), each in declaration order.
        scalar_names: epilogue scalars passed at run time (as double) in ``scalars`` order.
        extents: the order of ``extents``: ``M``, ``N``, ``K``; a batched kernel adds ``L`` (the batch count) and
            ``batch_stride_a``, ``batch_stride_b``, [``batch_stride_c``], ``batch_stride_d``: elements between two
            batches of each operand, read from the tensors (a slice's batches are not packed; a shared b: 0).
        knobs: the run-time settings in ``knobs`` order (:data:`ucutlass.ir.RUNTIME_SETTINGS`).
    """

    ptr_names: tuple[str, ...]
    scalar_names: tuple[str, ...]
    extents: tuple[str, ...] = ("M", "N", "K")
    knobs: tuple[str, ...] = ir.RUNTIME_SETTINGS


def epilogue_args(kernel: GemmKernel) -> tuple[list[str], list[str]]:
    """The epilogue inputs' entry-point arguments, in declaration order: (tensor inputs, passed as pointers;
    scalars read from the problem, passed as doubles). Literal scalars are compiled in and pass nothing."""
    ptrs: list[str] = []
    scalars: list[str] = []
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.scalar:
            if inp.value is None:
                scalars.append(inp.name)
        else:
            ptrs.append(inp.name)
    return ptrs, scalars


def gemm_abi(kernel: GemmKernel) -> Abi:
    """The ABI of ``kernel``'s generated entry point. Pointers and scalars are named as the `.ucut` declares them
    whether or not the kernel swaps AB; a swapped kernel (:func:`ucutlass.arch.resolve_swap_ab`) takes its extents in
    CUTLASS's order for Dᵀ = B·Aᵀ, ``("N", "M", "K")``."""
    inputs, scalars = epilogue_args(kernel)
    ptrs = [op.name for op in kernel.operands] + inputs
    ptrs += [out.name for out in kernel.epilogue_outputs]
    ptrs += [s.name for s in kernel.scales]
    extents = ("N", "M", "K") if arch.resolve_swap_ab(kernel) else ("M", "N", "K")
    if kernel.batch:
        extents += ("L", *(f"batch_stride_{op.name}" for op in kernel.operands))
    return Abi(tuple(ptrs), tuple(scalars), extents)


def grouped_abi(kernel: GroupedGemmKernel):
    """The :class:`ucutlass.codegen.Abi` of a grouped kernel's ``ucut_run``: pointers a, b, d, the epilogue's tensor
    inputs, then the group operand; extents M (all rows), N, K, G."""
    inputs, scalars = epilogue_args(kernel)
    ptrs = [op.name for op in kernel.operands] + inputs + [kernel.groups.name]
    return Abi(tuple(ptrs), tuple(scalars), extents=("M", "N", "K", "G"))


def attention_abi(kernel: ir.AttentionKernel) -> Abi:
    """Pointers ``q, k, v, o[, lse][, bias]``; scalars the problem-bound ``scale`` / ``softcap`` in declaration
    order; extents B, Sq, Sk, Hq, Hkv, D (:data:`ucutlass.ir.EXTENTS`); no knobs."""
    return Abi(tuple(op.name for op in kernel.operands), tuple(s.name for s in kernel.scalars), ir.EXTENTS, ())


def conv_abi(kernel: ir.ConvKernel) -> Abi:
    """Pointers ``a, b, [c,] d``, the epilogue's tensor inputs and its extra outputs; its scalars; extents the activation's dims (``N``, its
    spatial dims, ``C``), then ``K`` and the filter's spatial dims (the output's follow from stride, padding and
    dilation, compiled in); no knobs (the SM90 conv kernel has no run-time tile-scheduler arguments)."""
    inputs, scalars = epilogue_args(kernel)
    ptrs = [op.name for op in kernel.operands] + inputs + [out.name for out in kernel.epilogue_outputs]
    extents = tuple(kernel.a.dims) + ("K",) + ir.spatial_of(kernel.b.dims)
    return Abi(tuple(ptrs), tuple(scalars), extents, ())


#: The argument order of each family's entry point.
ABIS = {"gemm": gemm_abi, "grouped_gemm": grouped_abi, "attention": attention_abi, "conv": conv_abi}


def abi_of(kernel) -> Abi:
    """The ABI of ``kernel``'s generated entry point (:data:`ABIS`, by family). A GEMM's pointers and scalars are
    named as the `.ucut` declares them whether or not the kernel swaps AB; a swapped kernel
    (:func:`ucutlass.arch.resolve_swap_ab`) takes its extents in CUTLASS's order for Dᵀ = B·Aᵀ, ``("N", "M", "K")``."""
    return ABIS[kernel.family](kernel)
