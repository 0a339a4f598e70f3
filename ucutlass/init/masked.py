"""Rows a boolean mask keeps, written with static shapes (issue 17: L2_012's capacity-limited MoE).

A capacity-limited MoE keeps the (token, expert) pairs whose place within their expert is below the capacity::

    counts = torch.bincount(sorted_experts, minlength=E)          # pairs per expert
    valid = within_pos < capacity
    v_exp, v_pos, v_tok = sorted_experts[valid], within_pos[valid], token_ids[valid]
    expert_inputs = torch.zeros(E, capacity, H)
    expert_inputs[v_exp, v_pos] = x[v_tok]                         # a padded batch per expert: bmm
    out.index_add_(0, v_tok, w[valid, None] * expert_outputs[v_exp, v_pos])

``x[valid]`` has as many rows as the mask has True values, which only the data says, so a capture on fake tensors
fails. :func:`masked_mode` traces it with every row kept and the mask carried along instead:

* ``x[mask]`` (one boolean index of a 1-D mask over x's rows) is ``x`` itself, each row known valid or not;
* ops on such rows alone (elementwise, ``unsqueeze``, casts) give rows of the same mask;
* an index by such rows gathers at the row's index where it is valid and at 0 where it is not (any in-range row:
  the result is a dropped row);
* ``T[idx] = v`` by such rows into a tensor of zeros not written yet is an accumulating ``index_put`` of ``v``
  where valid and 0 where not (the same where the valid rows write distinct places, as (expert, position) pairs
  do; init's check grades it on the problem's data);
* ``index_add`` of such rows adds 0 for a dropped row;
* ``bincount(x, minlength=m)`` is a ``scatter_add`` of ones into ``m`` zeros (its length is m where the values are
  below m, as expert ids below the expert count are; a larger one stops the program with an index error).

Any other op on kept rows (a sort, a sum, a cat) is refused by name (:class:`MaskRefused`), never guessed.
"""

from __future__ import annotations

#: aten ops (overload packet names) that map rows to rows: rows of a mask in, rows of the same mask out.
ROWWISE = {"mul", "add", "sub", "div", "neg", "_to_copy", "unsqueeze", "clone", "alias", "silu", "gelu", "relu",
           "sigmoid", "tanh", "exp", "abs", "rsqrt", "sqrt", "erf", "maximum", "minimum", "clamp", "pow", "square",
           "log", "where", "floor_divide", "remainder"}


class MaskRefused(Exception):
    """An op reads rows a boolean mask kept in a way :func:`masked_mode` cannot write with static shapes."""


def masked_mode():
    """A TorchDispatchMode for a capture that keeps every row of a boolean mask index (see the module)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    aten = torch.ops.aten

    def packet(func) -> str:
        return getattr(getattr(func, "overloadpacket", None), "__name__", str(func))

    def tensors(xs):
        for x in xs:
            if isinstance(x, torch.Tensor):
                yield x
            elif isinstance(x, (list, tuple)):
                yield from tensors(x)

    class MaskedMode(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.mask = WeakIdKeyDictionary()  # rows of x[mask] → mask
            self.zeros = WeakIdKeyDictionary()  # tensors of zeros not written yet
            self.used = 0  # ops rewritten: a capture that needed none is not this mode's

        def _one_mask(self, xs, what: str):
            masks = {id(self.mask[t]): self.mask[t] for t in tensors(xs) if t in self.mask}
            if len(masks) > 1:
                raise MaskRefused(f"{what} reads rows of two different boolean masks")
            return next(iter(masks.values()), None)

        def _where(self, m, v):
            keep = aten.view.default(m, [m.shape[0]] + [1] * (v.dim() - 1)) if v.dim() > 1 else m
            return aten.where.self(keep, v, aten.zeros_like.default(v))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = packet(func)
            if name == "bincount":
                x, weights, minlength = (list(args) + [None, 0])[:3]
                minlength = kwargs.get("minlength", minlength)
                if kwargs.get("weights", weights) is None and minlength and x not in self.mask:
                    self.used += 1
                    zeros = aten.zeros.default([minlength], dtype=torch.int64, device=x.device)
                    return aten.scatter_add.default(zeros, 0, x, aten.ones_like.default(x, dtype=torch.int64))
            if name == "index" and len(args[1]) == 1 and args[1][0] is not None and args[1][0].dtype == torch.bool \
                    and args[1][0].dim() == 1 and args[0] not in self.mask:
                self.used += 1
                out = aten.alias.default(args[0])
                self.mask[out] = args[1][0]
                return out
            m = self._one_mask((args, tuple(kwargs.values())), name)
            if m is None or getattr(func, "namespace", "aten") != "aten":  # prim.device: metadata, no rows read
                out = func(*args, **kwargs)
                if name in ("zeros", "zeros_like", "new_zeros"):
                    self.zeros[out] = True
                elif name.endswith("_") and args and isinstance(args[0], torch.Tensor):
                    self.zeros.pop(args[0], None)  # written in place
                return out
            self.used += 1
            if name == "index":
                idx = [None if i is None else aten.mul.Tensor(i, m) if i in self.mask else i for i in args[1]]
                if any(i is not None and i not in self.mask for i in args[1]) or args[0] in self.mask:
                    raise MaskRefused("an index mixes rows a boolean mask kept with other tensors")
                out = aten.index.Tensor(args[0], idx)
                self.mask[out] = m
                return out
            if name in ("index_put", "index_put_"):
                target, idx, values = args[:3]
                accumulate = (list(args) + [False])[3] if len(args) > 3 else kwargs.get("accumulate", False)
                if target in self.mask or any(i is not None and i not in self.mask for i in idx):
                    raise MaskRefused("an index_put mixes rows a boolean mask kept with other tensors")
                if not accumulate and target not in self.zeros:
                    raise MaskRefused("rows a boolean mask kept are written into a tensor that is not fresh zeros")
                idx = [None if i is None else aten.mul.Tensor(i, m) for i in idx]
                if values not in self.mask:  # one value for every kept row (`y[rows] = 1`): 0 for a dropped one
                    values = aten.expand.default(values, [m.shape[0]] + list(target.shape[len(idx):]))
                values = self._where(m, values)
                out = func(target, idx, values, True)
                self.zeros.pop(target, None)
                return out
            if name in ("index_add", "index_add_"):
                target, dim, index, src = args[:4]
                if dim != 0 or target in self.mask or (index in self.mask) != (src in self.mask):
                    raise MaskRefused("an index_add of rows a boolean mask kept on a dim other than 0, or with "
                                      "an index or a source of other rows")
                index = aten.mul.Tensor(index, m) if index in self.mask else index
                src = self._where(m, src) if src in self.mask else src
                return func(target, dim, index, src, *args[4:], **kwargs)
            if name in ROWWISE:
                out = func(*args, **kwargs)
                if any(t.dim() == out.dim() and t.shape[0] != 1 for t in tensors(args) if t not in self.mask):
                    raise MaskRefused(f"{name} of rows a boolean mask kept and of a tensor of other rows")
                if out.dim() == 0 or out.shape[0] != m.shape[0]:
                    raise MaskRefused(f"{name} of rows a boolean mask kept does not keep its rows")
                self.mask[out] = m
                return out
            raise MaskRefused(f"{name} reads rows a boolean mask kept (init writes such rows for gathers, "
                              "index_put into zeros, index_add and row-wise ops only)")

    return MaskedMode()
