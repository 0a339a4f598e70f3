"""Rendering of a grouped GEMM (CUTLASS ptr-array grouped GEMM): the values of
``templates/sm*_grouped_gemm.cu.j2`` (the GEMM values plus the group arrays)."""

from __future__ import annotations

import json

from .. import arch
from ..errors import UcutError
from ..ir import GroupedGemmKernel
from .abi import grouped_abi
from .cpp import CPP_GROUPED_ARCH, CPP_GROUPED_EPILOGUE_SCHEDULE, CPP_GROUPED_KERNEL_SCHEDULE, CPP_INDEX
from .gemm import template_values


def grouped_template_values(kernel: GroupedGemmKernel, source_file: str = "<string>") -> dict:
    """The values one render of ``templates/sm{90,100}_grouped_gemm.cu.j2`` (both include ``_grouped_gemm.j2``) takes:
    :func:`ucutlass.codegen.template_values` (which checks the kernel against :mod:`ucutlass.arch.sm90_grouped` or
    :mod:`ucutlass.arch.sm100_grouped`) plus the arch tag, the group operand, the ptr-array schedules and, per EVT
    node, the batch stride of a row (``N`` for ``[G, N]``, 0 for ``[N]``) or the index of a column's per-group
    pointer array.

    Raises:
        CheckError: open choices remain or an arch rule is broken.
    """

    values = template_values(kernel, source_file)
    schedule = arch.resolve_schedule(kernel)
    inputs = {i.name: i for i in kernel.epilogue_inputs}
    col_inputs = []
    for node in values["evt_nodes"]:
        if node["kind"] not in ("acc", "row_vector", "col_vector", "scalar", "compute"):
            raise UcutError(f"{kernel.name}: the grouped template has no {node['kind']} epilogue node (grouped "
                            "epilogues read acc, [N], [G, N] and [M] inputs and scalars)")
        if node["kind"] == "row_vector":
            per_group = inputs[node["name"]].dims == ("G", "N")
            node["group_stride"] = "static_cast<int64_t>(extents[1])" if per_group else "0"
            node["dims_text"] = "[G, N]" if per_group else "[N]"
        elif node["kind"] == "col_vector":
            known = [c["name"] for c in col_inputs]
            if node["name"] not in known:
                col_inputs.append({"name": node["name"], "element": node["element"], "ptr_index": node["ptr_index"]})
                known.append(node["name"])
            node["col_index"] = known.index(node["name"])
    abi = grouped_abi(kernel)
    info = json.loads(values["info_json"])
    info.update({"family": kernel.family, "extents": list(abi.extents), "groups": kernel.groups.name})
    groups = kernel.groups
    arch_tag, arch_name, example = CPP_GROUPED_ARCH[kernel.target]
    values.update({
        "arch_tag": arch_tag, "arch_name": arch_name, "cutlass_example": example,
        "kernel_schedule": CPP_GROUPED_KERNEL_SCHEDULE[schedule],
        "epilogue_schedule": CPP_GROUPED_EPILOGUE_SCHEDULE[schedule],
        "groups_name": groups.name,
        "groups_dtype": groups.dtype.value,
        "groups_cpp": CPP_INDEX[groups.dtype],
        "groups_are_sizes": groups.name == "m_sizes",
        "groups_meaning": "rows per group" if groups.name == "m_sizes" else "cumulative row ends",
        "ptr_groups": abi.ptr_names.index(groups.name),
        "col_inputs": col_inputs,
        "info_json": json.dumps(info, sort_keys=True),
    })
    return values
