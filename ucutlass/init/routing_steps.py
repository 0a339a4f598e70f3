"""Torch steps for the routing ops of a MoE reference (issue 17: L2_012's capacity-limited dispatch): a stable
sort, comparisons, the accumulating ``index_put`` :mod:`.masked` writes for rows a boolean mask kept,
``index_add``, ``repeat_interleave`` with an output size (:mod:`.segment_loops`), ``F.group_norm`` (an aten
``native_group_norm`` whose mean and rstd nobody reads: L2_078), and the functionalized
``starts[1:] = counts[:-1].cumsum(0)`` (a ``copy`` into a ``slice_scatter`` whose end is 2^63 - 1, "to the end").
"""

from __future__ import annotations

#: aten comparison → the allow-listed torch function (:data:`ucutlass.ir.torch_ops.TORCH_FUNCTIONS`).
COMPARISONS = {"lt": "torch.lt", "le": "torch.le", "gt": "torch.gt", "ge": "torch.ge", "eq": "torch.eq",
               "ne": "torch.ne"}


def routing_step(tr, node, packet: str, a: list[str]) -> bool:
    """Write ``node`` as a torch step of ``tr`` (a :class:`~.partition.Translator`) where it is one of these ops;
    False where it is not (the caller goes on)."""
    if packet in COMPARISONS:
        tr.emit(node, f"{COMPARISONS[packet]}({a[0]}, {a[1]})", "torch")
        return True
    if packet == "sort":  # aten.sort.stable(x, *, stable, dim=-1, descending=False) → (values, indices)
        kw = node.kwargs
        dim = node.args[1] if len(node.args) > 1 and not isinstance(node.args[1], bool) else kw.get("dim", -1)
        descending = kw.get("descending", node.args[2] if len(node.args) > 2 else False)
        tr.parts(node, ("values", "indices"))
        extra = (["descending=True"] if descending else []) + (["stable=True"] if kw.get("stable") else [])
        tr.emit(node, f"torch.sort({', '.join([a[0], f'dim={tr.fmt(dim)}'] + extra)})", "torch")
        return True
    if packet == "index_put" and len(node.args) >= 3:  # out of place: torch.index_put(x, [i, j], v, accumulate)
        idx = "[" + ", ".join("None" if i is None else tr.fmt(i) for i in node.args[1]) + "]"
        accumulate = bool(node.args[3]) if len(node.args) > 3 else bool(node.kwargs.get("accumulate", False))
        tr.emit(node, f"torch.index_put({a[0]}, {idx}, {a[2]}, {accumulate})", "torch")
        return True
    if packet == "slice_scatter" and len(node.args) >= 5 and not node.kwargs:  # `x[1:] = y`: an end of 2^63 - 1
        from .steps import node_val

        x, dim = node_val(node.args[0]), node.args[2]
        if isinstance(node.args[4], int) and node.args[4] >= x.shape[dim]:  # … is the dim's end: left out
            step = [] if len(a) <= 5 or a[5] == "1" else ["None", a[5]]  # (x, src, dim, start, end, step)
            tr.emit(node, f"torch.slice_scatter({', '.join(a[:4] + step)})", "torch")
            return True
        return False
    if packet == "repeat_interleave" and len(node.args) == 1 and set(node.kwargs) <= {"output_size"}:
        # a segment loop's row → piece map (init/segment_loops.py): its size written from the axes like a view's,
        # as the output's rows times the rows in each where the fold says so (``segment_rows``)
        size = node.kwargs.get("output_size")
        hint = (node.meta.get("custom") or {}).get("segment_rows")
        others = [o.kwargs.get("output_size") for o in tr.pairs.get(node, [])]
        if hint and size is not None:
            rows = [(o.meta.get("custom") or {}).get("segment_rows", [None])[0] for o in tr.pairs.get(node, [])]
            size = tr.fmt(hint[0], rows) + (f" * {hint[1]}" if hint[1] != 1 else "")
        elif size is not None:
            size = tr.fmt(size, others)
        extra = [f"output_size={size}"] if size is not None else []
        tr.emit(node, f"torch.repeat_interleave({', '.join(a + extra)})", "torch")
        return True
    if packet == "native_group_norm" and len(node.args) == 8:  # (x, w, b, N, C, HxW, groups, eps) → (y, mean, rstd)
        if any(u.args[1] != 0 and u.users for u in node.users):  # its mean or rstd read: F.group_norm gives neither
            return False
        for i in range(3):  # mean and rstd: unread parts, named only so that their getitems resolve
            tr.names[(node, i)] = tr.names[node]
        tr.emit(node, f"F.group_norm({a[0]}, {a[6]}, {a[1]}, {a[2]}, {a[7]})", "torch")
        return True
    if packet == "index_add" and len(node.args) == 4 and node.kwargs.get("alpha", 1) == 1:
        tr.emit(node, f"torch.index_add({', '.join(a)})", "torch")
        return True
    if packet == "copy" and len(node.args) == 2:  # functionalized `x[1:] = y`: y, cast and broadcast to x's slot
        from .steps import node_val

        dst, src = node_val(node.args[0]), node_val(node.args[1])
        expr = a[1] if dst.dtype == src.dtype else f"{a[1]}.to({tr.fmt(dst.dtype)})"
        if tuple(dst.shape) != tuple(src.shape):  # the slot's shape, written from the axes like a view's
            others = [list(node_val(o.args[0]).shape) for o in tr.pairs.get(node, [])]
            expr = f"{expr}.expand({tr.fmt(list(dst.shape), others)})"
        tr.emit(node, expr if expr != a[1] else f"{a[1]}.contiguous()", "torch")
        return True
    return False
