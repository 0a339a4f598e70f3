"""Translate a traced ``nn.Module`` into functional torch code: the reference ``run()`` of an imported problem.

:func:`functional_source` takes a ``torch.fx`` trace of a model (``torch.fx.symbolic_trace``: the forward's
Python control flow is followed once, ``torch.nn`` modules stay leaves) and rebuilds its graph with every
leaf module replaced by its ``torch.nn.functional`` call and every parameter or buffer turned into an argument,
then lets ``torch.fx`` write the Python source. The translation of each module type is a row of
:data:`MODULES`: the functional call and its arguments, read from the module's own attributes (``stride``,
``eps``, ``approximate``, …), so the generated code is the computation ``nn.Module.forward`` runs (torch's
``nn/modules/*.py`` call exactly these functions). A module with no row, or a row's precondition not met
(a non-zero padding mode, random dropout in training mode), is refused with :class:`TranslationError`
naming the module, its type and why.

Runs inside the import probe's child process (``ucutlass.importers.probe``), never in the CLI's process.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F


class TranslationError(Exception):
    """A module or call of the traced model has no faithful functional form (the message says which, why)."""


@dataclass(frozen=True)
class P:
    """A parameter or buffer of the module being translated (``P("weight")``); None when the module's
    attribute is None (``nn.Linear(..., bias=False)``)."""

    attr: str


X = object()  #: the module's (first) input in a row's argument list


def _dropout(m: nn.Module):
    if m.training and m.p > 0:
        raise TranslationError(f"{type(m).__name__}(p={m.p}) in training mode draws random numbers: its output "
                               "cannot be reproduced by a reference (set p=0 or call .eval() in the file)")
    return (lambda x: x), (X,), {}


def _conv(fn):
    def row(m):
        if m.padding_mode != "zeros":
            raise TranslationError(f"padding_mode={m.padding_mode!r}: only 'zeros' has a functional form here")
        return fn, (X, P("weight"), P("bias"), m.stride, m.padding, m.dilation, m.groups), {}
    return row


def _conv_t(fn):
    def row(m):
        if m.padding_mode != "zeros":
            raise TranslationError(f"padding_mode={m.padding_mode!r}: ConvTranspose supports only 'zeros'")
        return fn, (X, P("weight"), P("bias"), m.stride, m.padding, m.output_padding, m.groups, m.dilation), {}
    return row


def _batch_norm(m):
    # nn.modules.batchnorm._BatchNorm.forward: batch statistics in training mode or without running stats
    training = m.training or (m.running_mean is None and m.running_var is None)
    momentum = 0.0 if m.momentum is None else m.momentum  # only the running-stat update uses it, not the output
    return F.batch_norm, (X, P("running_mean"), P("running_var"), P("weight"), P("bias"), training, momentum,
                          m.eps), {}


def _instance_norm(m):
    use_input_stats = m.training or not m.track_running_stats
    momentum = 0.0 if m.momentum is None else m.momentum
    return F.instance_norm, (X, P("running_mean"), P("running_var"), P("weight"), P("bias"), use_input_stats,
                             momentum, m.eps), {}


def _softmax(fn):
    def row(m):
        if m.dim is None:
            raise TranslationError("dim=None (torch's implicit-dimension softmax is deprecated): give dim=")
        return fn, (X,), {"dim": m.dim}
    return row


def _max_pool(fn):
    return lambda m: (fn, (X, m.kernel_size, m.stride, m.padding, m.dilation), {
        "ceil_mode": m.ceil_mode, "return_indices": m.return_indices})


def _avg_pool(fn, divisor: bool):
    def row(m):
        kw = {"ceil_mode": m.ceil_mode, "count_include_pad": m.count_include_pad}
        if divisor:
            kw["divisor_override"] = m.divisor_override
        return fn, (X, m.kernel_size, m.stride, m.padding), kw
    return row


#: module type → row(module) → (function, args, kwargs); ``X`` is the input, ``P(attr)`` a parameter or buffer.
#: Each row is what the module's own ``forward`` calls (torch/nn/modules/*.py).
MODULES: dict[type, Callable[[nn.Module], tuple[Callable, tuple, dict]]] = {
    nn.Linear: lambda m: (F.linear, (X, P("weight"), P("bias")), {}),
    nn.Bilinear: lambda m: (F.bilinear, (X, X, P("weight"), P("bias")), {}),
    nn.Conv1d: _conv(F.conv1d), nn.Conv2d: _conv(F.conv2d), nn.Conv3d: _conv(F.conv3d),
    nn.ConvTranspose1d: _conv_t(F.conv_transpose1d), nn.ConvTranspose2d: _conv_t(F.conv_transpose2d),
    nn.ConvTranspose3d: _conv_t(F.conv_transpose3d),
    nn.BatchNorm1d: _batch_norm, nn.BatchNorm2d: _batch_norm, nn.BatchNorm3d: _batch_norm,
    nn.InstanceNorm1d: _instance_norm, nn.InstanceNorm2d: _instance_norm, nn.InstanceNorm3d: _instance_norm,
    nn.LayerNorm: lambda m: (F.layer_norm, (X, m.normalized_shape, P("weight"), P("bias"), m.eps), {}),
    nn.GroupNorm: lambda m: (F.group_norm, (X, m.num_groups, P("weight"), P("bias"), m.eps), {}),
    nn.ReLU: lambda m: (F.relu, (X,), {}),
    nn.ReLU6: lambda m: (F.relu6, (X,), {}),
    nn.GELU: lambda m: (F.gelu, (X,), {"approximate": m.approximate}),
    nn.SiLU: lambda m: (F.silu, (X,), {}),
    nn.Mish: lambda m: (F.mish, (X,), {}),
    nn.Sigmoid: lambda m: (torch.sigmoid, (X,), {}),
    nn.Tanh: lambda m: (torch.tanh, (X,), {}),
    nn.SELU: lambda m: (F.selu, (X,), {}),
    nn.ELU: lambda m: (F.elu, (X, m.alpha), {}),
    nn.CELU: lambda m: (F.celu, (X, m.alpha), {}),
    nn.LeakyReLU: lambda m: (F.leaky_relu, (X, m.negative_slope), {}),
    nn.Hardtanh: lambda m: (F.hardtanh, (X, m.min_val, m.max_val), {}),
    nn.Hardswish: lambda m: (F.hardswish, (X,), {}),
    nn.Hardsigmoid: lambda m: (F.hardsigmoid, (X,), {}),
    nn.Softplus: lambda m: (F.softplus, (X, m.beta, m.threshold), {}),
    nn.Softsign: lambda m: (F.softsign, (X,), {}),
    nn.Softmax: _softmax(F.softmax), nn.LogSoftmax: _softmax(F.log_softmax),
    nn.Dropout: _dropout, nn.Dropout1d: _dropout, nn.Dropout2d: _dropout, nn.Dropout3d: _dropout,
    nn.Identity: lambda m: ((lambda x: x), (X,), {}),
    nn.Flatten: lambda m: (torch.flatten, (X, m.start_dim, m.end_dim), {}),
    nn.MaxPool1d: _max_pool(F.max_pool1d), nn.MaxPool2d: _max_pool(F.max_pool2d),
    nn.MaxPool3d: _max_pool(F.max_pool3d),
    nn.AvgPool1d: _avg_pool(F.avg_pool1d, False), nn.AvgPool2d: _avg_pool(F.avg_pool2d, True),
    nn.AvgPool3d: _avg_pool(F.avg_pool3d, True),
    nn.AdaptiveAvgPool1d: lambda m: (F.adaptive_avg_pool1d, (X, m.output_size), {}),
    nn.AdaptiveAvgPool2d: lambda m: (F.adaptive_avg_pool2d, (X, m.output_size), {}),
    nn.AdaptiveAvgPool3d: lambda m: (F.adaptive_avg_pool3d, (X, m.output_size), {}),
}

#: Buffers that may become random inputs: norms' running statistics (a batch norm in training mode does not read
#: them; in eval mode they are data like the weights).
RANDOM_BUFFERS = ("running_mean", "running_var")

#: Names the source ``torch.fx`` writes may use, and how the reference defines them.
HEADER = ("import torch\nfrom math import inf, nan\nfrom torch import device\n"
          "import torch.fx._pytree as fx_pytree\nimport torch.utils._pytree as pytree\nNoneType = type(None)\n")
_KNOWN_GLOBALS = {"torch", "inf", "nan", "device", "fx_pytree", "pytree", "NoneType", "getattr", "__builtins__"}


def argument_name(target: str) -> str:
    """A Python identifier for a parameter's qualified name: ``layers.0.weight`` → ``layers_0_weight``."""
    name = re.sub(r"\W", "_", target)
    if name[:1].isdigit() or keyword.iskeyword(name):
        name = "m" + name if name[:1].isdigit() else name + "_"
    return name


@dataclass(frozen=True)
class Translation:
    """The functional form of a model.

    Attributes:
        source: Python defining ``run(<forward inputs>, <parameters>)`` (after :data:`HEADER`), wrapped in
            ``torch.no_grad()``.
        inputs: the forward's argument names, in order.
        params: ``(argument name, qualified name)`` of each parameter or buffer the graph reads, in order.
        modules: ``qualified name: type`` of each translated module (for the report).
    """

    source: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]
    modules: dict[str, str]


def _row(mod: nn.Module, qual: str):
    for cls in type(mod).__mro__:
        if cls in MODULES:
            try:
                return MODULES[cls](mod)
            except TranslationError as e:
                raise TranslationError(f"module self.{qual} ({type(mod).__name__}): {e}") from None
    supported = ", ".join(sorted(c.__name__ for c in MODULES))
    raise TranslationError(f"module self.{qual} ({type(mod).__module__}.{type(mod).__name__}) has no functional "
                           f"translation; supported modules: {supported}")


def functional_source(gm: fx.GraphModule) -> Translation:
    """The functional ``run`` of a traced model (see the module docstring).

    Raises:
        TranslationError: a module with no row, a row's precondition, ``*args`` in forward, or a call the
            generated source could not name.
    """
    old = gm.graph
    rows: dict[fx.Node, tuple[Callable, tuple, dict]] = {}
    needed: list[str] = []  # qualified parameter names in first-use order

    def need(q: str) -> None:
        if q not in needed:
            needed.append(q)

    modules = {}
    for n in old.nodes:
        if n.op == "placeholder" and str(n.target).startswith("*"):
            raise TranslationError(f"forward takes *{n.target.lstrip('*')}: give its inputs as named arguments")
        if n.op == "get_attr":
            need(str(n.target))
        elif n.op == "call_module":
            mod = gm.get_submodule(str(n.target))
            rows[n] = _row(mod, str(n.target))
            modules[str(n.target)] = type(mod).__name__
            for a in rows[n][1]:
                if isinstance(a, P) and getattr(mod, a.attr, None) is not None:
                    need(f"{n.target}.{a.attr}")
    parameters, buffers = dict(gm.named_parameters()), dict(gm.named_buffers())
    for q in needed:
        if q in parameters or (q in buffers and q.endswith(RANDOM_BUFFERS)):
            continue
        value = _attr(gm, q)
        kind = "a buffer" if q in buffers else f"a {type(value).__name__} attribute"
        raise TranslationError(f"forward reads self.{q}, {kind} whose values Model computes in __init__ (a mask, a "
                               "table): the imported problem's inputs are random, so it would compute something "
                               "else; only parameters (and norms' running statistics) become inputs")

    new = fx.Graph()
    env: dict[fx.Node, Any] = {}
    inputs = []
    for n in old.nodes:
        if n.op == "placeholder":
            env[n] = new.placeholder(str(n.target))  # the forward's own argument name (fx's n.name is snake_case)
            inputs.append(str(n.target))
    taken = set(inputs)
    params = []
    pnode = {}
    for q in needed:
        name = argument_name(q)
        while name in taken:
            name += "_"
        taken.add(name)
        pnode[q] = new.placeholder(name)
        params.append((name, q))
    for n in old.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":
            env[n] = pnode[str(n.target)]
        elif n.op == "call_module":
            fn, args, kwargs = rows[n]
            mod = gm.get_submodule(str(n.target))
            given = [env[a] if isinstance(a, fx.Node) else a for a in n.args]
            if n.kwargs or len(given) != sum(a is X for a in args):
                raise TranslationError(f"module self.{n.target} ({type(mod).__name__}) is called with "
                                       f"{len(given)} argument(s){' and keywords' if n.kwargs else ''}; "
                                       f"its translation takes {sum(a is X for a in args)}")
            it = iter(given)
            real = tuple(next(it) if a is X else (pnode.get(f"{n.target}.{a.attr}") if isinstance(a, P) else a)
                         for a in args)
            if fn.__name__ == "<lambda>":  # identity (Dropout p=0, Identity)
                env[n] = real[0]
                continue
            env[n] = new.call_function(fn, real, kwargs)
        else:
            env[n] = new.node_copy(n, lambda a: env[a])
    for n in new.nodes:
        n.type = None  # annotations (x: torch.Tensor) would name globals the reference does not define
    new.lint()
    code = new.python_code(root_module="self")
    extra = sorted(set(code.globals) - _KNOWN_GLOBALS)
    if extra:
        raise TranslationError(f"forward calls {', '.join(extra)}, which the generated reference cannot name "
                               "(only torch functions and Python operators are translated)")
    src = re.sub(r"torch\._C\._nn\.(\w+)\(", _public_name, code.src.strip("\n"))
    src = re.sub(r"^def forward\(self,? ?", "def run(", src, count=1)
    return Translation(source="@torch.no_grad()\n" + src.rstrip() + "\n", inputs=tuple(inputs),
                       params=tuple(params), modules=modules)


def _public_name(m: re.Match) -> str:
    """``torch._C._nn.linear(`` → ``torch.nn.functional.linear(`` where that is the same function."""
    same = getattr(F, m.group(1), None) is getattr(torch._C._nn, m.group(1), object())
    return f"torch.nn.functional.{m.group(1)}(" if same else m.group(0)


def _attr(root: nn.Module, qual: str):
    obj: Any = root
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj
