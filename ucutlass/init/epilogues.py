"""What of the ops after a plain gemm its epilogue computes (issue 17): a residual add or a gated multiply
(:func:`find_residual`), an activation (:func:`activation_after`).

A reference often writes its activation as a chain of elementwise ops on the matmul's result (L1_048's tanh-GELU:
``x.float()``, ``pow(x, 3)``, ``* 0.044715``, ``+``, ``* sqrt(2/pi)``, ``tanh``, ``+ 1``, ``* 0.5``, ``* x``,
``.to(bf16)``: 11 torch steps, each a pass over D). Matching such chains op by op would need a pattern per
spelling, so the chain is recognised by what it computes instead: the region of elementwise ops that reads only
the matmul's result (and numbers) is a unary function f, evaluated on a probe of every magnitude from 2^-12 to
12 (both signs), and compared with each activation the epilogue language has (:data:`ucutlass.ir.UNARY_OPS`,
evaluated by the emulator's own :func:`ucutlass.emulate.epilogue.activation`). The first one that agrees to within
one unit in the last place of the result's dtype (plus :data:`ATOL`) is written ``d = cast(ACT(cast(acc, T)), T)``
(``acc + bias`` for an ``addmm``): the product rounded to D's type first, as the reference's matmul returns it.
Init's check (the emulated grade) still grades the whole program against the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from .steps import node_val, packet

#: aten ops a region may hold: elementwise, one output of the input's shape (no reductions, no views).
ELEMENTWISE = {"_to_copy", "to", "pow", "mul", "add", "sub", "div", "tanh", "sigmoid", "exp", "erf", "silu", "gelu",
               "relu", "neg", "rsqrt", "sqrt", "reciprocal", "clone", "abs", "clamp", "clamp_min", "maximum",
               "minimum", "square", "log1p", "expm1"}
#: The epilogue activations tried, most specific first (a tanh-GELU is also within a loose tolerance of GELU).
CANDIDATES = ("gelu_tanh", "gelu", "silu", "relu", "sigmoid", "tanh")
#: Absolute slack beside one ulp: where 1 + tanh(x) cancels (GELU at x < -4) two spellings of one formula differ by
#: ~1e-7; GELU and tanh-GELU differ by up to 5e-4 (at x = -2.7), so they stay apart.
ATOL = 2.0 ** -16


@dataclass
class Activation:
    """A region of the graph the epilogue computes.

    Attributes:
        op: the epilogue's activation (one of :data:`CANDIDATES`).
        region: the graph nodes it replaces, in graph order; the last is the value the rest of the graph reads.
    """

    op: str
    region: list

    def epilogue(self, out: str) -> str:
        """The epilogue statement for D of type ``out`` (``bf16``/``f16``)."""
        return f"d = cast({self.op}(cast(acc, {out})), {out})"


RESHAPES = ("view", "_unsafe_view", "reshape")


def find_residual(tr, node):
    """``(op node, view, r, op)`` when the matmul's one use is ``mm + r`` or ``mm * r`` (through one reshape of it:
    ``[B·S, N]`` back to ``[B, S, N]``) with ``r`` a tensor of the result's shape and dtype, contiguous, whose value
    ``tr`` (the :class:`~.partition.Translator`) already has: the op runs in the kernel's epilogue on ``c``, rounded
    as the reference (the product to D's type first). ``mm + b`` with ``b`` a vector of N (a Linear's bias added
    after a plain ``mm``) gives op ``"bias"``: ``d = cast(acc, T) + bias``, a row broadcast. ``mm * r`` is a gated MLP's ``up(x) * act(gate(x))`` (L1_048:
    the gate's activation computed by the gate kernel's epilogue). Else None."""
    users = list(node.users)
    if len(users) != 1:
        return None
    view, user = None, users[0]
    if packet(user) in RESHAPES and len(user.users) == 1:
        view, user = user, next(iter(user.users))
    mine = view if view is not None else node
    op = {"add": "+", "mul": "*"}.get(packet(user))
    if op is None or len(user.args) != 2 or user.kwargs.get("alpha", 1) != 1 or mine not in user.args:
        return None
    other = user.args[1] if user.args[0] is mine else user.args[0]
    if not hasattr(other, "meta") or other is mine or tr.known(other) is None:  # r made after the mm: no
        return None
    ov, uv = node_val(other), node_val(user)
    if ov is None or ov.dtype != node_val(node).dtype or uv.dtype != ov.dtype or not ov.is_contiguous():
        return None
    if op == "+" and ov.dim() == 1 and ov.shape[0] == uv.shape[-1] and tuple(uv.shape) == tuple(node_val(mine).shape) \
            and packet(node) == "mm":  # a bias added after the matmul (L1_050's `matmul(x, w.t()) + b`)
        return user, view, other, "bias"
    if tuple(ov.shape) != tuple(uv.shape):
        return None
    return user, view, other, op


def activation_after(node, nodes: list):
    """``(Activation, start)`` when the ops after the matmul ``node`` (or after its one reshape, ``start``) compute
    an activation the epilogue has (:func:`find_activation`); else None. ``nodes``: the graph's, in order."""
    users = list(node.users)
    start = users[0] if len(users) == 1 and packet(users[0]) in RESHAPES else node
    found = find_activation(start, nodes)
    return (found, start) if found is not None else None


def find_activation(start, nodes: list) -> Activation | None:
    """The activation the elementwise ops after ``start`` compute, or None.

    Args:
        start: the node the activation reads: the matmul, or its one reshape (``[B·S, N]`` back to ``[B, S, N]``);
            every use of it must lie in the region.
        nodes: the graph's nodes in order (the region is searched after ``start``).

    The region is every later node whose op is in :data:`ELEMENTWISE`, whose tensor arguments are ``start`` or
    region nodes, of ``start``'s shape. Its result is the latest region node such that the region up to it is closed
    (no node but the result is read outside it) and has ``start``'s dtype.
    """
    val = node_val(start)
    if val is None or not hasattr(val, "shape"):
        return None
    shape = tuple(val.shape)
    inside = {start}
    region = []
    for node in nodes[nodes.index(start) + 1:]:
        if packet(node) not in ELEMENTWISE:
            continue
        tensors = [a for a in _node_args(node)]
        if not tensors or any(a not in inside for a in tensors) or _has_tensor_constant(node):
            continue
        nv = node_val(node)
        if nv is None or tuple(getattr(nv, "shape", ())) != shape:
            continue
        inside.add(node)
        region.append(node)
    for end in reversed(range(len(region))):
        result = region[end]
        if node_val(result).dtype != val.dtype:
            continue
        chosen = _ancestors(result, set(region[:end + 1]))
        part = [n for n in region if n in chosen]
        if any(u not in chosen for u in start.users) or any(u not in chosen for n in part if n is not result
                                                              for u in n.users):
            continue
        op = identify(part, start)
        if op is not None:
            return Activation(op, part)
    return None


def identify(region: list, start) -> str | None:
    """Which activation (of :data:`CANDIDATES`) ``region`` computes of ``start``'s value, or None: the region run
    on a probe (real tensors, the graph's own aten ops) against each candidate rounded to the result's dtype."""
    import torch
    from torch.fx.node import map_arg

    from ..emulate.epilogue import activation

    dtype = node_val(start).dtype
    mags = torch.logspace(-12, 3.585, 2049, base=2.0)  # 2^-12 … 12: where GELU, SiLU and tanh differ
    probe = torch.cat([-mags.flip(0), torch.zeros(1), mags]).to(dtype)
    env = {start: probe}
    try:
        for node in region:
            args = map_arg(node.args, lambda a: env[a])
            kwargs = map_arg(node.kwargs, lambda a: env[a])
            env[node] = node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - an op the probe cannot run: not an activation we can name
        return None
    got = env[region[-1]].float()
    ulp = torch.finfo(env[region[-1]].dtype).eps
    for op in CANDIDATES:
        want = activation(op, probe.float()).to(env[region[-1]].dtype).float()
        if bool(((got - want).abs() <= ulp * want.abs() + ATOL).all()):
            return op
    return None


def _node_args(node) -> list:
    import torch

    found = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda a: found.append(a))
    return found


def _has_tensor_constant(node) -> bool:
    """An argument that is a tensor but no graph node (a captured constant): the probe cannot size it."""
    import torch

    return any(isinstance(a, torch.Tensor) for a in (*node.args, *node.kwargs.values()))


def _ancestors(result, allowed: set) -> set:
    """``result`` and every node of ``allowed`` it reads, directly or not."""
    seen, todo = {result}, [result]
    while todo:
        for a in _node_args(todo.pop()):
            if a in allowed and a not in seen:
                seen.add(a)
                todo.append(a)
    return seen
