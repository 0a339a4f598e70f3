"""Partition a captured aten graph into pipeline steps (issue 17, item 2).

Matmul-family nodes (``mm``, ``addmm``, ``bmm``, ``baddbmm``) become calls of ``gemm`` kernels (batched for ``bmm``);
an ``nn.Linear`` weight read through ``.t()`` binds as ``b : [N, K] row`` (no copy); views become tensor views;
every other node becomes a torch step from the allow-list (:mod:`ucutlass.ir.torch_ops`) or, when it has none,
:class:`~ucutlass.init.capture.InitError` names the op. Integers in the graph (view shapes, slice bounds) are
written as axis expressions when a second capture at another workload shows which axis they follow
(:func:`symbolize`). A residual add after a gemm (``mm + r``) runs in its epilogue as ``c``, an activation after it
(however the reference spells it: :mod:`.epilogues`) as ``d = cast(ACT(cast(acc, T)), T)``; an N whose rows are not
16-byte aligned is padded and sliced back; a per-expert loop (a MoE reference) is written by :mod:`.experts`;
results the pipeline returns take the problem's output names.
"""

from __future__ import annotations

import re
from typing import Any

from .capture import Capture, InitError
from .epilogues import activation_after, find_residual
from .experts import ExpertLoop, ExpertLoopWriter, find_expert_loop
from .padding import k_pad, n_pad
from .convs import conv_step
from .steps import (TORCH_CONSTANTS, UCUT_DTYPES, KernelSpec, Partition, Step, dtype_name, node_val, ref_line,
                    ref_note)
from .routing_steps import routing_step
from .step_passes import live, name_outputs, shared_views
from .symbols import symbolize

__all__ = ["KernelSpec", "Partition", "Step", "Translator", "symbolize", "TORCH_CONSTANTS", "UCUT_DTYPES"]

#: aten op name (``overloadpacket`` name) → tensor method written ``x.NAME(args…)`` (views).
VIEW_METHODS = {"view": "reshape", "_unsafe_view": "reshape", "reshape": "reshape", "permute": "permute",
                "transpose": "transpose", "t": "t", "unsqueeze": "unsqueeze", "squeeze": "squeeze",
                "expand": "expand", "narrow": "narrow", "alias": None, "detach": None, "lift_fresh_copy": None}
#: aten op → (operator) for ``a OP b``.
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%"}
#: aten op → torch function written ``FUNC(x, args…)``.
FUNCTIONS = {"relu": "F.relu", "silu": "F.silu", "sigmoid": "torch.sigmoid", "tanh": "torch.tanh",
             "exp": "torch.exp", "log": "torch.log", "abs": "torch.abs", "neg": "torch.neg", "rsqrt": "torch.rsqrt",
             "sqrt": "torch.sqrt", "erf": "torch.erf", "sin": "torch.sin", "cos": "torch.cos",
             "maximum": "torch.maximum", "minimum": "torch.minimum", "where": "torch.where",
             "clamp": "torch.clamp", "pow": "torch.pow", "square": "torch.square", "cat": "torch.cat",
             "stack": "torch.stack", "mean": "torch.mean", "sum": "torch.sum", "amax": "torch.amax",
             "amin": "torch.amin", "cumsum": "torch.cumsum", "gather": "torch.gather", "var": "torch.var",
             "index_select": "torch.index_select", "softplus": "F.softplus",
             "triu": "torch.triu", "tril": "torch.tril", "roll": "torch.roll", "index_copy": "torch.index_copy",
             "select_scatter": "torch.select_scatter", "slice_scatter": "torch.slice_scatter",
             "scatter_add": "torch.scatter_add"}
MATMUL = {"mm", "addmm", "bmm", "baddbmm"}
#: The text of a number (a tensor constant of the graph written by :meth:`Translator._constant`).
NUMBER = re.compile(r"-?(torch\.inf|torch\.nan|[0-9.]+(e[+-]?[0-9]+)?)|True|False")


#: Words a step may not be named (keywords, roots of dotted names).
RESERVED = {"kernel", "when", "epilogue", "pipeline", "return", "row", "col", "auto", "acc", "c", "torch", "F",
            "True", "False", "None"}


def _without_no_ops(nodes: list, other: list) -> bool:
    """Whether ``other``'s ops are ``nodes``' ops with some pads and slices left out (those a workload where they
    do nothing does not record)."""
    it = iter(other)
    want = next(it, None)
    for n in nodes:
        if want is not None and n.target == want.target:
            want = next(it, None)
        elif getattr(getattr(n.target, "overloadpacket", None), "__name__", "") not in ("constant_pad_nd", "slice"):
            return False
    return want is None


class Translator:
    """Walks one capture's nodes in order and writes a step per node (see the module's docstring).

    Args:
        cap: the capture whose shapes the check grades; ``other``: a capture at another workload, node for node
            the same ops, whose integers tell constants from axes (None: every integer stays a number).
        problem: the problem (input names, axes).
    """

    def __init__(self, problem, cap: Capture, others: list[Capture]):
        self.problem = problem
        self.cap = cap
        nodes = list(cap.graph.graph.nodes)
        same = [o for o in others if len(list(o.graph.graph.nodes)) == len(nodes) and all(
            a.target == b.target for a, b in zip(nodes, o.graph.graph.nodes))]
        # a capture whose var axes are all >= 2 must have the same ops, but for a pad or a slice that does nothing
        # there (L2_045's `if pad > 0: F.pad(…)`, `x[:, :n]` of n rows: torch leaves them out); one with an extent
        # of 1 may differ (a reshape that stays a view there; init's check grades that workload)
        differ = [o for o in others if o not in same and not _without_no_ops(nodes, list(o.graph.graph.nodes)) and all(
            o.axes.get(n, 2) >= 2 for n, a in problem.axes.items() if a.kind == "var")]
        if (others and not same) or differ:
            self._changes_with_workload(nodes, differ or others)
        self.pairs: dict[Any, list] = {n: [] for n in nodes}
        for o in same:
            for n, m in zip(nodes, o.graph.graph.nodes):
                self.pairs[n].append(m)
        # A var axis no tensor has (Quant_001's batch_size, seq_len: only num_tokens is a dim) is unknown when the
        # pipeline runs (axes are read from shapes): write the expr axes the tensors have instead.
        shaped = {str(d) for spec in (*problem.inputs.values(), *problem.outputs.values()) if spec.shape
                  for d in spec.shape if not str(d).isdigit()}
        kinds = ("var", "expr") if any(a.kind == "var" and n not in shaped for n, a in problem.axes.items()) \
            else ("var",)
        var = {n: (cap.axes[n], *(o.axes[n] for o in same)) for n, a in problem.axes.items()
               if a.kind in kinds and n in cap.axes and n in shaped}
        consts = {n: a.value for n, a in problem.axes.items() if a.kind == "const" and a.value is not None}
        self.sym = symbolize(var, consts)
        self.names: dict[Any, str] = {}
        self.steps: list[Step] = []
        self.kernels: list[KernelSpec] = []
        self.kernel_flops = 0
        self.total_flops = 0
        #: step names no graph node has (an expert loop's pairs, a K pad), kept from :meth:`fresh`
        self.reserved: set[str] = set()
        #: nodes a kernel's epilogue computes (node → the kernel call's node, whose name they take)
        self.fused: dict[Any, Any] = {}
        #: a per-expert loop (a MoE reference), written as grouped GEMMs over all pairs (:mod:`.experts`)
        self.loop = find_expert_loop(nodes, problem.id)

    def _changes_with_workload(self, nodes: list, others: list[Capture]):
        """Raise: no other capture has the graph's ops (a Python loop over an axis, L2_045's ``for b in
        range(batch_size)``): a program written at one workload would be wrong at the others."""
        other = list(others[0].graph.graph.nodes)
        at = next((i for i, (a, b) in enumerate(zip(nodes, other)) if a.target != b.target), min(len(nodes), len(other)))
        line = ref_line(nodes[min(at, len(nodes) - 1)], self.problem.id)
        where = f" from reference line {line}" if line else ""
        raise InitError(f"{self.problem.id}: the graph's ops change with the workload{where} ({len(nodes)} ops at "
                        f"{self._var(self.cap)}, {len(other)} at {self._var(others[0])}): a Python loop over an axis "
                        "or a branch on a shape; a program written at one workload would be wrong at the others")

    def _var(self, cap: Capture) -> str:
        return ", ".join(f"{n}={v}" for n, v in cap.axes.items() if self.problem.axes[n].kind == "var")

    # --- values --------------------------------------------------------------------------------------

    def fmt(self, a, b=()) -> str:
        """Text of one argument ``a`` (``b``: the same argument in the other captures)."""
        import torch

        if isinstance(a, torch.fx.Node):
            return self.names[a]
        if isinstance(a, bool) or a is None:
            return str(a)
        if isinstance(a, int):
            b = tuple(b) if isinstance(b, (list, tuple)) else ()
            return self.sym((a, *b)) if all(isinstance(x, int) for x in b) else str(a)
        if isinstance(a, float):
            names = [n for n, v in self.cap.scalars.items() if isinstance(v, float) and v == a]
            if len(names) == 1:
                return names[0]
            if a != a:
                return "torch.nan"
            if abs(a) == float("inf"):
                return "torch.inf" if a > 0 else "-torch.inf"
            return repr(a)
        if isinstance(a, (list, tuple)):
            bs = [o for o in b if isinstance(o, (list, tuple)) and len(o) == len(a)]
            return "[" + ", ".join(self.fmt(x, [o[i] for o in bs]) for i, x in enumerate(a)) + "]"
        if isinstance(a, torch.dtype):
            name = dtype_name(a)
            if name not in TORCH_CONSTANTS:
                self._bad(f"the dtype {name}")
            return TORCH_CONSTANTS[name]
        self._bad(f"the argument {a!r}")

    def _bad(self, what: str):
        raise InitError(f"{self.problem.id}: {what} has no spelling in a pipeline")

    def args(self, node, start: int = 0) -> list[str]:
        others = [list(o.args) for o in self.pairs.get(node, [])]
        return [self.fmt(a, [o[i] for o in others if i < len(o)]) for i, a in enumerate(node.args) if i >= start]

    # --- nodes ---------------------------------------------------------------------------------------

    def run(self) -> Partition:
        placeholders = iter(self.cap.inputs)
        returns: list[str] = []
        for node in self.cap.graph.graph.nodes:
            if node.op == "placeholder":
                self.names[node] = next(placeholders)
            elif node.op == "output":
                outs = node.args[0]
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                returns = [self.fmt(o) for o in outs]
            elif node.op == "get_attr":  # a tensor constant of the reference (`x[:, -1] = 0`'s 0): one number
                self.names[node] = self._constant(node)
            elif self.loop is not None and node in self.loop.region:  # written once, for all experts
                if node is self.loop.body[0]:
                    self._expert_loop(self.loop)
            elif self.loop is not None and node in self.loop.dead:  # the one-hot mask: the loop's pairs replace it
                continue
            elif node in self.fused:  # computed by an earlier kernel's epilogue: its result's name
                self.names[node] = self.names[self.fused[node]]
            elif node.op == "call_function":
                self.names[node] = self.fresh(node.name)
                self.node(node)
            else:
                raise InitError(f"{self.problem.id}: the graph has a {node.op} node ({node.target})")
        steps = shared_views(live(self.steps, returns), returns)
        returns = name_outputs(steps, returns, list(self.problem.outputs),
                                set(self.problem.inputs) | set(self.problem.axes) | RESERVED)
        return Partition(steps, self.kernels, returns, self.kernel_flops, self.total_flops)

    def _constant(self, node) -> str:
        """The text of a one-element tensor constant the graph holds (written as its number)."""
        value = getattr(self.cap.graph, str(node.target), None)
        try:
            number = value.item() if value is not None and value.numel() == 1 else None
        except Exception:  # noqa: BLE001 - a fake tensor has no value
            number = None
        if number is None:
            raise InitError(f"{self.problem.id}: the graph holds a tensor constant ({node.target}) "
                            "a pipeline cannot spell")
        return self.fmt(number)

    def fresh(self, name: str, reserve: bool = False) -> str:
        """A step name: the node's, without leading ``_``, renamed where it is a problem input, an axis, a
        keyword or a name already taken; ``reserve``: taken from now on (a step no graph node names)."""
        base = name.lstrip("_") or "v"
        taken = set(self.names.values()) | self.reserved | set(self.problem.inputs) | set(self.problem.axes) | \
            RESERVED
        out, i = base, 1
        while out in taken:
            out, i = f"{base}_{i}", i + 1
        if reserve:
            self.reserved.add(out)
        return out

    def parts(self, node, labels) -> None:
        """Names for each part of a tuple result (``topk_values, topk_indices = …``): ``(node, i)`` → part i."""
        parts = [self.fresh(f"{node.name}_{w}", reserve=True) for w in labels]
        for i, name in enumerate(parts):
            self.names[(node, i)] = name
        self.names[node] = ", ".join(parts)

    def emit(self, node, expr: str, kind: str) -> None:
        self.steps.append(Step(self.names[node], expr, kind, ref_line(node, self.problem.id), ref_note(node)))

    def node(self, node) -> None:
        op = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        packet = getattr(getattr(node.target, "overloadpacket", None), "__name__", op)
        x = node.args[0] if node.args else None
        a = self.args(node)
        kw = node.kwargs
        if packet in MATMUL:
            return self.matmul(node, packet)
        if packet == "topk":  # (values, indices)
            self.parts(node, ("values", "indices"))
            k, dim, largest, ordered = (list(node.args[1:]) + [-1, True, True][len(node.args) - 2:])[:4]
            extra = ([] if largest else ["largest=False"]) + ([] if ordered else ["sorted=False"])
            return self.emit(node, f"torch.topk({', '.join([a[0], a[1], self.fmt(dim)] + extra)})", "torch")
        if packet in ("split", "split_with_sizes", "unbind"):
            self.parts(node, range(len(node_val(node))))
            method = "unbind" if packet == "unbind" else "split"
            return self.emit(node, f"{a[0]}.{method}({', '.join(a[1:])})", "view")
        if op == "getitem" and isinstance(x, type(node)) and (x, node.args[1]) in self.names:
            self.names[node] = self.names[(x, node.args[1])]
            return
        if packet in VIEW_METHODS:
            method = VIEW_METHODS[packet]
            if method is None:
                self.names[node] = self.names[x]
                return
            return self.emit(node, f"{a[0]}.{method}({', '.join(a[1:])})", "view")
        if packet in ("slice",):
            dim, start, end = (list(node.args[1:]) + [0, None, None])[:3]
            oas = [(list(o.args[1:]) + [0, None, None])[:3] for o in self.pairs.get(node, [])]
            size = node_val(x).shape[dim if dim >= 0 else dim + node_val(x).dim()]
            end = size if end is None or end > size else end
            idx = ":, " * (dim % node_val(x).dim())
            lo = "" if start == 0 else self.fmt(start, [o[1] for o in oas])
            hi = "" if end == size else self.fmt(end, [o[2] for o in oas])
            return self.emit(node, f"{a[0]}[{idx}{lo}:{hi}]", "view")
        if packet == "select":
            idx = ":, " * (node.args[1] % node_val(x).dim())
            return self.emit(node, f"{a[0]}[{idx}{a[2]}]", "view")
        if packet in ("clone", "contiguous"):
            return self.emit(node, f"{a[0]}.contiguous()", "torch")
        if packet in ("_to_copy", "to"):
            dtype = kw.get("dtype")
            if dtype is None:
                return self.emit(node, f"{a[0]}.contiguous()", "torch")
            return self.emit(node, f"{a[0]}.to({self.fmt(dtype)})", "torch")
        if packet in OPERATORS:
            if kw.get("alpha", 1) != 1 or kw.get("rounding_mode"):
                self._unplaced(node, op)
            return self.emit(node, f"{a[0]} {OPERATORS[packet]} {a[1]}", "torch")
        if packet == "reciprocal":
            return self.emit(node, f"1.0 / {a[0]}", "torch")
        if packet == "rsub":
            return self.emit(node, f"{a[1]} - {a[0]}", "torch")
        if packet == "gelu" and kw.get("approximate", "none") == "none":
            return self.emit(node, f"F.gelu({a[0]})", "torch")
        if packet == "gelu" and kw.get("approximate") == "tanh":  # a pipeline has no strings: torch's formula
            x3 = f"{a[0]} * {a[0]} * {a[0]}"
            return self.emit(node, f"0.5 * {a[0]} * (1.0 + torch.tanh(0.7978845608028654 * ({a[0]} + 0.044715 * "
                                   f"{x3})))", "torch")
        if packet in ("_softmax", "_log_softmax"):
            fn = "torch.softmax" if packet == "_softmax" else "torch.log_softmax"
            return self.emit(node, f"{fn}({a[0]}, {a[1]})", "torch")
        if packet in ("mean", "sum", "amax", "amin") and len(node.args) >= 2:
            keep = ", keepdim=True" if (len(node.args) > 2 and node.args[2]) or kw.get("keepdim") else ""
            dtype = f", dtype={self.fmt(kw['dtype'])}" if kw.get("dtype") is not None else ""
            return self.emit(node, f"{FUNCTIONS[packet]}({a[0]}, {a[1]}{keep}{dtype})", "torch")
        if packet == "fill":  # the out-of-place fill of a functionalized `x[…] = v` (v a number or a constant)
            if isinstance(node.args[1], type(node)) and not NUMBER.fullmatch(a[1]):
                self._unplaced(node, op)  # filled with a tensor the reference computes
            return self.emit(node, f"torch.full_like({a[0]}, {a[1]})", "torch")
        if packet == "bitwise_not" and dtype_name(node_val(x).dtype) == "bool":  # `~mask` of a bool mask
            return self.emit(node, f"torch.logical_not({a[0]})", "torch")
        if packet == "masked_fill":
            return self.emit(node, f"{a[0]}.masked_fill({a[1]}, {a[2]})", "torch")
        if packet == "scatter" and len(node.args) == 4 and not kw:  # out of place: torch.scatter(x, dim, index, v)
            return self.emit(node, f"torch.scatter({', '.join(a)})", "torch")
        if packet == "index" and len(node.args) == 2:  # x[idx] (advanced indexing; None: a whole dim)
            idx = ", ".join(":" if i is None else self.fmt(i) for i in node.args[1])
            return self.emit(node, f"{a[0]}[{idx}]", "torch")
        if packet == "constant_pad_nd":  # aten's (x, pad, value) is F.pad's (x, pad, mode, value)
            value = f", value={a[2]}" if len(a) > 2 and a[2] not in ("0", "0.0") else ""
            return self.emit(node, f"F.pad({a[0]}, {a[1]}{value})", "torch")
        if packet == "convolution":  # (x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
            dims, groups = node_val(node.args[1]).dim() - 2, node.args[8]
            if node.args[6] or groups == 1 or dims not in (1, 2, 3):  # a dense one: a conv kernel where it can
                return conv_step(self, node)
            return self.emit(node, f"F.conv{dims}d({', '.join(a[:6])}, {a[8]})", "torch")
        if packet in ("arange", "full", "zeros", "ones"):  # factories: made on the inputs' device (device=, layout=,
            dtype = [f"dtype={self.fmt(kw['dtype'])}"] if kw.get("dtype") is not None else []  # pin_memory= dropped)
            if packet in ("zeros", "ones"):  # torch.zeros(shape) is torch.full(shape, 0)
                fill = "0" if packet == "zeros" else "1"
                return self.emit(node, f"torch.full({', '.join(a + [fill] + dtype)})", "torch")
            return self.emit(node, f"torch.{packet}({', '.join(a + dtype)})", "torch")
        if packet in ("zeros_like", "ones_like"):
            dtype = [f"dtype={self.fmt(kw['dtype'])}"] if kw.get("dtype") is not None else []
            return self.emit(node, f"torch.{packet}({', '.join(a + dtype)})", "torch")
        if routing_step(self, node, packet, a):
            return
        if packet in FUNCTIONS:
            extra = [f"{k}={self.fmt(v)}" for k, v in kw.items() if k not in ("memory_format",)]
            return self.emit(node, f"{FUNCTIONS[packet]}({', '.join(a + extra)})", "torch")
        self._unplaced(node, op)

    def _expert_loop(self, loop: ExpertLoop) -> None:
        ExpertLoopWriter(self, loop).run()

    def _unplaced(self, node, op: str, why: str = "init cannot place it"):
        line = ref_line(node, self.problem.id)
        where = f" (reference line {line})" if line else ""
        raise InitError(f"{self.problem.id}: no kernel family and no allowed torch step for aten.{op}{where}: {why}")

    # --- matmuls -------------------------------------------------------------------------------------

    def matmul(self, node, packet: str) -> None:
        bias = packet in ("addmm", "baddbmm")
        args = list(node.args)
        if bias:
            bias_node, args = args[0], args[1:]
            if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
                self._unplaced(node, packet)
        a, b = args[0], args[1]
        av, bv, dv = node_val(a), node_val(b), node_val(node)
        batched = packet in ("bmm", "baddbmm")
        m, k = av.shape[-2], av.shape[-1]
        n = bv.shape[-1]
        batch = av.shape[0] if batched else 1
        flops = 2 * m * n * k * batch
        self.total_flops += flops
        if k == 1 and not bias:  # an outer product (RoPE's inv_freq × positions): a broadcast multiply, exact
            return self.emit(node, f"{self.fmt(a)} * {self.fmt(b)}", "torch")
        if not batched and not bias and self._fp8(node, a, b, (m, n, k), flops):
            return
        dtype = UCUT_DTYPES.get(dtype_name(av.dtype))
        out = UCUT_DTYPES.get(dtype_name(dv.dtype))
        if dtype is None or out is None or dtype_name(bv.dtype) != dtype_name(av.dtype) or dtype.startswith("f8"):
            return self._torch_matmul(node, packet)
        if bias and (node_val(bias_node).dim() != 1 or node_val(bias_node).dtype != dv.dtype):
            return self._torch_matmul(node, packet)
        # b read through .t() / .permute(1, 0) of a contiguous [N, K] tensor: bind that tensor, D = A·Bᵀ
        src = b
        b_nk = False
        if (not batched and getattr(b, "op", None) == "call_function"
                and getattr(b.target.overloadpacket, "__name__", "") in ("t", "permute", "transpose")
                and node_val(b.args[0]).is_contiguous()):
            src, b_nk = b.args[0], True
        elif batched and getattr(b, "op", None) == "call_function" and \
                getattr(b.target.overloadpacket, "__name__", "") == "transpose" and \
                sorted(d % 3 for d in b.args[1:3]) == [1, 2] and node_val(b.args[0]).is_contiguous():
            src, b_nk = b.args[0], True
        transpose_b = dtype == "f32" and not b_nk  # tf32 needs both operands K-major (sm90.tf32-k-major)
        b_nk = b_nk or transpose_b
        pad = n_pad(self, node, n, out) if not transpose_b else None
        plain = not transpose_b and pad is None and out in ("bf16", "f16")
        residual = find_residual(self, node) if plain and not batched else None
        act = activation_after(node, list(self.cap.graph.graph.nodes)) if plain and residual is None else None
        found = self._kernel(KernelSpec("", batched, dtype, out, b_nk, bias, residual=residual[3] if residual else "",
                                        activation=act[0].op if act else ""), (m, n, k))

        def operand(x):
            text = self.fmt(x)
            return text if node_val(x).is_contiguous() else f"{text}.contiguous()"

        call = [operand(a), f"{self.fmt(src)}.transpose(-2, -1).contiguous()" if transpose_b else operand(src)]
        kpad = k_pad(self, node, k, dtype)
        if kpad:  # K rows not 16-byte aligned on some workload (L1_083's seq_kv = 77): zeros added to K, sum unchanged
            b_zeros = f"[0, {kpad}]" if b_nk else f"[0, 0, 0, {kpad}]"
            call = [f"F.pad({call[0]}, [0, {kpad}])", f"F.pad({call[1]}, {b_zeros})"]
        if residual is not None and residual[3] == "bias":  # `mm (.view) + b`: b is the epilogue's bias vector
            add, view, other, _ = residual
            call.append(f"bias={self.known(other)}")
            self.fused[add] = view if view is not None else node
        elif residual is not None:  # `mm (.view) + r` (or * r): r is the epilogue's c, d = cast(acc, out) + c
            add, view, other, _ = residual
            text = self.known(other)
            call.append(text if node_val(other).dim() == 2 else
                        f"{text}.reshape([-1, {self.fmt(n, [node_val(o).shape[-1] for o in self.pairs.get(node, [])])}])")
            self.fused[add] = view if view is not None else node
        if act is not None:  # the activation's ops are the kernel's epilogue: their result is the call's (view)
            for fused in act[0].region:
                self.fused[fused] = act[1]
        if bias:
            call.append(f"bias={self.fmt(bias_node)}")
        self.kernel_flops += flops
        if pad is None:
            return self.emit(node, f"{found.name}({', '.join(call)})", "kernel")
        # N rows of d not 16-byte aligned (a [M, 1] gate logit, L1_047's [S, S] scores at odd S): b (and bias)
        # padded with zero rows, d sliced back
        zeros, rows, n_text = pad
        found.shapes[-1] = (m, n + rows, k)
        line = ref_line(node, self.problem.id)
        padded = self.fresh(f"{node.name}_b", reserve=True)
        self.steps.append(Step(padded, f"F.pad({call[1]}, {f'[0, 0, 0, {zeros}]' if b_nk else f'[0, {zeros}]'})",
                               "torch", line))
        call[1] = padded
        if bias:
            padded_bias = self.fresh(f"{node.name}_bias", reserve=True)
            self.steps.append(Step(padded_bias, f"F.pad({self.fmt(bias_node)}, [0, {zeros}])", "torch", line))
            call[-1] = f"bias={padded_bias}"
        full = self.fresh(f"{node.name}_full", reserve=True)
        self.steps.append(Step(full, f"{found.name}({', '.join(call)})", "kernel", line))
        self.emit(node, f"{full}[{':, ' * (dv.dim() - 1)}:{n_text}]", "view")

    def known(self, node) -> str | None:
        """The name a node's value has already, or None: its step's, or (a node an earlier kernel's epilogue
        computes, visited later in graph order) that kernel call's."""
        if node in self.names:
            return self.names[node]
        return self.names.get(self.fused.get(node))

    def _kernel(self, spec: KernelSpec, shape: tuple) -> KernelSpec:
        """The declared kernel with ``spec``'s key (declared now if new), with ``shape`` (M, N, K) added."""
        found = next((kk for kk in self.kernels if kk.key() == spec.key()), None)
        if found is None:
            kind = "grouped" if spec.grouped else "conv" if spec.conv else "bmm" if spec.batched else "gemm"
            spec.name = f"{kind}{len(self.kernels)}"
            self.kernels.append(spec)
            found = spec
        found.shapes.append(shape)
        return found

    def _fp8(self, node, a, b, shape: tuple, flops: int) -> bool:
        from .fp8 import write_scaled_call

        return write_scaled_call(self, node, a, b, shape, flops)

    def _torch_matmul(self, node, packet: str) -> None:
        """A matmul no kernel family computes in its dtypes: left to torch (its FLOPs stay outside kernels)."""
        a, b = node_val(node.args[-2]), node_val(node.args[-1])
        line = ref_line(node, self.problem.id)
        where = f" (reference line {line})" if line else ""
        raise InitError(f"{self.problem.id}: aten.{packet}{where} multiplies {dtype_name(a.dtype)} by "
                        f"{dtype_name(b.dtype)} into {dtype_name(node_val(node).dtype)}: no kernel family has that "
                        "precision, and a matmul is not an allowed torch step")

