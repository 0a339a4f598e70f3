"""A per-expert loop of a captured reference as grouped GEMMs (issue 17: MoE references).

MoE references loop over experts in Python::

    expert_mask = F.one_hot(expert_ids, num_classes=E).permute(2, 1, 0)
    for e in range(E):
        idx, top_x = torch.where(expert_mask[e])          # the (slot, token) pairs routed to expert e
        if top_x.numel() == 0: continue
        y = down(silu(gate(x[top_x])) * up(x[top_x]))     # mm with W[e].t()
        out.index_add_(0, top_x, y * w[top_x, idx, None])

Their rows depend on the routing's values, so a fake-tensor capture fails; :func:`~.capture.capture` traces them
again with :data:`~.capture.LOOP_ROWS` rows per ``nonzero`` (every expert's body once, with static shapes). This
module proves what that graph computes and writes it as one pass over all (token, slot) pairs, sorted by expert:

* the mask is a one-hot of a routing tensor ``R`` (``eq(R[..., None], arange(E))``, permuted so that experts lead):
  each element of ``R`` is one pair and the pairs of expert ``e`` are the elements equal to ``e``. A stable argsort of
  ``R.flatten()`` lists them expert by expert; a pair's coordinates in ``R`` are its flat index unravelled, and the
  loop's coordinate column ``j`` is the one of ``R``'s dim ``perm[j + 1]``;
* ``mm(rows, W[e].t())`` over expert ``e``'s rows is one grouped GEMM of the sorted rows (``b : [G, N, K]``, the
  stacked ``W``, ``m_sizes`` the pairs per expert: a ``scatter_add`` of ones, so nothing syncs with the host);
* the body's other ops are row-wise (gathers by a pair's coordinates, elementwise ops, a last-dim ``unsqueeze``):
  the same op on all pairs at once;
* ``index_add`` into the accumulator carried from one expert to the next is one ``index_add`` of all pairs (sums
  in the same order: expert by expert for each token); ``y[rows] = v`` (an ``index_put``) is one ``index_copy``
  (each pair's row is written once).

The rows of expert ``e`` may also be ``ids == e`` (``x[ids == e]``, ``if (ids == e).any():``): the same, with ``R``
= ``ids`` and its own dims as the columns.

Anything else in the loop is refused by name (an :class:`~.capture.InitError`), never guessed; and ``init``'s
emulated grade checks the program against the reference on the problem's data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .capture import LOOP_ROWS, InitError
from .epilogues import find_activation
from .steps import TORCH_CONSTANTS, UCUT_DTYPES, KernelSpec, Step, dtype_name, node_val, packet, ref_line
from .symbols import values_on_workloads

#: Ops a loop body may hold besides gathers, mms, the carried index_add and the views below: row-wise math.
ROWWISE = {"silu", "gelu", "relu", "sigmoid", "tanh", "exp", "neg", "add", "sub", "mul", "div", "_to_copy", "abs",
           "rsqrt", "sqrt", "erf", "maximum", "minimum", "clamp", "pow", "square", "where", "log", "softplus"}


@dataclass
class ExpertLoop:
    """One per-expert loop found in a capture's node list.

    Attributes:
        experts: E, the iterations (one per expert); ``length``: nodes per iteration; ``start``: the index of the
            first iteration's first node (its mask: ``select(mask, 0, 0)`` or ``eq(ids, 0)``).
        body: the first iteration's nodes (the template every iteration repeats).
        region: every node of every iteration (translated once, as the body on all pairs).
        routing: ``R``, the tensor whose one-hot (or ``== e``) is the mask; ``columns``: for each column of a ``nonzero`` row,
            the dim of ``R`` it indexes.
        carried: the body's ``index_add`` (or ``index_put``: ``y[rows] = …``) into the accumulator carried from the
            expert before;
            ``init``: the accumulator before the loop; ``end``: the last iteration's ``index_add`` (what follows
            the loop reads); ``anchors``: the body's ``nonzero`` nodes (its rows); ``dead``: the one-hot mask's
            nodes (not written); ``invariant``: body nodes that depend on nothing of the expert (written once).
    """

    experts: int
    length: int
    start: int
    body: list
    region: set
    routing: Any
    columns: list[int]
    carried: Any
    init: Any
    end: Any
    anchors: set = field(default_factory=set)
    dead: set = field(default_factory=set)
    invariant: set = field(default_factory=set)


def find_expert_loop(nodes: list, problem_id: str) -> ExpertLoop | None:
    """The per-expert loop of a loop capture (``nonzero_static`` nodes of :data:`LOOP_ROWS` rows), or None when
    the graph has none. Expert ``e``'s rows come from ``mask[e]`` of a one-hot mask with experts first, or from
    ``ids == e`` (``x[ids == e]``, ``y[ids == e] = …``).

    Raises:
        InitError: the graph has such nodes but not a loop this module can prove (the message says which part).
    """
    anchors = [n for n in nodes if n.op == "call_function" and packet(n) == "nonzero_static"
               and n.kwargs.get("size", n.args[1] if len(n.args) > 1 else None) == LOOP_ROWS]
    if not anchors:
        return None

    line = ref_line(anchors[0], problem_id)

    def refuse(why: str):
        where = f" (reference line {line})" if line else ""
        raise InitError(f"{problem_id}: data-dependent shapes{where} (torch.where / nonzero: rows that depend on the "
                        "reference's values): init writes a per-expert loop over a one-hot routing mask (or ids == e) "
                        f"as grouped GEMMs, and this is not one: {why}. If it is a MoE dispatch, write it by hand: a "
                        "pipeline that sorts the rows by expert and calls grouped_gemm kernels "
                        "(examples/pipeline_moe_experts.ucut)")

    masks = list(dict.fromkeys(n.args[0] for n in anchors))  # expert e's mask, in order
    first = masks[0]
    if packet(first) == "select" and first.args[1:] == (0, 0):  # mask[e] of F.one_hot(ids, E).permute(…)
        mask = first.args[0]
        routing, perm = _one_hot_source(mask)
        if routing is None:
            refuse("its mask is not a one-hot of a routing tensor (F.one_hot(ids, E).permute(…) with experts first)")
        columns = [perm[j + 1] for j in range(node_val(anchors[0]).shape[1])]
        experts = node_val(mask).shape[0]
        expected = [(mask, 0, e) for e in range(experts)]
        chain = [mask, mask.args[0]] + ([mask.args[0].args[0]] if packet(mask.args[0]) == "_to_copy" else [])
        chain += list(chain[-1].args)  # eq's unsqueeze(R, -1) and arange(E)
    elif packet(first) == "eq" and first.args[1:] == (0,) and isinstance(first.args[0], type(first)):  # ids == e
        routing = first.args[0]
        columns = list(range(node_val(routing).dim()))
        experts = len(masks)
        expected = [(routing, e) for e in range(experts)]
        chain = []
    else:
        refuse("its rows are not those of expert 0 (mask[0] of a one-hot mask with experts first, or ids == 0)")
    if len(masks) != experts or [tuple(m.args) for m in masks] != expected:
        refuse(f"{len(masks)} masks for {experts} experts, not mask[e] (or ids == e) for e = 0, 1, … in turn")
    index = {n: i for i, n in enumerate(nodes)}
    start = index[first]
    length = index[masks[1]] - start if experts > 1 else None
    if length is None:
        refuse("one expert only")
    body = nodes[start:start + length]
    for e in range(experts):  # every iteration repeats the template, with e for 0
        it = nodes[start + e * length:start + (e + 1) * length]
        if len(it) != length or it[0] is not masks[e] or any(
                a.op != b.op or (a.target != b.target and a.op != "get_attr") for a, b in zip(it, body)):
            refuse(f"expert {e}'s ops differ from expert 0's (a branch on the expert or on its rows)")
    region = set(nodes[start:start + experts * length])
    # the carried accumulator: the body's one node that the next iteration reads
    nxt = nodes[start + length:start + 2 * length]
    carried_src = {a for n in nxt for a in _flat_args(n) if isinstance(a, type(first)) and a in region
                   and index[a] < start + length}
    acc = next(iter(carried_src)) if len(carried_src) == 1 else None
    if acc is None or packet(acc) not in ("index_add", "index_put"):
        refuse("the iterations pass on something else than one index_add / index_put accumulator")
    if packet(acc) == "index_add" and acc.args[1] != 0:
        refuse("the accumulator is not one index_add along dim 0")
    if packet(acc) == "index_put" and (len(acc.args[1]) != 1 or (len(acc.args) > 3 and acc.args[3])):
        refuse("the accumulator is not y[rows] = … along dim 0")
    init = acc.args[0]
    if init in region:
        refuse("the accumulator is made inside the loop")
    end = nodes[start + (experts - 1) * length + body.index(acc)]
    for n in region:  # only the last accumulator leaves the loop
        if n is not end and any(u not in region for u in n.users):
            refuse(f"{n.name} is used after the loop (only the accumulator may be)")
    dead: set = set()  # the one-hot mask, read only by the loop: not written at all
    for n in chain:
        if all(u in region or u in chain for u in n.users):
            dead.add(n)
    # a body node that depends on nothing of its expert (`routing_weights.unsqueeze(2)` written inside the loop)
    # is the same in every iteration: written once, as it is
    variant = {first, acc, *anchors}
    for n in body:
        if packet(n) == "select" and n.args[0] not in region and n.args[1] == 0:
            variant.add(n)
        elif any(a in variant for a in _flat_args(n)):
            variant.add(n)
    invariant = {n for n in body if n not in variant and n is not body[0] and not _junk(n)}
    loop = ExpertLoop(experts, length, start, body, region, routing, columns, acc, init, end,
                      anchors={n for n in body if n in set(anchors)}, dead=dead, invariant=invariant)
    _check_body(loop, problem_id, refuse)
    return loop


def _junk(node) -> bool:
    """A node that computes nothing the program uses: the host-side True of ``if (ids == e).any():`` (a constant
    lifted and detached by the capture)."""
    if node.op == "get_attr":
        return all(_junk(u) for u in node.users)
    return packet(node) in ("lift_fresh_copy", "detach_", "detach") and all(_junk(u) for u in node.users)


def _flat_args(node) -> list:
    out = []
    for a in (*node.args, *node.kwargs.values()):
        out.extend(a if isinstance(a, (list, tuple)) else [a])
    return out


def _one_hot_source(mask):
    """``(R, perm)`` when ``mask`` is ``permute(_to_copy(eq(unsqueeze(R, -1), arange(E))), perm)`` with
    ``perm[0]`` the class dim (F.one_hot decomposed, experts first), else ``(None, None)``."""
    if packet(mask) != "permute":
        return None, None
    perm = list(mask.args[1])
    x = mask.args[0]
    if packet(x) == "_to_copy":
        x = x.args[0]
    if packet(x) != "eq" or len(x.args) != 2:
        return None, None
    lhs, rhs = x.args
    if packet(lhs) != "unsqueeze" or lhs.args[1] not in (-1, node_val(lhs).dim() - 1) or packet(rhs) != "arange":
        return None, None
    routing = lhs.args[0]
    classes = node_val(routing).dim()
    if perm[0] != classes or sorted(perm) != list(range(classes + 1)):
        return None, None
    return routing, perm


def weight_source(node, loop: ExpertLoop):
    """``(W, transposed)`` when ``node`` is expert e's weight ``W[e]`` (read through ``.t()``, and an exact
    upcast ``.to(float32)`` of a 16-bit weight), else None."""
    transposed = False
    if packet(node) == "t":
        node, transposed = node.args[0], True
    if packet(node) == "_to_copy" and str(node.kwargs.get("dtype")) == "torch.float32":
        node = node.args[0]
    if packet(node) != "select" or node.args[1] != 0 or node.args[0] in loop.region:
        return None
    if node_val(node.args[0]).shape[0] != loop.experts:
        return None
    return node.args[0], transposed


def _check_body(loop: ExpertLoop, problem_id: str, refuse) -> None:
    """Refuse a body op that is not row-wise over the pairs (see the module docstring)."""
    for n in loop.body:
        if n is loop.body[0] or n in loop.anchors or n in loop.invariant or _junk(n):
            continue
        p = packet(n)
        if p in ("unbind",) and n.args[0] in loop.anchors and n.args[1] == 1:
            continue
        if p == "getitem" and packet(n.args[0]) == "unbind" and n.args[0].args[0] in loop.anchors:
            continue
        if p == "select" and n.args[0] not in loop.region and n.args[1] == 0:
            continue  # W[e]: checked where an mm reads it
        if p in ("t", "_to_copy") and weight_source(n, loop) is not None:
            continue  # W[e].t(), W[e].to(float32): read by an mm as its b
        if p == "mm":
            if weight_source(n.args[1], loop) is None:
                refuse(f"{n.name}: a matmul whose weight is not the expert's own W[e]")
            continue
        if p == "index" and (n.args[0] not in loop.region or n.args[0] in loop.invariant):
            continue  # a gather by the pairs' coordinates
        if n is loop.carried:
            continue
        if p == "unsqueeze" and n.args[1] not in (0, -node_val(n).dim()):
            continue
        if p in ROWWISE:
            if any(a == LOOP_ROWS for a in _flat_args(n) if isinstance(a, int) and not isinstance(a, bool)):
                refuse(f"{n.name} ({p}) names the per-expert row count")
            continue
        refuse(f"its body has aten.{p} ({n.name}), which init cannot write for all experts at once yet")


class ExpertLoopWriter:
    """Writes an :class:`ExpertLoop` as steps of a :class:`~.partition.Translator`: the pairs sorted by expert,
    their coordinates, the pairs per expert, then the body once over all pairs (see the module docstring)."""

    def __init__(self, tr: Any, loop: ExpertLoop):
        self.tr, self.loop = tr, loop
        self.line = ref_line(next(n for n in loop.body if n in loop.anchors), tr.problem.id)
        self.coords: dict[int, str] = {}

    def step(self, base: str, expr: str, kind: str = "torch", line: int | None = None) -> str:
        name = self.tr.fresh(base, reserve=True)
        self.tr.steps.append(Step(name, expr, kind, line or self.line))
        return name

    def run(self) -> None:
        tr, loop = self.tr, self.loop
        routing = loop.routing
        shape = tuple(node_val(routing).shape)
        if len(shape) not in (1, 2):
            raise InitError(f"{tr.problem.id}: the routing tensor of the expert loop has {len(shape)} dims (1 or 2: "
                            "tokens, or tokens x slots)")
        self.pairs = self.step("pairs", f"{tr.names[routing]}.flatten()", "view")  # one element per (token, slot)
        self.order = self.step("order", f"torch.argsort({self.pairs}, stable=True)")  # the pairs, expert by expert
        if len(shape) == 1:
            self.coords = {0: self.order}
        else:
            others = [node_val(o).shape[1] for o in tr.pairs.get(routing, [])]
            self.width = tr.fmt(shape[1], others)
            spec = tr.problem.inputs.get(tr.names[routing]) if routing.op == "placeholder" else None
            if spec is not None and spec.shape and not str(spec.shape[1]).isdigit():
                self.width = str(spec.shape[1])  # the input's own axis (num_experts_per_tok), not its value
        self.rows = 1
        for d in shape:
            self.rows *= d
        # the pairs on every workload: a per-row epilogue vector (w : bf16[M]) needs M 16-byte aligned on each
        dims = [tr.fmt(d, [node_val(o).shape[i] for o in tr.pairs.get(routing, [])]) for i, d in enumerate(shape)]
        self.rows_every = values_on_workloads(tr.problem, " * ".join(f"({d})" for d in dims))
        weights = [weight_source(n.args[1], loop) for n in loop.body if packet(n) == "mm"]
        first = tr.names[weights[0][0]]
        self.m_sizes = self.step("m_sizes", f"torch.zeros_like({first}[:, 0, 0], dtype=torch.int32).scatter_add("
                                            f"0, {self.pairs}, torch.ones_like({self.pairs}, dtype=torch.int32))")
        for node in loop.body:
            self.node(node)
        tr.names[loop.end] = tr.names[loop.carried]

    def coord(self, dim: int) -> str:
        """The name of the pairs' coordinate along the routing tensor's dim ``dim`` (written when first used)."""
        if dim not in self.coords:
            op = "//" if dim == 0 else "%"
            self.coords[dim] = self.step("token" if dim == 0 else "slot", f"{self.order} {op} {self.width}")
        return self.coords[dim]

    def node(self, node) -> None:
        tr, loop = self.tr, self.loop
        p = packet(node)
        if node in tr.names:  # written already: a routing weight a kernel's epilogue reads, or fused into one
            return
        if node is loop.body[0] or node in loop.anchors or _junk(node) or (p == "unbind" and node.args[0] in loop.anchors):
            return
        if p == "getitem" and packet(node.args[0]) == "unbind" and node.args[0].args[0] in loop.anchors:
            tr.names[node] = self.coord(loop.columns[node.args[1]])
            return
        if weight_source(node, loop) is not None:  # W[e], W[e].t(): the stacked W, read by a grouped kernel
            tr.names[node] = tr.names[weight_source(node, loop)[0]]
            return
        if p == "mm":
            return self.grouped(node)
        if node is loop.carried:  # one index_add (or index_copy: rows are disjoint) of every pair
            tr.names[node] = tr.fresh(node.name)
            if p == "index_add":
                idx, src = node.args[2], node.args[3]
                expr = f"torch.index_add({tr.names[loop.init]}, 0, {tr.names[idx]}, {tr.names[src]})"
            else:  # y[rows] = v: each pair's row once (nonzero rows are distinct, experts' rows disjoint)
                idx, src = node.args[1][0], node.args[2]
                expr = f"torch.index_copy({tr.names[loop.init]}, 0, {tr.names[idx]}, {tr.names[src]})"
            tr.emit(node, expr, "torch")
            return
        tr.names[node] = tr.fresh(node.name)
        tr.node(node)

    def grouped(self, node) -> None:
        tr = self.tr
        a, b = node.args[0], node.args[1]
        weight, transposed = weight_source(b, self.loop)
        wv, av, dv = node_val(weight), node_val(a), node_val(node)
        dtype, out = UCUT_DTYPES.get(dtype_name(wv.dtype)), UCUT_DTYPES.get(dtype_name(dv.dtype))
        if not transposed or dtype not in ("bf16", "f16") or out not in ("bf16", "f16", "f32"):
            raise InitError(f"{tr.problem.id}: the expert loop's {node.name} multiplies by W[e]"
                            f"{'' if transposed else ' (not W[e].t())'} in {dtype_name(wv.dtype)} into "
                            f"{dtype_name(dv.dtype)}: the grouped kernel takes b as [G, N, K] (W[e].t()) in bf16/f16")
        text = tr.names[a]
        if dtype_name(av.dtype) != dtype_name(wv.dtype):
            if packet(a) == "_to_copy" and dtype_name(node_val(a.args[0]).dtype) == dtype_name(wv.dtype):
                text = tr.names[a.args[0]]  # an exact upcast of a 16-bit operand: the kernel reads the original
            else:  # an f32 intermediate times a 16-bit weight: rounded to the weight's type for the kernel (the
                # reference multiplies in f32; the emulated check says whether the problem's tolerance holds)
                text = self.step(f"{node.name}_a", f"{text}.to({TORCH_CONSTANTS[dtype_name(wv.dtype)]})",
                                 line=ref_line(node, tr.problem.id))
        n, k = wv.shape[1], wv.shape[2]
        epilogue, extra, fused = self.epilogue(node, out)
        spec = tr._kernel(KernelSpec("", False, dtype, out, True, grouped=True, epilogue=epilogue), (self.rows, n, k))
        flops = 2 * self.rows * n * k
        tr.kernel_flops += flops
        tr.total_flops += flops
        tr.names[node] = tr.fresh((fused[-1] if fused else node).name)
        tr.emit(node, f"{spec.name}({', '.join([text, tr.names[weight], self.m_sizes] + extra)})", "kernel")
        for f in fused:  # computed by the kernel's epilogue: its result
            tr.names[f] = tr.names[node]

    def epilogue(self, node, out: str) -> tuple[str, list[str], list]:
        """What of the row-wise ops after a grouped ``mm`` its epilogue computes (one pass over D less each), as
        ``(epilogue text, extra call arguments, the nodes it computes)``: an activation (``silu(mm)``, or L2_013's
        ``mm / (1 + exp(-mm.float())).to(bf16)``: :func:`.epilogues.find_activation`) → ``d = cast(silu(cast(acc,
        OUT)), OUT)``; ``mm * w[pair].unsqueeze(-1)`` (a routing weight per row, of D's type) →
        ``w : OUT[M]   d = cast(acc, OUT) * w`` where the pairs M are a multiple of 8 on every workload (the vector's
        rows 16-byte aligned: L2_013's 3889 pairs are not, and its tuner found no legal kernel). Rounded as the
        reference: D to OUT first, then the op, rounded once more. Only for 16-bit D (an f32 D leaves them as torch
        steps)."""
        users = list(node.users)
        if out not in ("bf16", "f16"):
            return "", [], []
        act = find_activation(node, list(self.tr.cap.graph.graph.nodes))
        if act is not None and all(n in self.loop.region for n in act.region):  # silu, however it is spelled
            return act.epilogue(out), [], act.region
        if len(users) != 1:
            return "", [], []
        user = users[0]
        if packet(user) == "mul" and len(user.args) == 2 and all(isinstance(a, type(node)) for a in user.args):
            scale = user.args[1] if user.args[0] is node else user.args[0]
            sv = node_val(scale)
            aligned = self.rows_every is not None and all(r % 8 == 0 for r in self.rows_every)
            if packet(scale) == "unsqueeze" and scale.args[1] in (-1, 1) and sv.dim() == 2 and sv.shape[1] == 1 \
                    and UCUT_DTYPES.get(dtype_name(sv.dtype)) == out and scale.args[0] in self.loop.region \
                    and len(scale.users) == 1 and aligned:
                vector = scale.args[0]
                self.node(vector)  # the gather of each pair's weight, written before the call
                self.tr.names[scale] = self.tr.names[vector]
                return f"w : {out}[M]   d = cast(acc, {out}) * w", [self.tr.names[vector]], [user]
        return "", [], []

