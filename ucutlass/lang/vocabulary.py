"""The `.ucut` vocabulary: families, targets, dtypes, layouts, schedules, functions, keywords, the dims of
operands and epilogue inputs, and the diagnostic codes of parsing and lowering (docs/DSL.md)."""

from __future__ import annotations

import re

from .. import ir
from ..ir import DType, EpilogueInputKind, Layout, Math, RasterOrder, ReductionMode, Schedule, Target, TileScheduler

#: Kernel families (``kernel NAME : FAMILY``): GEMM, attention (FMHA), grouped GEMM and convolution (implicit GEMM).
FAMILIES = ("gemm", "attention", "grouped_gemm", "conv")
#: ``target`` values (:class:`ucutlass.ir.Target`).
TARGETS = tuple(t.value for t in Target)
#: Element types of operands, epilogue inputs and ``accum`` (:class:`ucutlass.ir.DType`).
DTYPES = tuple(d.value for d in DType)
#: Scale-factor-only dtypes (sm100 block-scaled); the dtypes an error lists for an operand and for a scale.
SCALE_ONLY_DTYPES = ("ue8m0", "ue4m3")
OPERAND_DTYPES = tuple(d for d in DTYPES if d not in SCALE_ONLY_DTYPES)
SCALE_DTYPES = ("f32",) + SCALE_ONLY_DTYPES
#: Operand layouts: ``row`` = the last declared dim is contiguous, ``col`` = the first.
LAYOUTS = tuple(lay.value for lay in Layout)
#: ``schedule`` values (:class:`ucutlass.ir.Schedule`).
SCHEDULES = tuple(s.value for s in Schedule)
#: ``scheduler`` values (:class:`ucutlass.ir.TileScheduler`).
SCHEDULERS = tuple(s.value for s in TileScheduler)
#: ``raster`` values (:class:`ucutlass.ir.RasterOrder`).
RASTERS = tuple(r.value for r in RasterOrder)
#: ``reduction_mode`` values (:class:`ucutlass.ir.ReductionMode`).
REDUCTION_MODES = tuple(r.value for r in ReductionMode)
#: ``math`` values (:class:`ucutlass.ir.Math`): how f32 a and b multiply.
MATHS = tuple(m.value for m in Math)
#: Functions an epilogue expression may call, each with one argument.
ACTIVATIONS = ir.UNARY_OPS
#: Reductions an epilogue output statement may call: ``_n`` reduces over N into an ``[M]`` output (one value
#: per row; CUTLASS Sm90ColReduction), ``_m`` over M into an ``[N]`` output (Sm90RowReduction).
REDUCTIONS: dict[str, tuple[str, str]] = {"sum_n": ("sum", "M"), "max_n": ("max", "M"), "sum_m": ("sum", "N"),
                                          "max_m": ("max", "N")}
#: Every function an epilogue expression may call: the activations, ``cast(x, DTYPE)`` and the reductions.
FUNCTIONS = ACTIVATIONS + ("cast",) + tuple(REDUCTIONS)
#: Words with a fixed meaning: block keywords, layouts, ``auto``, and the epilogue's ``acc`` and ``c``.
KEYWORDS = ("kernel", "when", "epilogue", "pipeline", "return", "row", "col", "auto", "acc", "c")

#: GEMM operands and the dim names each must be declared over (in either order).
OPERAND_DIMS: dict[str, tuple[str, str]] = {"a": ("M", "K"), "b": ("N", "K"), "c": ("M", "N"), "d": ("M", "N")}
REQUIRED_OPERANDS = ("a", "b", "d")
#: The entries of a slice of a bound input (``a : bf16[B, M, K] row <- hidden_states[:, -keep:]``).
#: The operands a slice (``<- x[...]``) may bind, per family.
SLICEABLE = {"gemm": ("a", "b", "c")}
SLICE_FORMS = (":", "NAME:", "-NAME:")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")

#: Epilogue input dims and the broadcast kind they lower to (no dims: a scalar).
EPILOGUE_DIMS: dict[tuple[str, ...], EpilogueInputKind] = {
    ("N",): EpilogueInputKind.row_vector,
    ("M",): EpilogueInputKind.col_vector,
    ("M", "N"): EpilogueInputKind.matrix,
    ("N", "M"): EpilogueInputKind.matrix,
    (): EpilogueInputKind.scalar,
}


#: Diagnostic codes of :func:`parse` and :func:`check` (arch rule codes are in ``ucutlass.arch.RULES``).
ERROR_CODES: dict[str, str] = {
    "syntax": "the text does not parse",
    "duplicate-pipeline": "a pipeline defined twice",
    "unknown-kernel": "a pipeline calls a name that is no kernel of the file",
    "not-allowed": "a torch step, method or constant outside the allow-list (ucutlass/ir/torch_ops.py)",
    "bad-return": "a pipeline without one final return, or returning other than the problem's outputs",
    "bad-call": "a call with the wrong arguments or results, or a function (relu, gelu, …) called with the wrong "
                "arguments",
    "use-before-made": "a pipeline name used before a step makes it (a cycle, a later step, a typo)",
    "bad-step": "a step whose shapes or dtypes do not flow (a kernel or torch step refuses its arguments)",
    "unknown-family": "kernel family other than gemm",
    "unknown-setting": "a setting name that does not exist",
    "duplicate-setting": "a setting given twice",
    "bad-value": "a setting value of the wrong kind",
    "duplicate-option": "the same option twice in {…}",
    "unknown-dtype": "a dtype other than bf16, f16, f32",
    "bad-layout": "a layout other than row or col, or a layout on a vector or scalar",
    "unknown-operand": "a kernel-level declaration other than a, b, c, d",
    "duplicate-operand": "an operand declared twice",
    "missing-operand": "a, b or d not declared",
    "bad-dims": "dims that do not fit the operand or input",
    "bad-binding": "'<-' on d, '->' on an input, a value on a tensor, or a slice other than ':', 'NAME:', '-NAME:' "
                   "or not on a, b, c",
    "bad-output": "an extra output (->) not over [M, N], [M] or [N], a non-f32 reduction, or a misused reduction",
    "reads-output": "a statement reads a reduction output (complete only after the kernel)",
    "duplicate-epilogue": "two epilogue blocks",
    "duplicate-kernel": "two kernels with one name",
    "bad-when": "a dispatch condition other than when M, N or K <= a whole number, or on a kernel other than gemm",
    "dispatch-order": "a dispatch kernel that can never run (after the fallback, or bounds not increasing), or "
                      "a last kernel with when",
    "dispatch-mismatch": "dispatch kernels that bind other tensors or compute another epilogue, or are not gemms",
    "duplicate-input": "an epilogue input declared twice",
    "bad-name": "an epilogue input named acc, a, b, c, d or like a function",
    "choice-not-allowed": "{…} in an epilogue input",
    "unsupported": "'/', and extra outputs of a batched kernel (later)",
    "bad-assignment": "an assignment to a reserved or input name, twice, or after d",
    "missing-output": "no d = … in the epilogue, or a declared output never assigned",
    "unused-acc": "the epilogue does not read acc",
    "unused-input": "a declared input (or c) the epilogue never reads",
    "unused-name": "an intermediate never used",
    "undefined-name": "a name that is not acc, c, an input or an earlier intermediate",
    "unknown-function": "a call of something other than the activations",
    "empty": "a file with no kernel (empty or only comments)",
    "too-large": "a file over 256 KiB, an expression over 256 terms, or open choices over 4096 combinations",
    "too-deep": "an expression nested more than 32 deep (in the text or with its intermediates inlined)",
    "bad-number": "a number over 40 characters, an integer over 2^31 - 1, or a constant not finite in f32",
    "too-many": "a note: more than 50 problems, the rest not shown",
    "choices": "check's summary of the combinations of open choices",
    "dead-option": "a warning: an option of {…} that no legal combination uses",
}
