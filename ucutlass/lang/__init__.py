"""The `.ucut` language: parse text into :class:`ucutlass.ir.Program` (the rules check it: :mod:`ucutlass.arch`).

Three steps, each a plain function of the one before (docs/architecture.md), one module each:

1. **parse** (``syntax``) — Lark (LALR) with ``grammar/ucut.lark``, loaded through :mod:`importlib.resources`
   and cached; positions are propagated so that every node knows its line, column and character offsets.
2. **AST** (``ast``, built in ``syntax``) — a :class:`lark.Transformer`, run as a separate step, turns the tree
   into small frozen dataclasses that still hold source spellings and positions.
3. **lower** (``lower``; per family ``gemm``, ``attention``, ``grouped``; ``lowering``, ``epilogue``,
   ``dispatch``) — names are resolved against the tables (settings, dtypes, schedules, activations, …), defaults
   filled in, epilogue intermediates inlined, and every problem found is collected as a
   :class:`~ucutlass.errors.Diagnostic`; if any, :class:`~ucutlass.errors.UcutSyntaxError` is raised with all of
   them.

:func:`ucutlass.arch.check` then runs the architecture rules of each kernel's target
(:func:`ucutlass.arch.check_kernel`: :mod:`~ucutlass.arch.sm90` or :mod:`~ucutlass.arch.sm100`) on a lowered kernel,
and on a kernel with open ``{…}`` choices checks every combination (:func:`ucutlass.arch.legal_combinations`).

Example:
    >>> from ucutlass import arch, lang
    >>> prog = lang.parse('''
    ... kernel k : gemm {
    ...   a : bf16[M, K] row   b : bf16[N, K] row   d : bf16[M, N] row
    ...   tile = {128x128x64, 64x128x64}
    ... }''')
    >>> sorted(prog.choices())
    ['k.tile']
    >>> arch.check(prog)[0].message
    '2 of 2 combinations of the open choices (tile) pass the sm90 rules'

The tables of names are in ``vocabulary`` and ``settings``; ``edit`` edits `.ucut` text (a kernel's block,
a dispatch).
"""

from .edit import kernel_block, pin_swap_ab, render_dispatch
from .settings import DEFAULTS, SETTINGS, SettingSpec
from .syntax import parse, parse_file
from .vocabulary import (ACTIVATIONS, DTYPES, EPILOGUE_DIMS, ERROR_CODES, FAMILIES, FUNCTIONS, KEYWORDS, LAYOUTS,
                         OPERAND_DIMS, OPERAND_DTYPES, RASTERS, REDUCTION_MODES, REDUCTIONS, SCHEDULERS, SCHEDULES,
                         TARGETS)

__all__ = [
    "parse", "parse_file", "kernel_block", "pin_swap_ab", "render_dispatch",
    "FAMILIES", "TARGETS", "DTYPES", "OPERAND_DTYPES", "LAYOUTS", "SCHEDULES", "SCHEDULERS", "RASTERS",
    "REDUCTION_MODES", "ACTIVATIONS", "REDUCTIONS", "FUNCTIONS", "SETTINGS", "DEFAULTS", "ERROR_CODES",
    "OPERAND_DIMS", "EPILOGUE_DIMS", "KEYWORDS", "SettingSpec",
]
