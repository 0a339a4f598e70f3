"""The allow-list of torch steps a pipeline may call: tensor ops only (no I/O, no code loading, nothing in place).

A torch step is a call the grammar parses (``torch.nn.functional.rms_norm(x, [4096], w, 1e-6)``, ``x.transpose(1,
2)``, ``a + b``); the lowering (:mod:`ucutlass.lang.pipeline`) looks its spelling up here, and the run time reaches
the function through :func:`torch_function` / :func:`tensor_method`, which follow only the paths in these tables:
nothing is evaluated from text. ``F.`` is short for ``torch.nn.functional.``.

Each entry says whether it is a *view* (zero cost where the strides allow: reshape of a contiguous tensor,
transpose, slice, chunk, split, …; shown as ``view`` in reports) or a *torch* step (computes: shown as ``torch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TorchOp:
    """One allowed torch call.

    Attributes:
        spelling: as written in `.ucut` (``torch.nn.functional.rms_norm``; a method: ``reshape``).
        kind: ``"view"`` (no data moves where strides allow) or ``"torch"`` (a torch kernel computes).
        group: what it is for (``norm``, ``softmax``, ``elementwise``, ``rope``, ``routing``, ``shape``, ``reduce``,
            ``mask``, ``conv`` (grouped convolutions), ``factory``: a tensor from numbers alone, :data:`FACTORIES`),
            for the card and the reports.
    """

    spelling: str
    kind: str
    group: str


def _ops(kind: str, group: str, *names: str) -> dict[str, TorchOp]:
    return {n: TorchOp(n, kind, group) for n in names}


#: Functions by full dotted name (``torch.…``).
TORCH_FUNCTIONS: dict[str, TorchOp] = {
    **_ops("torch", "norm", "torch.nn.functional.rms_norm", "torch.nn.functional.layer_norm",
           "torch.nn.functional.group_norm", "torch.nn.functional.normalize", "torch.rsqrt", "torch.sqrt"),
    **_ops("torch", "softmax", "torch.softmax", "torch.log_softmax", "torch.nn.functional.softmax",
           "torch.nn.functional.log_softmax"),
    **_ops("torch", "elementwise", "torch.nn.functional.silu", "torch.nn.functional.gelu",
           "torch.nn.functional.relu", "torch.nn.functional.sigmoid", "torch.nn.functional.tanh",
           "torch.nn.functional.softplus", "torch.sigmoid", "torch.tanh", "torch.exp", "torch.log", "torch.abs",
           "torch.neg", "torch.square", "torch.pow", "torch.add", "torch.sub", "torch.mul", "torch.div",
           "torch.maximum", "torch.minimum", "torch.clamp", "torch.where", "torch.erf", "torch.logical_not",
           "torch.lt", "torch.le", "torch.gt", "torch.ge", "torch.eq", "torch.ne"),
    **_ops("torch", "rope", "torch.sin", "torch.cos", "torch.outer", "torch.polar", "torch.view_as_complex",
           "torch.view_as_real"),
    **_ops("torch", "reduce", "torch.sum", "torch.mean", "torch.amax", "torch.amin", "torch.cumsum", "torch.var"),
    **_ops("torch", "routing", "torch.gather", "torch.index_select", "torch.index_add", "torch.scatter_add",
           "torch.scatter",  # a group mask from top-k group indices (DeepSeek's group-limited routing)
           "torch.take_along_dim", "torch.topk", "torch.argsort", "torch.sort", "torch.repeat_interleave",
           "torch.cat", "torch.stack", "torch.zeros_like", "torch.ones_like", "torch.full_like",
           # out of place, as init writes a functionalized `x[b].index_copy_(…)` / `x[:, -1] = 0`:
           "torch.index_copy", "torch.select_scatter", "torch.slice_scatter",
           "torch.index_put"),  # out of place: rows a boolean mask kept, accumulated into zeros (init/masked.py)
    **_ops("torch", "shape", "torch.nn.functional.pad", "torch.roll"),
    # grouped and depthwise convolutions (a Mamba conv1d): the conv kernel family builds groups = 1 only
    # (rule sm90.conv-groups), whose message sends a grouped conv here
    **_ops("torch", "conv", "torch.nn.functional.conv1d", "torch.nn.functional.conv2d", "torch.nn.functional.conv3d"),
    **_ops("torch", "mask", "torch.triu", "torch.tril"),  # a causal mask: torch.triu(torch.full(…, -torch.inf), 1)
    **_ops("torch", "factory", "torch.arange", "torch.full"),  # made on the inputs' device (FACTORIES)
    **_ops("view", "shape", "torch.reshape", "torch.transpose", "torch.permute", "torch.flatten",
           "torch.unflatten", "torch.unsqueeze", "torch.squeeze", "torch.narrow", "torch.chunk", "torch.split",
           "torch.movedim", "torch.unbind"),
}

#: Functions that make a tensor from numbers alone (``torch.arange(seq_len)``: RoPE positions). A pipeline cannot
#: name a device, so the run time makes them on the device of the problem's inputs (meta while binding).
FACTORIES: frozenset[str] = frozenset(n for n, op in TORCH_FUNCTIONS.items() if op.group == "factory")

#: Tensor methods (``x.reshape(…)``) by name.
TENSOR_METHODS: dict[str, TorchOp] = {
    **_ops("view", "shape", "reshape", "view", "transpose", "permute", "flatten", "unflatten", "unsqueeze",
           "squeeze", "narrow", "chunk", "split", "t", "expand", "movedim", "view_as", "unbind"),
    **_ops("torch", "shape", "contiguous", "repeat", "repeat_interleave"),
    **_ops("torch", "dtype", "to", "float", "bfloat16", "half", "type_as"),
    **_ops("torch", "elementwise", "pow", "sigmoid", "exp", "rsqrt", "sqrt", "neg", "abs", "clamp", "masked_fill",
           "square", "tanh"),
    **_ops("torch", "rope", "sin", "cos"),
    **_ops("torch", "reduce", "sum", "mean", "amax", "cumsum"),
    **_ops("torch", "softmax", "softmax", "log_softmax"),
    **_ops("torch", "routing", "gather", "index_select", "index_add", "scatter_add", "topk", "argsort"),
}

#: The arithmetic operators on tensors: each is a torch step.
OPERATORS: dict[str, TorchOp] = {
    "+": TorchOp("torch.add", "torch", "elementwise"), "-": TorchOp("torch.sub", "torch", "elementwise"),
    "*": TorchOp("torch.mul", "torch", "elementwise"), "/": TorchOp("torch.div", "torch", "elementwise"),
    "//": TorchOp("torch.floor_divide", "torch", "elementwise"), "%": TorchOp("torch.remainder", "torch", "elementwise"),
}

#: Constants a pipeline may name (dtype arguments of ``.to``, flags).
CONSTANTS: dict[str, str] = {
    "torch.float32": "float32", "torch.float": "float32", "torch.float16": "float16", "torch.half": "float16",
    "torch.bfloat16": "bfloat16", "torch.int32": "int32", "torch.int64": "int64", "torch.long": "int64",
    "torch.bool": "bool",
    # FP8 (a quantisation step's `.to(torch.float8_e4m3fn)` before a kernel's f8e4m3 operand: the conversion rounds
    # to nearest even and gives NaN past ±448 for e4m3, so clamp first, as SOL-ExecBench's BlockwiseScaler does).
    "torch.float8_e4m3fn": "float8_e4m3fn", "torch.float8_e5m2": "float8_e5m2",
    # The floats a number cannot spell (numbers are finite): a causal mask's `masked_fill(mask, -torch.inf)`.
    "torch.inf": "inf", "torch.nan": "nan",
}
#: Plain names with a fixed value (True, False, None).
LITERALS: dict[str, Any] = {"True": True, "False": False, "None": None}

#: Short prefixes a pipeline may write instead of the full module path.
ALIASES: dict[str, str] = {"F.": "torch.nn.functional."}


def canonical(spelling: str) -> str:
    """``F.silu`` → ``torch.nn.functional.silu``; other spellings unchanged."""
    for short, full in ALIASES.items():
        if spelling.startswith(short):
            return full + spelling[len(short):]
    return spelling


def torch_function(spelling: str):
    """The torch function of an allow-listed dotted name (:data:`TORCH_FUNCTIONS`), found attribute by attribute.

    Raises:
        KeyError: the name is not in the allow-list (the lowering refused it already).
    """
    import torch

    name = canonical(spelling)
    if name not in TORCH_FUNCTIONS:
        raise KeyError(f"{spelling} is not an allowed torch step")
    if name == "torch.nn.functional.pad":
        return _pad
    obj: Any = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _pad(x: Any, pad: Any, mode: str = "constant", value: float | None = None):
    """``F.pad``, except that padding by nothing returns a contiguous ``x`` itself: pipelines pad sequences to the
    FMHA's multiple of 8 with ``(8 - seq_len % 8) % 8``, which is 0 on most workloads, and ``F.pad`` copies even then
    (a read and a write of each q, k and v per attention). A non-contiguous ``x`` is still padded (copied), so the
    result's layout is F.pad's either way; torch steps never write in place, so sharing ``x`` is safe."""
    import torch

    if mode == "constant" and isinstance(x, torch.Tensor) and x.is_contiguous() and all(int(p) == 0 for p in pad):
        return x
    return torch.nn.functional.pad(x, pad, mode=mode, value=value)


def tensor_method(tensor: Any, name: str):
    """The bound method ``tensor.name`` of an allow-listed method (:data:`TENSOR_METHODS`).

    Raises:
        KeyError: the method is not in the allow-list.
    """
    if name not in TENSOR_METHODS:
        raise KeyError(f".{name}() is not an allowed torch step")
    return getattr(tensor, name)


def constant(spelling: str):
    """The value of an allowed constant (``torch.bfloat16`` → ``torch.bfloat16``).

    Raises:
        KeyError: not in :data:`CONSTANTS`.
    """
    import torch

    return getattr(torch, CONSTANTS[spelling])
