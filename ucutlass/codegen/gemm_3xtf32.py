"""Rendering of a ``math = 3xtf32`` GEMM: the values of ``templates/sm80_gemm_3xtf32.cu.j2``, a CUTLASS 2.x
``device::GemmUniversal`` (``arch::Sm80``, ``arch::OpMultiplyAddFastF32``) behind the same C ABI as every GEMM
(:func:`ucutlass.codegen.abi_of`: pointers a, b, [c], d, the epilogue's tensors; extents M, N, K [, L, batch
strides]; the four tile-scheduler knobs, which this kernel takes and ignores: ``sm90.3xtf32-settings`` keeps them
at their defaults). The epilogue is ``LinearCombination`` or ``LinearCombinationGeneric`` with the template's own
f32 activation (CUTLASS's GELU_taylor and Tanh use ``tanh.approx.f32``, about 2^-11 relative), reading its
source C from ``c``, an ``[N]`` bias (row stride 0) or an ``[M, N]`` input (:func:`ucutlass.arch.sm90_3xtf32.lincomb`).
"""

from __future__ import annotations

import json

from .. import __version__, arch, ir
from ..arch import sm90_3xtf32
from ..ir import GemmKernel
from .abi import ABI_VERSION, abi_of
from .common import require_renderable
from .cpp import CPP_ELEMENT, CPP_LAYOUT


def _float_literal(value: float) -> str:
    return f"{float(value)!r}f"


def _describe(op: ir.Operand) -> str:
    return f"{op.dtype.value}[{', '.join(op.dims)}] {op.layout.value}"


def template_values_3xtf32(kernel: GemmKernel, source_file: str = "<string>") -> dict:
    """The flat dict of values one render of ``sm80_gemm_3xtf32.cu.j2`` takes.

    Raises:
        CheckError: open choices remain or a rule of :mod:`ucutlass.arch.sm90_3xtf32` is broken.
    """
    require_renderable(kernel)
    shown = kernel
    kernel = arch.canonical(kernel).build_config()
    abi = abi_of(kernel)
    form = sm90_3xtf32.lincomb(kernel)
    assert not isinstance(form, str)  # require_renderable ran the rules (sm90.3xtf32-epilogue)
    a, b, d = kernel.a, kernel.b, kernel.d
    extents = list(abi.extents)
    source_index = abi.ptr_names.index(form.source) if form.source else None
    # leading dimensions of packed operands: A is M×K (RowMajor when K is contiguous), B is K×N (ColumnMajor when
    # K is contiguous, the nn.Linear weight), C and D are row-major M×N; an [N] bias is C with a row stride of 0
    lda = "K" if a.contiguous_dim == "K" else "M"
    ldb = "K" if b.contiguous_dim == "K" else "N"
    ldc = "0" if form.broadcast else "N"
    batch = {op.name: extents.index(f"batch_stride_{op.name}") for op in kernel.operands if op.batch}
    info = {
        "abi": ABI_VERSION, "name": kernel.name, "config": kernel.config_name(), "family": "gemm",
        "target": kernel.target.value, "ptrs": list(abi.ptr_names), "scalars": list(abi.scalar_names),
        "extents": extents, "digest": kernel.digest(), "knobs": list(abi.knobs), "swap_ab": False,
        "math": kernel.math.value,
    }
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": shown.name,
        "config_name": shown.config_name(),
        "epilogue_text": ir.expr_to_text(kernel.epilogue),
        "operands_desc": "   ".join(f"{op.name.upper()}: {_describe(op)}" for op in kernel.operands),
        "element_d": CPP_ELEMENT[d.dtype],
        "layout_a": CPP_LAYOUT["row" if a.contiguous_dim == "K" else "col"],
        "layout_b": CPP_LAYOUT["col" if b.contiguous_dim == "K" else "row"],
        "align_a": kernel.alignment_of(a.dtype), "align_b": kernel.alignment_of(b.dtype),
        "align_c": kernel.alignment_of(d.dtype),
        "tile": list(kernel.tile), "warp": list(sm90_3xtf32.warp_shape(kernel.tile)),
        "instruction": list(sm90_3xtf32.INSTRUCTION_SHAPE), "stages": sm90_3xtf32.stages_of(kernel),
        "activation": form.activation,  # the template computes it in f32 (tanhf, erff, expf), not CUTLASS's approximations
        "activation_name": form.activation or "none",
        "heavy": "true" if form.activation not in (None, "relu") else "false",
        "alpha": _float_literal(form.alpha), "beta": _float_literal(form.beta),
        "source_desc": (f"{form.source} (an [N] bias: C with row stride 0)" if form.broadcast else form.source)
        if form.source else "none (beta = 0: C is not read)",
        "c_pointer_expr": f"ptrs[{source_index}]" if source_index is not None else "nullptr",
        "lda": lda, "ldb": ldb, "ldc": ldc,
        "batched": bool(kernel.batch),
        "batch_stride_a": f"extents[{batch['a']}]" if "a" in batch else "0",
        "batch_stride_b": f"extents[{batch['b']}]" if "b" in batch else "0",
        "batch_stride_c": (f"extents[{batch['c']}]" if form.source == "c" and "c" in batch else "0"),
        "batch_stride_d": f"extents[{batch['d']}]" if "d" in batch else "0",
        "ptr_a": abi.ptr_names.index("a"), "ptr_b": abi.ptr_names.index("b"), "ptr_d": abi.ptr_names.index("d"),
        "ptr_names": list(abi.ptr_names),
        "n_ptrs": len(abi.ptr_names),
        "n_scalars_alloc": max(1, len(abi.scalar_names)),
        "abi_version": ABI_VERSION,
        "info_json": json.dumps(info, sort_keys=True),
    }
