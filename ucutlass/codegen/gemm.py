"""Rendering of a GEMM: the values of ``templates/sm*_gemm.cu.j2`` — operand types and layouts, the mainloop and
epilogue schedules, the EVT tree of the epilogue, scale factors."""

from __future__ import annotations

import json

from .. import __version__, arch, ir
from ..errors import UcutError
from ..ir import EpilogueInputKind, GemmKernel, Layout, Schedule, TileScheduler
from .abi import ABI_VERSION, Abi, abi_of
from .common import require_renderable
from .cpp import (CPP_BINARY, CPP_BLOCK_SCALED_KERNEL_SCHEDULE, CPP_BLOCK_SCALED_PAIR, CPP_BLOCKWISE_KERNEL_SCHEDULE,
                  CPP_CP_ASYNC_KERNEL_SCHEDULE, CPP_ELEMENT, CPP_EPILOGUE_SCHEDULE, CPP_KERNEL_SCHEDULE, CPP_LAYOUT,
                  CPP_NO_SMEM_EPILOGUE_SCHEDULE, CPP_OP_CLASS, CPP_REDUCE, CPP_SHARED_B_STRIDE, CPP_TILE_SCHEDULER,
                  CPP_UNARY, IDENTITY)


def _cutlass_layout(op: ir.Operand, contiguous_means_row: str) -> str:
    """RowMajor when the operand's contiguous mode is ``contiguous_means_row``, else ColumnMajor.

    CUTLASS names A as M×K, B as K×N and C/D as M×N: A is RowMajor when K is contiguous, B is
    ColumnMajor when K is contiguous (the nn.Linear weight ``[N, K] row``), D is RowMajor when N is.
    """
    return CPP_LAYOUT["row" if op.contiguous_dim == contiguous_means_row else "col"]


def _float_literal(value: float) -> str:
    text = repr(float(value))
    if "inf" in text or "nan" in text:
        raise UcutError(f"epilogue constant {value} is not finite")
    return f"{text}f"


class _TreeBuilder:
    """Turns an epilogue expression into EVT nodes (post-order) with C++ aliases and argument slots.

    ``kernel`` is the kernel as CUTLASS builds it (a swapped kernel's :func:`ucutlass.ir.transposed` view), ``abi``
    the entry point's, which names tensors as the `.ucut` declares them: :meth:`ptr` maps one to the other.
    """

    def __init__(self, kernel: GemmKernel, abi: Abi, swapped: bool = False):
        self.kernel = kernel
        self.abi = abi
        self.swapped = swapped
        self.inputs = {i.name: i for i in kernel.epilogue_inputs}
        self.nodes: list[dict] = []
        self.aux_loads: list[dict] = []
        self._aux_index: dict[str, int] = {}

    def ptr(self, name: str) -> int:
        """Index in ``ptrs`` of the view's tensor ``name`` (a swapped view's ``a`` is the declared ``b``)."""
        return self.abi.ptr_names.index(ir.SWAPPED_NAMES.get(name, name) if self.swapped else name)

    def _add(self, node: dict) -> dict:
        node["alias"] = f"EvtNode{len(self.nodes)}"
        self.nodes.append(node)
        return node

    def build(self, expr: ir.Expr, root: bool) -> dict:
        out_element = "ElementD" if root else "ElementCompute"
        if root and not isinstance(expr, (ir.Unary, ir.Binary)):
            # The root must be a compute node to convert to ElementD.
            child = self.build(expr, root=False)
            return self._add({"kind": "compute", "fn": IDENTITY, "element_out": out_element,
                              "children": [child], "text": ir.expr_to_text(expr)})
        if isinstance(expr, ir.Acc):
            per_tensor = [s for s in self.kernel.scales if s.per_tensor]
            if not per_tensor:
                return self._add({"kind": "acc"})
            # acc of the dequantised inputs: A·B × scale_a × scale_b (one ScalarBroadcast reads both pointers)
            acc = self._add({"kind": "acc"})
            scale = self._add({"kind": "scale_ptrs", "name": " * ".join(s.name for s in per_tensor),
                               "ptr_indices": [self.ptr(s.name) for s in per_tensor]})
            return self._add({"kind": "compute", "fn": CPP_BINARY["*"], "element_out": "ElementCompute",
                              "children": [acc, scale], "text": "acc * " + scale["name"]})
        if isinstance(expr, ir.Src):
            return self._add({"kind": "src"})
        if isinstance(expr, ir.Const):
            return self._add({"kind": "scalar", "name": repr(expr.value),
                              "value_expr": _float_literal(expr.value)})
        if isinstance(expr, ir.Ref):
            inp = self.inputs[expr.name]
            if inp.kind is EpilogueInputKind.scalar:
                if inp.value is not None:
                    value = _float_literal(inp.value)
                else:
                    value = f"static_cast<float>(scalars[{self.abi.scalar_names.index(inp.name)}])"
                return self._add({"kind": "scalar", "name": inp.name, "value_expr": value})
            node = {"kind": inp.kind.value, "name": inp.name, "element": CPP_ELEMENT[inp.dtype],
                    "ptr_index": self.ptr(inp.name), "batched": bool(inp.batch)}
            if inp.kind is EpilogueInputKind.matrix:
                if inp.name not in self._aux_index:
                    self._aux_index[inp.name] = len(self.aux_loads)
                    layout = CPP_LAYOUT["row" if (inp.dims[-1] if inp.layout is Layout.row else inp.dims[0]) == "N"
                                        else "col"]
                    self.aux_loads.append({"index": len(self.aux_loads), "layout": layout,
                                           "element": CPP_ELEMENT[inp.dtype]})
                node["aux_index"] = self._aux_index[inp.name]
            return self._add(node)
        if isinstance(expr, ir.Cast):  # round to the narrower type; the parent reads it back as ElementCompute
            child = self.build(expr.arg, root=False)
            return self._add({"kind": "compute", "fn": IDENTITY, "element_out": CPP_ELEMENT[expr.dtype],
                              "children": [child], "text": ir.expr_to_text(expr)})
        if isinstance(expr, ir.Unary):
            child = self.build(expr.arg, root=False)
            return self._add({"kind": "compute", "fn": CPP_UNARY[expr.op], "element_out": out_element,
                              "children": [child], "text": ir.expr_to_text(expr)})
        if isinstance(expr, ir.Binary):
            lhs = self.build(expr.lhs, root=False)
            rhs = self.build(expr.rhs, root=False)
            return self._add({"kind": "compute", "fn": CPP_BINARY[expr.op], "element_out": out_element,
                              "children": [lhs, rhs], "text": ir.expr_to_text(expr)})
        raise UcutError(f"cannot render epilogue node {expr!r}")


class _DagBuilder(_TreeBuilder):
    """The epilogue as a DAG (CUTLASS Sm90TopologicalVisitor), for kernels with extra outputs.

    Equal subexpressions become one node (IR expressions compare structurally), so a stored value that later
    statements read is computed once; ops are listed in topological order, each with the indices of its
    inputs, and the last op converts d to ElementD. Every op's result is kept as ElementCompute (the visitor
    converts), so a ``cast`` node's rounding is what its readers see.
    """

    def __init__(self, kernel: GemmKernel, abi: Abi, swapped: bool = False):
        super().__init__(kernel, abi, swapped)
        self._memo: dict[ir.Expr, dict] = {}
        self.aux_stores: list[dict] = []

    def _add(self, node: dict) -> dict:
        node["index"] = len(self.nodes)
        node["edges"] = [child["index"] for child in node.get("children", [])]
        return super()._add(node)

    def build(self, expr: ir.Expr, root: bool = False) -> dict:
        if expr not in self._memo:
            self._memo[expr] = super().build(expr, root=False)
        return self._memo[expr]

    def build_all(self) -> dict:
        """Every output's node in declaration order, then d's root; returns the root (the last op)."""
        for out in self.kernel.epilogue_outputs:
            child = self.build(out.value)
            node = {"kind": "aux_store" if out.reduce is None else out.kind.value.replace("vector", "reduction"),
                    "name": out.name, "element": CPP_ELEMENT[out.dtype], "children": [child],
                    "ptr_index": self.ptr(out.name), "text": ir.expr_to_text(out.value)}
            if out.reduce is None:
                layout = CPP_LAYOUT["row" if (out.dims[-1] if out.layout is Layout.row else out.dims[0]) == "N"
                                    else "col"]
                node["store_index"] = len(self.aux_stores)
                self.aux_stores.append({"index": len(self.aux_stores), "layout": layout, "element": node["element"]})
            else:
                node["fn"], node["identity"] = CPP_REDUCE[out.reduce]
            self._add(node)
        body = self.build(self.kernel.epilogue)
        return self._add({"kind": "compute", "fn": IDENTITY, "element_out": "ElementD", "children": [body],
                          "text": ir.expr_to_text(self.kernel.epilogue)})


#: The EVT tree and DAG builders, for other families whose epilogue is the GEMM's (:mod:`ucutlass.codegen.conv`).
EvtTreeBuilder = _TreeBuilder
EvtDagBuilder = _DagBuilder


def _layout_b(kernel: GemmKernel) -> str:
    """CUTLASS's layout of B; in a batched kernel, a b without batch dims (one b for every batch) is a stride
    type whose batch mode is a static 0 (cute leaves it out of the TMA descriptor)."""
    k_major = kernel.b.contiguous_dim == "K"
    if kernel.batch and not kernel.b.batch:
        return CPP_SHARED_B_STRIDE["K" if k_major else "N"]
    return CPP_LAYOUT["col" if k_major else "row"]


def _describe(op: ir.Operand) -> str:
    return f"{op.dtype.value}[{', '.join(op.dims)}] {op.layout.value}"


def template_values(kernel: GemmKernel, source_file: str = "<string>") -> dict:
    """The flat dict of values one render of a GEMM template takes (useful for tests and tools).

    Raises:
        CheckError: the kernel still has open choices or breaks a rule of its target.
    """
    require_renderable(kernel)
    shown = kernel  # the header comment names the kernel as written; the code and ucut_info use build_config
    # run-time settings are arguments, not code: one build serves them all; swap_ab = auto written out as the rules
    # decide it (by the kernel's when), so that ucut_info's digest tells a swapped build from the other
    kernel = arch.canonical(kernel).build_config()
    swapped = arch.resolve_swap_ab(kernel)
    abi = abi_of(kernel)  # tensors named as declared; a swapped kernel's extents in CUTLASS's order (N, M, K)
    user = kernel
    kernel = ir.transposed(kernel) if swapped else kernel  # as CUTLASS builds it: Dᵀ = B·Aᵀ when swapped
    schedule = arch.resolve_schedule(kernel)
    sm90 = kernel.target is ir.Target.sm90
    cp_async = sm90 and arch.sm90.uses_cp_async(kernel)
    no_smem = sm90 and arch.sm90.uses_no_smem_epilogue(kernel)
    alpha_beta = ir.linear_combination(kernel.epilogue, arch.sm90.literal_scalars(kernel)) if no_smem else None
    cta_tile = arch.sm100.cta_tile(kernel) if kernel.target is ir.Target.sm100 else kernel.tile
    dag = bool(kernel.epilogue_outputs)
    if dag:
        tree = _DagBuilder(kernel, abi, swapped)
        root = tree.build_all()
    else:
        tree = _TreeBuilder(kernel, abi, swapped)
        root = tree.build(kernel.epilogue, root=True)
    a, b, c, d = kernel.a, kernel.b, kernel.c, kernel.d
    align = kernel.alignment_of  # elements per access: 16 bytes (TMA) unless `alignment` asks for less
    info = {
        "abi": ABI_VERSION,
        "name": user.name,
        "config": user.config_name(),
        "family": "gemm",
        "target": user.target.value,
        "ptrs": list(abi.ptr_names),
        "scalars": list(abi.scalar_names),
        "extents": list(abi.extents),
        "digest": user.digest(),
        "knobs": list(abi.knobs),
        "swap_ab": swapped,
    }
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": shown.name,
        "config_name": shown.config_name(),
        "epilogue_text": ir.expr_to_text(kernel.epilogue),
        "operands_desc": "   ".join(f"{op.name.upper()}: {_describe(op)}" for op in user.operands),
        "swap_ab": swapped,
        "has_c": c is not None,
        "element_a": CPP_ELEMENT[a.dtype], "element_b": CPP_ELEMENT[b.dtype],
        "element_c": CPP_ELEMENT[c.dtype] if c else "void",
        "element_d": CPP_ELEMENT[d.dtype],
        "element_accumulator": CPP_ELEMENT[kernel.accum],
        "layout_a": _cutlass_layout(a, "K"),
        "layout_b": _layout_b(kernel),
        "layout_c": _cutlass_layout(c, "N") if c else _cutlass_layout(d, "N"),
        "layout_d": _cutlass_layout(d, "N"),
        "align_a": align(a.dtype), "align_b": align(b.dtype),
        "align_c": align(c.dtype) if c else align(d.dtype), "align_d": align(d.dtype),
        "tile": list(kernel.tile), "cta_tile": list(cta_tile), "cluster": list(kernel.cluster),
        "kernel_schedule": (CPP_CP_ASYNC_KERNEL_SCHEDULE if cp_async else CPP_KERNEL_SCHEDULE)[schedule],
        "epilogue_schedule": CPP_NO_SMEM_EPILOGUE_SCHEDULE if no_smem else CPP_EPILOGUE_SCHEDULE[schedule],
        "no_smem_epilogue": no_smem,
        "lincomb_alpha": _float_literal(alpha_beta[0]) if alpha_beta else "1.0f",
        "lincomb_beta": _float_literal(alpha_beta[1]) if alpha_beta else "0.0f",
        "batched": bool(kernel.batch),
        "batch_strides": [{"name": op.name, "index": abi.extents.index(
                              f"batch_stride_{ir.SWAPPED_NAMES.get(op.name, op.name) if swapped else op.name}")}
                          for op in kernel.operands if op.batch],
        "tile_scheduler": CPP_TILE_SCHEDULER[kernel.scheduler],
        "stream_k": kernel.scheduler is TileScheduler.stream_k,
        "abi_version": ABI_VERSION,
        "stages": kernel.stages or 0,
        "aux_loads": tree.aux_loads,
        "aux_stores": tree.aux_stores if dag else [],
        "evt_dag": dag,
        "has_max_reduction": any(o.reduce == "max" for o in kernel.epilogue_outputs),
        "evt_nodes": tree.nodes,
        "evt_root": root,
        "ptr_names": list(abi.ptr_names),
        "extent_names": list(abi.extents[:3]),
        "scalar_names": list(abi.scalar_names),
        "ptr_a": tree.ptr("a"), "ptr_b": tree.ptr("b"), "ptr_d": tree.ptr("d"),  # CUTLASS's A is a swapped kernel's b
        "c_pointer_expr": f"static_cast<ElementC const*>(ptrs[{tree.ptr('c')}])" if c else "nullptr",
        "n_ptrs": len(abi.ptr_names),
        "n_scalars_alloc": max(1, len(abi.scalar_names)),
        "info_json": json.dumps(info, sort_keys=True),
        **_scale_values(kernel, abi, schedule),  # last: a scaled mainloop overrides kernel_schedule
    }


def _scale_values(kernel: GemmKernel, abi: Abi, schedule: Schedule) -> dict:
    """Template values of the scale factors: the blockwise (sm90) or block-scaled (sm100) mainloop, if any."""
    values: dict = {"block_scaled": False, "op_class": CPP_OP_CLASS["tensor"]}
    if not kernel.blockwise:
        return values
    sa, sb = kernel.scale_a, kernel.scale_b
    assert sa is not None and sb is not None  # the arch rules ask for both
    values.update(block_scaled=True, ptr_sfa=abi.ptr_names.index(sa.name), ptr_sfb=abi.ptr_names.index(sb.name))
    if kernel.target is ir.Target.sm90:
        values.update(
            sf_granularity=[sa.block[0], sb.block[0], sa.block[1]],
            sfa_major="K" if ir.split_dim(sa.contiguous_dim)[0] == "K" else "MN",
            sfb_major="K" if ir.split_dim(sb.contiguous_dim)[0] == "K" else "MN",
            kernel_schedule=CPP_BLOCKWISE_KERNEL_SCHEDULE[schedule])
        return values
    fmt = arch.sm100.block_scaled_format(kernel)
    suffix = arch.sm100.BLOCK_SCALED_FORMATS[fmt][3]  # type: ignore[index]
    sms = "2Sm" if schedule is Schedule.warpspecialized_2sm else "1Sm"
    pair = CPP_BLOCK_SCALED_PAIR[fmt]  # type: ignore[index]
    values.update(op_class=CPP_OP_CLASS["block_scaled"], element_sf=CPP_ELEMENT[sa.dtype],
                  element_pair_a=f"{pair}<ElementA>", element_pair_b=f"{pair}<ElementB>",
                  kernel_schedule=CPP_BLOCK_SCALED_KERNEL_SCHEDULE.format(sms=sms, suffix=suffix))
    return values
