"""Render a concrete kernel IR into a CUTLASS C++ translation unit (jinja2, ``templates/*.cu.j2``).

The logic that chooses lives here; the templates are plain C++ with holes (STYLE.md, "Templates").
Every render uses ``jinja2.StrictUndefined``: a missing value is an error, never an empty string in C++.

One template per (family, target), :data:`TEMPLATES`; what the GEMM templates share (the EVT ``using`` list,
the nested EVT arguments, the C ABI) lives once in ``templates/_gemm_common.j2``. The generated translation
unit exports a fixed C ABI:
``ucut_run(ptrs, scalars, extents, knobs, workspace, workspace_bytes, stream)``, ``ucut_workspace_size``,
``ucut_can_implement``, ``ucut_info`` (JSON), ``ucut_last_error`` and ``ucut_abi_version``.
:func:`abi_of` gives the argument order the runtime must follow.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import jinja2

from . import __version__, ir
from . import arch
from .errors import CheckError, Diagnostic, UcutError
from .ir import DType, EpilogueInputKind, GemmKernel, Layout, Schedule, TileScheduler

ABI_VERSION = 2

# C++ spellings beside the IR's identities (STYLE.md: identity apart from rendering).
CPP_ELEMENT = {DType.bf16: "cutlass::bfloat16_t", DType.f16: "cutlass::half_t", DType.f32: "float"}
CPP_LAYOUT = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}
CPP_KERNEL_SCHEDULE = {
    Schedule.cooperative: "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
    Schedule.warpspecialized: "cutlass::gemm::KernelTmaWarpSpecialized",
    Schedule.warpspecialized_1sm: "cutlass::gemm::KernelTmaWarpSpecialized1SmSm100",
    Schedule.warpspecialized_2sm: "cutlass::gemm::KernelTmaWarpSpecialized2SmSm100",
}
# On SM90, EpilogueScheduleAuto picks NoSmemWarpSpecialized, which rejects any EVT: name a TMA one. On SM100
# the TMA epilogue must match the MMA's 1SM/2SM (sm100_builder.inl:1145-1147 "unsupported schedule").
CPP_EPILOGUE_SCHEDULE = {
    Schedule.cooperative: "cutlass::epilogue::TmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::epilogue::TmaWarpSpecialized",
    Schedule.warpspecialized: "cutlass::epilogue::TmaWarpSpecialized",
    Schedule.warpspecialized_1sm: "cutlass::epilogue::TmaWarpSpecialized1Sm",
    Schedule.warpspecialized_2sm: "cutlass::epilogue::TmaWarpSpecialized2Sm",
}
CPP_TILE_SCHEDULER = {
    TileScheduler.persistent: "cutlass::gemm::PersistentScheduler",
    TileScheduler.stream_k: "cutlass::gemm::StreamKScheduler",
}
CPP_UNARY = {
    "relu": "cutlass::epilogue::thread::ReLu",
    "gelu": "cutlass::epilogue::thread::GELU",  # erf form, = torch gelu(approximate="none")
    "gelu_tanh": "cutlass::epilogue::thread::GELU_taylor",  # tanh form, = torch gelu(approximate="tanh")
    "silu": "cutlass::epilogue::thread::SiLu",
    "sigmoid": "cutlass::epilogue::thread::Sigmoid",
    "tanh": "cutlass::epilogue::thread::Tanh",
}
CPP_BINARY = {"+": "cutlass::plus", "-": "cutlass::minus", "*": "cutlass::multiplies"}
IDENTITY = "cutlass::epilogue::thread::Identity"


@dataclass(frozen=True)
class Abi:
    """Argument order of a compiled kernel's ``ucut_run``.

    Attributes:
        ptr_names: names of the device pointers in ``ptrs`` order: ``a``, ``b``, [``c``], ``d``, then
            the epilogue's tensor inputs in declaration order.
        scalar_names: epilogue scalars passed at run time (as double) in ``scalars`` order.
        extents: the order of ``extents`` (``M``, ``N``, ``K``).
        knobs: the run-time settings in ``knobs`` order (:data:`ucutlass.ir.RUNTIME_SETTINGS`).
    """

    ptr_names: tuple[str, ...]
    scalar_names: tuple[str, ...]
    extents: tuple[str, ...] = ("M", "N", "K")
    knobs: tuple[str, ...] = ir.RUNTIME_SETTINGS


def abi_of(kernel: GemmKernel) -> Abi:
    """The ABI of ``kernel``'s generated entry point."""
    ptrs = [op.name for op in kernel.operands]
    scalars = []
    for inp in kernel.epilogue_inputs:
        if inp.kind is EpilogueInputKind.scalar:
            if inp.value is None:
                scalars.append(inp.name)
        else:
            ptrs.append(inp.name)
    return Abi(tuple(ptrs), tuple(scalars))


@functools.lru_cache(maxsize=None)
def _environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(
        lambda name: (resources.files("ucutlass.templates") / name).read_text(encoding="utf-8"))
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


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
    """Turns an epilogue expression into EVT nodes (post-order) with C++ aliases and argument slots."""

    def __init__(self, kernel: GemmKernel, abi: Abi):
        self.kernel = kernel
        self.abi = abi
        self.inputs = {i.name: i for i in kernel.epilogue_inputs}
        self.nodes: list[dict] = []
        self.aux_loads: list[dict] = []
        self._aux_index: dict[str, int] = {}

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
            return self._add({"kind": "acc"})
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
                    "ptr_index": self.abi.ptr_names.index(inp.name)}
            if inp.kind is EpilogueInputKind.matrix:
                if inp.name not in self._aux_index:
                    self._aux_index[inp.name] = len(self.aux_loads)
                    layout = CPP_LAYOUT["row" if (inp.dims[-1] if inp.layout is Layout.row else inp.dims[0]) == "N"
                                        else "col"]
                    self.aux_loads.append({"index": len(self.aux_loads), "layout": layout,
                                           "element": CPP_ELEMENT[inp.dtype]})
                node["aux_index"] = self._aux_index[inp.name]
            return self._add(node)
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


def _describe(op: ir.Operand) -> str:
    return f"{op.dtype.value}[{', '.join(op.dims)}] {op.layout.value}"


def template_values(kernel: GemmKernel, source_file: str = "<string>") -> dict:
    """The flat dict of values one render of a GEMM template takes (useful for tests and tools).

    Raises:
        CheckError: the kernel still has open choices or breaks a rule of its target.
    """
    if not kernel.is_concrete():
        open_ = ", ".join(sorted(kernel.choices()))
        raise CheckError([Diagnostic(f"kernel {kernel.name!r} still has open choices ({open_}); pick values "
                                     "(ucutlass tune does, or ucutlass compile --pick KEY=VALUE) before compiling",
                                     kernel.pos, code="open-choices")])
    problems = [d for d in arch.check_kernel(kernel) if d.severity == "error"]
    if problems:
        raise CheckError(problems)
    kernel = kernel.build_config()  # run-time settings are arguments, not code: one build serves them all
    schedule = arch.resolve_schedule(kernel)
    cta_tile = arch.sm100.cta_tile(kernel) if kernel.target is ir.Target.sm100 else kernel.tile
    abi = abi_of(kernel)
    tree = _TreeBuilder(kernel, abi)
    root = tree.build(kernel.epilogue, root=True)
    a, b, c, d = kernel.a, kernel.b, kernel.c, kernel.d
    align = lambda dt: 128 // dt.bits  # noqa: E731  (elements per 16-byte access)
    info = {
        "abi": ABI_VERSION,
        "name": kernel.name,
        "config": kernel.config_name(),
        "family": "gemm",
        "target": kernel.target.value,
        "ptrs": list(abi.ptr_names),
        "scalars": list(abi.scalar_names),
        "extents": list(abi.extents),
        "digest": kernel.digest(),
        "knobs": list(abi.knobs),
    }
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": kernel.name,
        "config_name": kernel.config_name(),
        "epilogue_text": ir.expr_to_text(kernel.epilogue),
        "operands_desc": "   ".join(f"{op.name.upper()}: {_describe(op)}" for op in kernel.operands),
        "has_c": c is not None,
        "element_a": CPP_ELEMENT[a.dtype], "element_b": CPP_ELEMENT[b.dtype],
        "element_c": CPP_ELEMENT[c.dtype] if c else "void",
        "element_d": CPP_ELEMENT[d.dtype],
        "element_accumulator": CPP_ELEMENT[kernel.accum],
        "layout_a": _cutlass_layout(a, "K"),
        "layout_b": CPP_LAYOUT["col" if b.contiguous_dim == "K" else "row"],
        "layout_c": _cutlass_layout(c, "N") if c else _cutlass_layout(d, "N"),
        "layout_d": _cutlass_layout(d, "N"),
        "align_a": align(a.dtype), "align_b": align(b.dtype),
        "align_c": align(c.dtype) if c else align(d.dtype), "align_d": align(d.dtype),
        "tile": list(kernel.tile), "cta_tile": list(cta_tile), "cluster": list(kernel.cluster),
        "kernel_schedule": CPP_KERNEL_SCHEDULE[schedule],
        "epilogue_schedule": CPP_EPILOGUE_SCHEDULE[schedule],
        "tile_scheduler": CPP_TILE_SCHEDULER[kernel.scheduler],
        "stream_k": kernel.scheduler is TileScheduler.stream_k,
        "abi_version": ABI_VERSION,
        "stages": kernel.stages or 0,
        "aux_loads": tree.aux_loads,
        "evt_nodes": tree.nodes,
        "evt_root": root,
        "ptr_names": list(abi.ptr_names),
        "scalar_names": list(abi.scalar_names),
        "ptr_a": abi.ptr_names.index("a"), "ptr_b": abi.ptr_names.index("b"),
        "ptr_d": abi.ptr_names.index("d"),
        "c_pointer_expr": f"static_cast<ElementC const*>(ptrs[{abi.ptr_names.index('c')}])" if c else "nullptr",
        "n_ptrs": len(abi.ptr_names),
        "n_scalars_alloc": max(1, len(abi.scalar_names)),
        "info_json": json.dumps(info, sort_keys=True),
    }


TEMPLATES = {("gemm", ir.Target.sm90): "sm90_gemm.cu.j2", ("gemm", ir.Target.sm100): "sm100_gemm.cu.j2"}


def render(kernel: GemmKernel, source_file: str = "<string>") -> str:
    """C++ source of one translation unit for a concrete, checked kernel.

    Raises:
        CheckError: open choices remain or an arch rule is broken (nothing is rendered).
        UcutError: no template for the kernel's family and target.
    """
    key = (kernel.family, kernel.target)
    if key not in TEMPLATES:
        raise UcutError(f"no template for {kernel.family} on {kernel.target.value}; "
                        f"available: {', '.join(f'{f} {t.value}' for f, t in TEMPLATES)}")
    template = _environment().get_template(TEMPLATES[key])
    return template.render(**template_values(kernel, source_file))
