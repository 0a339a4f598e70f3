"""Render a concrete kernel IR into a CUTLASS C++ translation unit (jinja2, ``templates/*.cu.j2``).

The logic that chooses lives here; the templates are plain C++ with holes (STYLE.md, "Templates").
Every render uses ``jinja2.StrictUndefined``: a missing value is an error, never an empty string in C++.

One template per (family, target), :data:`TEMPLATES`, the values of each family's render in :data:`TEMPLATE_VALUES`
(modules ``gemm``, ``grouped``, ``attention``, ``conv``); what the GEMM templates share (the EVT ``using`` list, the
nested EVT arguments, the C ABI) lives once in ``templates/_gemm_common.j2``. The generated translation unit exports a
fixed C ABI: ``ucut_run(ptrs, scalars, extents, knobs, workspace, workspace_bytes, stream)``,
``ucut_workspace_size``, ``ucut_can_implement``, ``ucut_info`` (JSON), ``ucut_last_error`` and ``ucut_abi_version``.
Every C++ spelling is in ``cpp``; :func:`abi_of` (``abi``) gives the argument order the runtime must follow."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UcutError
from ..ir import Math, Target
from .abi import ABI_VERSION, Abi, abi_of, epilogue_args
from .attention import template_values as attention_template_values
from .common import environment, require_renderable
from .conv import conv_template_values
from .gemm import template_values
from .gemm_3xtf32 import template_values_3xtf32
from .grouped import grouped_template_values

__all__ = ["ABI_VERSION", "Abi", "abi_of", "epilogue_args", "render", "template_values", "require_renderable",
           "environment", "TEMPLATES", "TEMPLATE_VALUES",
           "MATH_TEMPLATES", "template_values_3xtf32"]

#: The template of each (family, target).
TEMPLATES = {("gemm", Target.sm90): "sm90_gemm.cu.j2", ("gemm", Target.sm100): "sm100_gemm.cu.j2",
             ("grouped_gemm", Target.sm90): "sm90_grouped_gemm.cu.j2",
             ("grouped_gemm", Target.sm100): "sm100_grouped_gemm.cu.j2",
             ("attention", Target.sm90): "sm90_fmha.cu.j2", ("attention", Target.sm100): "sm100_fmha.cu.j2",
             ("conv", Target.sm90): "sm90_conv.cu.j2", ("conv", Target.sm100): "sm100_conv.cu.j2"}
#: The values each family's templates take (each checks the kernel first: :func:`require_renderable`).
TEMPLATE_VALUES: dict[str, Callable[..., dict[str, Any]]] = {
    "gemm": template_values, "grouped_gemm": grouped_template_values, "attention": attention_template_values,
    "conv": conv_template_values}
#: Kernels whose ``math`` picks another template than their (family, target)'s: (family, math) → (template, values).
#: ``3xtf32``: CUTLASS 2.x SM80 OpMultiplyAddFastF32 (ucutlass.arch.sm90_3xtf32), run on the H200.
MATH_TEMPLATES: dict[tuple[str, Math], tuple[str, Callable[..., dict[str, Any]]]] = {
    ("gemm", Math.x3tf32): ("sm80_gemm_3xtf32.cu.j2", template_values_3xtf32)}


def render(kernel, source_file: str = "<string>") -> str:
    """C++ source of one translation unit for a concrete, checked kernel of any family.

    Raises:
        CheckError: open choices remain or an arch rule is broken (nothing is rendered).
        UcutError: no template for the kernel's family and target.
    """
    by_math = MATH_TEMPLATES.get((kernel.family, getattr(kernel, "math", Math.tf32)))
    if by_math is not None:
        template, values_of = by_math
        return environment().get_template(template).render(**values_of(kernel, source_file))
    key = (kernel.family, kernel.target)
    if key not in TEMPLATES:
        raise UcutError(f"no template for {kernel.family} on {getattr(kernel.target, 'value', kernel.target)}; "
                        f"available: {', '.join(f'{f} {t.value}' for f, t in TEMPLATES)}")
    values = TEMPLATE_VALUES[kernel.family](kernel, source_file)
    return environment().get_template(TEMPLATES[key]).render(**values)
