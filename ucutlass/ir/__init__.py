"""Kernel IR: frozen dataclasses that a parsed `.ucut` program lowers into.

The IR is the contract between the stages (docs/architecture.md): ``ucutlass.lang`` produces it, ``ucutlass.arch``
checks it, ``ucutlass.codegen`` renders it, the runtime calls the result and the tuner resolves its choices.
Nothing in here knows C++ spellings (``ucutlass.codegen.cpp``), the `.ucut` grammar or problem files.

Vocabulary follows CUTLASS: TileShape (``tile``), ClusterShape (``cluster``), KernelSchedule
(``schedule``), pipeline ``stages``, tile scheduler, and the epilogue visitor tree (EVT).

A setting whose value is still a search choice holds a :class:`Choice`; ``is_concrete()`` says whether any
remain, and :meth:`Program.resolve` replaces them with picked values (in the IR: nothing is parsed again).
Modules: ``values`` (enums, Choice, JSON of digests), ``operands``, ``expr`` (epilogue trees), one per family
(``gemm``, ``grouped``, ``attention``, ``conv``), ``kernel`` (the protocol they share), ``pipeline`` (kernels and
torch steps wired together; ``torch_ops``: the allow-list of torch steps), ``program``.
"""

from ..errors import Pos
from .attention import (ATTENTION_SETTINGS, EXTENTS, MASKS, AttentionKernel, head_ratio,  # noqa: F401
                        padded_head_dim)
from .conv import CONV_DIMS, CONV_SETTINGS, ConvKernel, output_extent, spatial_of  # noqa: F401
from .expr import linear_combination  # noqa: F401
from .expr import BINARY_OPS, UNARY_OPS, Acc, Binary, Cast, Const, Expr, Ref, Src, Unary, expr_to_text, walk
from .gemm import (ALIGNMENTS, BUILD_NAME, GEMM_SETTINGS, RUNTIME_DEFAULTS, RUNTIME_SETTINGS,  # noqa: F401
                   SWAPPED_NAMES, GemmKernel, precision, transposed)
from .grouped import GROUP_OPERANDS, GroupedGemmKernel, IndexType  # noqa: F401
from .kernel import Kernel  # noqa: F401
from .operands import SCALE_OPERANDS, EpilogueInput, EpilogueOutput, Operand, Scale, split_dim  # noqa: F401
from .pipeline import Pipeline, Step  # noqa: F401
from .program import Program  # noqa: F401
from .values import (OMIT_DEFAULT, Choice, DType, EpilogueInputKind, Layout, Math, RasterOrder,  # noqa: F401
                     ReductionMode, Schedule, Setting, Target, TileScheduler, canonical_json, spell_setting, to_dict)

__all__ = [
    'Pos', 'DType', 'Layout', 'Target', 'Schedule', 'TileScheduler', 'RasterOrder', 'ReductionMode',
    'EpilogueInputKind', 'Choice', 'Setting', 'spell_setting', 'canonical_json', 'to_dict', 'Operand', 'split_dim',
    'SCALE_OPERANDS', 'Scale', 'EpilogueInput', 'EpilogueOutput', 'UNARY_OPS', 'BINARY_OPS', 'Acc', 'Src', 'Ref',
    'Const', 'Unary', 'Binary', 'Cast', 'Expr', 'walk', 'expr_to_text', 'linear_combination', 'GEMM_SETTINGS',
    'ALIGNMENTS', 'RUNTIME_SETTINGS', 'RUNTIME_DEFAULTS', 'BUILD_NAME', 'GemmKernel', 'SWAPPED_NAMES', 'transposed',
    'IndexType', 'GROUP_OPERANDS', 'GroupedGemmKernel', 'MASKS', 'ATTENTION_SETTINGS', 'EXTENTS', 'AttentionKernel', 'padded_head_dim',
    'head_ratio', 'Kernel', 'Program', 'ConvKernel', 'CONV_DIMS', 'CONV_SETTINGS',
    'output_extent', 'spatial_of', 'Pipeline', 'Step', 'Math', 'OMIT_DEFAULT', 'precision'
]
