"""A Python loop over a tensor's leading axis, written as one batched computation (issue 17: L2_045).

References write rows of an output one batch element at a time::

    out = emb.clone()
    for b in range(batch_size):
        out[b].index_copy_(0, positions[b], audio[b, :n])

A capture unrolls the loop: ``batch_size`` copies of the body, so the graph's ops change with the workload and no
program written at one workload is right at another. Functionalized, the loop is a chain of ``select_scatter``::

    c0 = select_scatter(A,  body(select(A, 0, 0),  select(X, 0, 0), …), 0, 0)
    c1 = select_scatter(c0, body(select(c0, 0, 1), select(X, 0, 1), …), 0, 1)   … up to B - 1 = A.shape[0] - 1

:func:`fold_batch_loops` finds such a chain where every row of ``A`` is written once, in order, by the same body
(the same ops; it reads row ``b`` of the accumulator and of loop-invariant tensors ``X``, and any tensor whole),
and traces the graph again with the chain replaced by ``torch.func.vmap`` of the first body over the rows: the
batched ops torch's own batching rules give (``index_copy`` of a row becomes one ``scatter`` on dim 1). Row ``b``
of the result is the body on row ``b``, which is what the chain left in row ``b``. Anything else is left as it
was (and ``init`` then says the graph changes with the workload).

``torch.stack([f(x[b]) for b in range(x.shape[0])])`` is the same loop with its rows stacked: a ``stack`` on dim 0
whose values are iterations over every row of their sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BatchLoop:
    """One unrolled loop over the rows of ``base``.

    Attributes:
        chain: the ``select_scatter`` nodes, row 0 first; ``base``: the tensor whose rows they write (``A``); for
            a ``stack``: [the stack node] and None.
        body: the first iteration's nodes in graph order (its result is ``value``).
        rows: the first iteration's ``select(T, 0, 0)`` leaves → ``T`` (``base`` for the accumulator's row).
        region: every node of every iteration and the chain (replaced by the batched computation).
        value: the first iteration's result (row 0 of the loop's result).
    """

    chain: list
    base: Any
    body: list
    rows: dict
    region: set = field(default_factory=set)
    value: Any = None


def _is(node, name: str) -> bool:
    import torch

    return isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        getattr(getattr(node.target, "overloadpacket", None), "__name__", "") == name


def _inputs(n) -> list:
    import torch

    flat = [*n.args, *n.kwargs.values()]
    flat += [x for a in flat if isinstance(a, (list, tuple)) for x in a]
    return [a for a in flat if isinstance(a, torch.fx.Node)]


def _iteration(value, index: int, chain: list, base) -> tuple[list, dict] | None:
    """The nodes that compute ``value`` in iteration ``index`` (those that depend on a row of it), stopping at its
    ``select(T, 0, index)`` leaves: T the accumulator before this iteration, or a tensor computed outside the loop.
    Returns (nodes in graph order, leaf → the tensor it is a row of, ``base`` standing for the accumulator), or
    None where the iteration reads the accumulator other than by its row."""
    acc = chain[index - 1] if index and chain else base
    variant: dict = {}
    rows: dict = {}
    for n in value.graph.nodes:  # topological order: a node's inputs come first
        if n.op != "call_function":
            variant[n] = False
        elif _is(n, "select") and n.args[1] == 0 and n.args[2] == index and (
                n.args[0] is acc or not variant.get(n.args[0], False)) and n.args[0] not in chain[index:]:
            rows[n] = base if n.args[0] is acc else n.args[0]
            variant[n] = True
        else:
            variant[n] = any(variant.get(a, False) for a in _inputs(n))
        if n is value:
            break
    nodes, todo, seen = [], [value], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in rows:
            continue
        if n is acc or n in chain:
            return None  # the accumulator read whole
        if not variant.get(n, False):
            continue  # loop-invariant: computed once, outside
        nodes.append(n)
        todo.extend(_inputs(n))
    order = {n: i for i, n in enumerate(value.graph.nodes)}
    return sorted(nodes, key=order.__getitem__), {n: t for n, t in rows.items() if n in seen}


def _key(node, memo: dict | None = None):
    """What a loop-invariant node computes, as a hashable tree (``w.t()`` written in each iteration is one value):
    a placeholder or a tensor constant by identity, an op by its target and arguments."""
    import torch

    memo = {} if memo is None else memo
    if node in memo:
        return memo[node]

    def arg(x):
        if isinstance(x, torch.fx.Node):
            return _key(x, memo)
        if isinstance(x, (list, tuple)):
            return tuple(arg(y) for y in x)
        return ("const", repr(x))

    key = ("node", id(node)) if node.op != "call_function" else \
        (str(node.target), arg(node.args), arg(tuple(sorted(node.kwargs.items()))))
    memo[node] = key
    return key


def _same(a: list, b: list, rows_a: dict, rows_b: dict) -> bool:
    """Whether two iterations are the same ops on the same tensors (rows of the same sources)."""
    import torch

    pos_a = {n: ("n", i) for i, n in enumerate(a)} | {n: ("row", _key(t)) for n, t in rows_a.items()}
    pos_b = {n: ("n", i) for i, n in enumerate(b)} | {n: ("row", _key(t)) for n, t in rows_b.items()}

    def arg(x, pos):
        if isinstance(x, torch.fx.Node):
            return pos[x] if x in pos else ("outer", _key(x))
        if isinstance(x, (list, tuple)):
            return tuple(arg(y, pos) for y in x)
        return ("const", repr(x))

    return len(a) == len(b) and all(
        m.target == n.target and arg(m.args, pos_a) == arg(n.args, pos_b) and
        arg(tuple(sorted(m.kwargs.items())), pos_a) == arg(tuple(sorted(n.kwargs.items())), pos_b)
        for m, n in zip(a, b))


def _rows(node) -> int | None:
    try:
        return node.meta["val"].shape[0]
    except (KeyError, AttributeError, IndexError, TypeError):
        return None


def _loop(values: list, chain: list, base, end) -> BatchLoop | None:
    """The loop whose iteration ``b`` computes ``values[b]`` (rows of ``base`` written by ``chain``, or stacked by
    ``end``), if every iteration is the first one's ops on row ``b`` of tensors with exactly ``len(values)`` rows
    and no iteration's value is read after the loop; else None."""
    its = [_iteration(v, i, chain, base) for i, v in enumerate(values)]
    if any(it is None for it in its) or not its[0][1] or \
            not all(_same(its[0][0], it[0], its[0][1], it[1]) for it in its[1:]):
        return None  # (no row read: the same value each time, not a loop over rows)
    if any(_rows(t) != len(values) for t in its[0][1].values()):
        return None  # a row of a longer tensor: not a loop over all of its rows
    region = {*chain, end} | {n for it in its for n in (*it[0], *it[1])}
    if any(u not in region and u.users for n in region - {end} for u in n.users):  # (a dead `select` is no read)
        return None  # an iteration's value is read after the loop
    return BatchLoop([*chain] or [end], base, its[0][0], its[0][1], region, values[0])


def find_batch_loops(graph) -> list[BatchLoop]:
    """The unrolled loops over a leading axis in ``graph`` (an fx Graph): a ``select_scatter`` chain over every
    row of a tensor, or a ``stack`` on dim 0 (``torch.stack([f(x[b]) for b in range(x.shape[0])])``)."""
    loops = []
    for first in graph.nodes:
        if _is(first, "stack") and (first.args[1:] or (0,))[0] == 0 and len(first.args[0]) >= 1:
            found = _loop(list(first.args[0]), [], None, first)
        elif _is(first, "select_scatter") and first.args[2:] == (0, 0) and not _is(first.args[0], "select_scatter"):
            chain, node, total = [first], first, _rows(first.args[0])
            while total is not None and len(chain) < total:
                nxt = [u for u in node.users if _is(u, "select_scatter") and u.args[0] is node]
                if len(nxt) != 1 or nxt[0].args[2:] != (0, len(chain)):
                    break
                chain.append(node := nxt[0])
            found = _loop([c.args[1] for c in chain], chain, first.args[0], chain[-1]) if len(chain) == total \
                else None
        else:
            continue
        if found is not None:
            loops.append(found)
    return loops


def fold_batch_loops(gm, fakes: list):
    """``gm`` traced again with each :func:`find_batch_loops` loop as one ``vmap`` of its body (``fakes``: the
    graph's fake inputs; node metadata, the reference's line included, carried over). ``gm`` itself where there
    is none."""
    import torch
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    if not find_batch_loops(gm.graph):
        return gm
    gm.graph.eliminate_dead_code()  # the unrolled loop's dead `select`s of the accumulator
    gm.recompile()
    loops = find_batch_loops(gm.graph)
    ends = {loop.chain[-1]: loop for loop in loops}
    skipped = set().union(*(loop.region for loop in loops)) - set(ends)

    class Fold(torch.fx.Interpreter):
        def run_node(self, n):
            if n in skipped:
                return None
            if n in ends:
                with self._set_current_node(n):
                    return _batched(ends[n], self.env)
            return super().run_node(n)

    def run(*tensors):
        return Fold(gm, garbage_collect_values=False).run(*tensors)

    with torch.no_grad(), fx_traceback.preserve_node_meta():
        folded = make_fx(run, tracing_mode="fake")(*fakes)
    folded.graph.eliminate_dead_code()  # what iterations after the first computed outside the loop (their `w.t()`)
    folded.recompile()
    return folded


def _batched(loop: BatchLoop, env: dict):
    """``torch.func.vmap`` of the loop's first iteration over the rows of its sources (``env``: node → value)."""
    import torch

    leaves = list(loop.rows)
    sources = [env[loop.rows[leaf]] for leaf in leaves]

    def body(*row_values):
        local = dict(zip(leaves, row_values))

        def val(x):
            if isinstance(x, torch.fx.Node):
                return local[x] if x in local else env[x]
            if isinstance(x, (list, tuple)):
                return type(x)(val(y) for y in x)
            return x

        for n in loop.body:
            local[n] = n.target(*val(n.args), **{k: val(v) for k, v in n.kwargs.items()})
        return local[loop.value]

    return torch.func.vmap(body)(*sources)
