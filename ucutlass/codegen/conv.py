"""Rendering of a convolution (``kernel NAME : conv``): the values of ``templates/sm90_conv.cu.j2`` and
``sm100_conv.cu.j2`` (both ``_conv.j2``).

The mainloop is CUTLASS's SM90 (SM100: tcgen05, 1SM or 2SM) implicit-GEMM fprop
(``cutlass::conv::collective::CollectiveBuilder`` with ``cutlass::conv::Operator::kFprop``, ``ConvUniversal`` over
``ConvProblemShape``, ``ConvUniversalAdapter``; CUTLASS's ``test/unit/conv/device_3x/fprop/sm90_conv*_fprop_*.cu``
and ``examples/76_blackwell_conv`` show the instantiation); the epilogue is the GEMM's EVT tree
(:class:`ucutlass.codegen.gemm.EvtTreeBuilder`) over the implicit GEMM's [M, N] = [output pixels, output channels].
Stride, padding and dilation are compiled in; the extents (N, the activation's spatial dims, C, K, the filter's
spatial dims) arrive at run time.
"""

from __future__ import annotations

import json

from .. import __version__, arch, ir
from ..ir import ConvKernel, spatial_of
from .abi import ABI_VERSION, abi_of
from .common import require_renderable
from .cpp import CPP_ARCH, CPP_CONV_KERNEL_SCHEDULE, CPP_CONV_LAYOUT, CPP_ELEMENT, CPP_EPILOGUE_SCHEDULE
from .gemm import EvtDagBuilder, EvtTreeBuilder


def conv_template_values(kernel: ConvKernel, source_file: str = "<string>") -> dict:
    """The flat dict of values one render of ``sm90_conv.cu.j2`` takes.

    Raises:
        CheckError: the kernel still has open choices or breaks a rule (:mod:`ucutlass.arch.sm90_conv`).
    """
    require_renderable(kernel)
    shown = kernel
    kernel = kernel.build_config()
    abi = abi_of(kernel)
    a, b, c, d = kernel.a, kernel.b, kernel.c, kernel.d
    schedule = arch.resolve_schedule(kernel)
    sm100 = kernel.target is ir.Target.sm100
    view = arch.sm90_conv.gemm_view(kernel, schedule)  # the epilogue's [M, N] names, as the EVT builders read them
    cta_tile = arch.sm100.cta_tile(view) if sm100 else kernel.tile
    dag = bool(kernel.epilogue_outputs)
    if dag:
        tree = EvtDagBuilder(view, abi)
        root = tree.build_all()
    else:
        tree = EvtTreeBuilder(view, abi)
        root = tree.build(kernel.epilogue, root=True)
    layout = CPP_CONV_LAYOUT[kernel.rank]
    info = {"abi": ABI_VERSION, "name": kernel.name, "config": kernel.config_name(), "family": "conv",
            "target": kernel.target.value, "ptrs": list(abi.ptr_names), "scalars": list(abi.scalar_names),
            "extents": list(abi.extents), "digest": kernel.digest(), "knobs": list(abi.knobs)}
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": shown.name,
        "config_name": shown.config_name(),
        "epilogue_text": ir.expr_to_text(kernel.epilogue),
        "operands_desc": "   ".join(f"{op.name.upper()}: {op.dtype.value}[{', '.join(op.dims)}]"
                                    for op in kernel.operands),
        "rank": kernel.rank,
        "element_a": CPP_ELEMENT[a.dtype], "element_b": CPP_ELEMENT[b.dtype],
        "element_c": CPP_ELEMENT[c.dtype] if c else "void",
        "element_d": CPP_ELEMENT[d.dtype], "element_accumulator": CPP_ELEMENT[kernel.accum],
        "layout_a": layout, "layout_b": layout, "layout_c": layout, "layout_d": layout,
        "align_a": 128 // a.dtype.bits, "align_b": 128 // b.dtype.bits, "align_c": 128 // (c or d).dtype.bits,
        "align_d": 128 // d.dtype.bits,
        "tile": list(kernel.tile), "cluster": list(kernel.cluster), "stages": kernel.stages or 0,
        "kernel_schedule": CPP_CONV_KERNEL_SCHEDULE[schedule], "epilogue_schedule": CPP_EPILOGUE_SCHEDULE[schedule],
        "sm100": sm100, "arch_tag": CPP_ARCH[kernel.target], "cta_tile": list(cta_tile),
        "arch_name": "SM100" if sm100 else "SM90", "mma_name": "tcgen05" if sm100 else "wgmma",
        "stride": list(kernel.stride), "padding": list(kernel.padding), "dilation": list(kernel.dilation),
        "extent_names": list(abi.extents),
        "act_extents": [abi.extents.index(x) for x in kernel.a.dims],
        "flt_extents": [abi.extents.index(x) for x in kernel.b.dims],
        "spatial": list(spatial_of(kernel.a.dims)),
        "aux_loads": [], "aux_stores": [], "evt_dag": dag,  # [K] reductions only: no aux tensors
        "has_max_reduction": any(o.reduce == "max" for o in kernel.epilogue_outputs),
        "evt_nodes": tree.nodes, "evt_root": root,
        "ptr_names": list(abi.ptr_names), "scalar_names": list(abi.scalar_names),
        "ptr_a": tree.ptr("a"), "ptr_b": tree.ptr("b"), "ptr_d": tree.ptr("d"),
        "c_pointer_expr": f"static_cast<ElementC const*>(ptrs[{tree.ptr('c')}])" if c else "nullptr",
        "n_ptrs": len(abi.ptr_names), "n_scalars_alloc": max(1, len(abi.scalar_names)),
        "abi_version": ABI_VERSION,
        "info_json": json.dumps(info, sort_keys=True),
        "schedule": schedule.value,
    }
