"""A loop over the rows of an integer input that cuts a tensor into segments by the numbers it reads (issue 17:
L1_020's patch merger), written as one gather.

The reference reads each row's numbers on the host (``t = grid_thw[i, 0].item()``, …), slices that many rows
of a tensor (``x[offset:offset + t * h * w]``), reshapes and permutes them (``.view(t, h // 2, 2, w // 2, 2, C)
.permute(0, 1, 3, 2, 4, 5).reshape(-1, 4 * C)``) and concatenates the pieces. Fake tensors have no values to read,
so such a reference does not capture. Here the capture answers each ``.item()`` of an integer input with the
number the problem's own inputs hold, as a :class:`~.tracked.Tracked` number that remembers which element it came
from and the arithmetic done on it; :class:`SegmentMode` follows the slices, views and permutes of the pieces, and at
the ``cat`` writes the whole loop as what it is, a permutation of the tensor's rows computed from the integer input
on the device (``cumsum``, ``repeat_interleave``, ``//``, ``%``: allow-listed torch steps) and one
``index_select``. The unrolled loop is then dead code.

What is accepted (anything else read from a Tracked number, ``if t > 1:``, ``range(t)``, a size used outside such
a piece, refuses the capture, which then reports the reference's ``.item()`` as before):

* every piece is ``x[start:stop]`` of one tensor ``x`` (rows along dim 0), the pieces in order and touching,
  the first starting at 0 (rows after the last piece are not read, as in the reference; how many the pieces hold
  comes from the output's shape, which the definition gives);
* then ``view``/``reshape`` into sizes each row's numbers give (trailing sizes that are one row of ``x``), at most
  one ``permute`` that keeps the trailing row dims, ``contiguous``/``clone``, and a last ``view``/``reshape``;
* every piece's sizes are the first piece's as functions of its own row's numbers (checked on random rows), and
  the gather reproduces the reference's row order on the captured inputs (:meth:`SegmentMode.check`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from .tracked import Tracked, flat, form_of, has_tracked, number, plain, tracked_in

#: Random rows each piece's sizes are compared on (:meth:`SegmentMode._same_form`).
FORM_CHECKS = 8
#: Most MiB of inputs :func:`integer_inputs` makes on the CPU to read the integer ones (L1_020's: 116-210 MiB, most
#: of it its two weights).
MAX_INPUT_MIB = 2048


class SegmentRefused(Exception):
    """A number read with ``.item()`` is used in a way :class:`SegmentMode` does not write as a gather."""


@dataclass
class _Input:
    """An integer input whose elements ``.item()`` may read: its fake tensor in the graph and its real values."""

    name: str
    fake: Any
    real: Any


@dataclass
class _Piece:
    """``source[start:stop]`` and the views applied to it since (``("view", sizes)``, ``("permute", dims)``)."""

    source: Any
    start: Any
    stop: Any
    ops: list = field(default_factory=list)


@dataclass
class _Loop:
    """One folded loop: what :meth:`SegmentMode.check` compares on the captured inputs."""

    pieces: list
    rows: int
    out_rows: int
    per_out_row: int
    perm: tuple
    sizes: list
    name: str


class SegmentMode:
    """Factory of the TorchFunctionMode (built lazily: torch is imported on use) that captures a segment loop.

    Args:
        inputs: integer input name → (its fake tensor in the capture, its values as a numpy array: made before
            the capture, since under it every torch op is traced).
        filename: the reference's code object file name, to say which lines a folded loop came from.

    Attributes:
        escaped: how a Tracked number was used that the fold cannot write (refuses the capture).
        loops: the loops folded (empty: the mode did nothing, the capture's failure is another's).
    """

    def __init__(self, inputs: dict[str, tuple[Any, Any]], filename: str = ""):
        # values as Python numbers and element bookkeeping in numpy: under the capture every torch op is traced
        self.inputs = {id(fake): _Input(name, fake, real) for name, (fake, real) in inputs.items()}
        self.values = {name: real.reshape(-1).tolist() for name, (_, real) in inputs.items()}
        self.escaped: list[str] = []
        self.asked: list[Tracked] = []  # __index__ calls since the last torch call
        self.loops: list[_Loop] = []
        self.elements: dict[int, tuple[str, Any]] = {}  # id(tensor) → (input, flat element indices)
        self.pieces: dict[int, tuple[Any, _Piece]] = {}  # id(tensor) → (tensor kept alive, piece)
        self.keep: list = []  # tensors whose ids are keys above
        self.filename, self.first_line = filename, None  # the reference's; its first .item() (for the note)

    def mode(self):
        """The TorchFunctionMode to capture under: every torch call of the reference goes to :meth:`call`."""
        from torch.overrides import TorchFunctionMode

        owner = self

        class _Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return owner.call(func, args, kwargs or {})

        return _Mode()

    # -- what the reference calls ------------------------------------------------------------------------------

    def call(self, func, args, kwargs):
        import torch

        self._settle(args, kwargs)
        name = getattr(func, "__name__", "")
        x = args[0] if args else None
        if name == "__getitem__" and isinstance(x, torch.Tensor) and id(x) in self._sources():
            return self._index_input(func, x, args[1])
        if name == "item" and isinstance(x, torch.Tensor) and id(x) in self.elements:
            return self._item(x)
        if isinstance(x, torch.Tensor) and id(x) in self.pieces:
            return self._on_piece(func, name, x, args[1:], kwargs)
        if name == "cat" and args and isinstance(args[0], (list, tuple)) and args[0] and all(
                isinstance(t, torch.Tensor) and id(t) in self.pieces for t in args[0]):
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            return self._fold([self.pieces[id(t)][1] for t in args[0]], int(dim))
        if name == "__getitem__" and isinstance(x, torch.Tensor) and has_tracked(args[1]):
            return self._slice(func, x, args[1])
        if has_tracked(args) or has_tracked(kwargs) or any(
                isinstance(t, torch.Tensor) and id(t) in self.pieces for t in flat(args)):
            self.escaped.append(f"{name or func} of a number read with .item() (or of a piece cut by one)")
        return func(*plain(args), **plain(kwargs))

    def _settle(self, args=(), kwargs=None) -> None:
        """The numbers asked for an index since the last torch call that this call's arguments do not hold: asked
        by Python itself (``range(t)``, a list index), an escape. (Torch's argument parser asks for some of a
        call's numbers, the first of a size list once or twice, just before the call reaches the mode.)"""
        held = {id(t) for v in flat((args, list((kwargs or {}).values()))) for t in tracked_in(v)}
        if any(id(t) not in held for t in self.asked):
            self.escaped.append("used as an index or a count (range(), a Python sequence)")
        self.asked = []

    def _sources(self) -> dict:
        return {**{k: None for k in self.inputs}, **self.elements}

    def _index_input(self, func, x, index):
        import numpy

        out = func(x, plain(index))
        if id(x) in self.inputs:
            inp = self.inputs[id(x)]
            flat = numpy.arange(inp.real.size).reshape(inp.real.shape)
        else:
            inp, flat = self.elements[id(x)]
            inp = self.inputs[inp]
        self.elements[id(out)] = (id(inp.fake), flat[plain(index)])
        self.keep.append(out)
        return out

    def _line(self) -> int | None:
        import sys

        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else None

    def _item(self, x):
        self.first_line = self.first_line or self._line()
        key, flat = self.elements[id(x)]
        inp = self.inputs[key]
        if flat.size != 1:
            self.escaped.append(".item() of more than one element")
            return self.values[inp.name][0]
        at = int(flat.reshape(-1)[0])
        t = Tracked(self.values[inp.name][at], lambda env, k=(inp.name, at): env[k], self)
        t.keys = {(inp.name, at)}
        return t

    def _slice(self, func, x, index):
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != 1 or not isinstance(idx[0], slice) or idx[0].step not in (None, 1):
            self.escaped.append("an index of a tensor other than rows start:stop")
            return func(x, plain(index))
        s = idx[0]
        out = func(x, plain(index))
        piece = _Piece(x, s.start if s.start is not None else 0, s.stop if s.stop is not None else x.shape[0])
        self.pieces[id(out)] = (out, piece)
        return out

    def _on_piece(self, func, name, x, rest, kwargs):
        _, piece = self.pieces[id(x)]
        out = func(x, *plain(rest), **plain(kwargs))
        if name in ("view", "reshape"):
            sizes = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
            op = ("view", tuple(sizes))
        elif name == "permute":
            dims = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
            op = ("permute", tuple(int(d) for d in plain(dims)))
        elif name in ("contiguous", "clone"):
            op = None
        else:
            self.escaped.append(f"{name} of a piece cut by a number read with .item()")
            return out
        self.pieces[id(out)] = (out, _Piece(piece.source, piece.start, piece.stop,
                                            piece.ops + ([op] if op else [])))
        return out

    # -- the fold ----------------------------------------------------------------------------------------------

    def _fold(self, pieces: list[_Piece], dim: int):
        """The rows of the pieces' source, gathered in the order the pieces' views put them, reshaped as the last
        view does; computed from the integer input's columns (this runs under the capture: the ops are the graph's).

        Raises:
            SegmentRefused: the pieces are not the form the module docstring describes.
        """
        import torch
        from torch.fx import traceback as fx_traceback

        src = pieces[0].source
        if dim != 0 or any(p.source is not src for p in pieces):
            raise SegmentRefused("pieces of different tensors, or concatenated along another dim than 0")
        rows, tail = int(src.shape[0]), math.prod(int(s) for s in src.shape[1:])
        kinds = [tuple(op[0] for op in p.ops) for p in pieces]
        if len(set(kinds)) != 1 or not kinds[0] or kinds[0][0] != "view":
            raise SegmentRefused("the pieces are not each viewed the same way")
        ops = pieces[0].ops
        perms = [op[1] for op in ops if op[0] == "permute"]
        views = [op[1] for op in ops if op[0] == "view"]
        if len(perms) > 1 or len(views) > 2 or (len(views) == 2 and ops[-1][0] != "view"):
            raise SegmentRefused("more than one permute, or views between them")
        first = list(views[0])
        r = len(first)  # the row dims: sizes before the trailing ones that make one source row
        while r > 0 and all(not isinstance(s, Tracked) for s in first[r - 1:]) and \
                math.prod(number(s) for s in first[r - 1:]) <= tail:
            r -= 1
            if math.prod(number(s) for s in first[r:]) == tail:
                break
        if math.prod(number(s) for s in first[r:]) != tail:
            raise SegmentRefused("the first view does not keep each source row whole")
        perm = perms[0] if perms else tuple(range(len(first)))
        if sorted(perm) != list(range(len(first))) or any(perm[j] != j for j in range(r, len(first))):
            raise SegmentRefused("the permute moves a source row's own elements")
        for p in pieces[1:]:
            if [op[1] for op in p.ops if op[0] == "permute"] != perms:
                raise SegmentRefused("the pieces are permuted differently")
        name = self._sameform_of(pieces, r)
        last = list(views[-1]) if len(views) == 2 else None
        out_tail = [number(s) for s in last[1:]] if last else [number(s) for s in first[1:]] if perm == tuple(
            range(len(first))) else None
        if last is None and perms:
            raise SegmentRefused("permuted pieces concatenated without a reshape to rows")
        if any(has_tracked(v[1:]) for v in ([views[-1]] if last else [])):
            raise SegmentRefused("the last view's trailing sizes change with the numbers read")
        total = number(pieces[-1].stop)  # rows the pieces hold (the source may have more: they are not read)
        out_rows = total * tail // math.prod(out_tail) if out_tail else total
        if (total * tail) % math.prod(out_tail or [1]) or out_rows == 0 or total % out_rows:
            raise SegmentRefused("the last view's rows are not whole source rows")
        loop = _Loop(pieces, total, out_rows, total // out_rows, perm[:r], [form_of(s) for s in first[:r]], name)
        self.loops.append(loop)
        fake = next(i.fake for i in self.inputs.values() if i.name == loop.name)
        first, last = self.first_line, self._line()
        lines = f"lines {first}-{last}" if first and last and first < last else f"line {last}" if last else "the loop"
        note = (f"{lines}: the loop over {name}'s rows, a piece of rows of a tensor each (viewed and permuted), as one "
                f"gather: the source row of every output row computed from {name}'s numbers here, then index_select")
        with fx_traceback.annotate({"note": note}):
            out = torch.index_select(src.reshape(rows, tail), 0, gather_rows(loop, fake))
            return out.reshape([out_rows, *out_tail]) if out_tail else out.reshape(total, *src.shape[1:])

    def _sameform_of(self, pieces: list[_Piece], r: int) -> str:
        """Every piece's start, stop and row sizes are the first's as functions of its own row (random rows), and
        each starts where the one before stopped, the first at 0; returns the integer input they read."""
        first = pieces[0]
        columns = {i.name: int(i.real.shape[-1]) if i.real.ndim == 2 else 1 for i in self.inputs.values()}
        name, cols, row0 = _row_of(first, r, columns)
        rng = random.Random(0)
        for i, p in enumerate(pieces):
            n, _, row = _row_of(p, r, columns)
            if n != name or row != row0 + i:
                raise SegmentRefused("piece i does not read row i of the integer input")
            for _ in range(FORM_CHECKS):
                values = [rng.randint(1, 64) * 2 for _ in range(cols)]
                env0 = _RowEnv(name, cols, row0, values)
                envi = _RowEnv(name, cols, row, values)
                size0 = [form_of(s)(env0) for s in _view0(first)[:r]]
                sizei = [form_of(s)(envi) for s in _view0(p)[:r]]
                length = form_of(p.stop)(envi) - form_of(p.start)(envi)
                if size0 != sizei or length != math.prod(sizei):
                    raise SegmentRefused("the pieces' sizes are not one form of their rows' numbers")
        if number(first.start) != 0 or any(number(a.stop) != number(b.start) for a, b in zip(pieces, pieces[1:])):
            raise SegmentRefused("the pieces do not follow one another from row 0")
        return name

    def check(self) -> None:
        """The gather's row order against the reference's, on the captured inputs' real values.

        Raises:
            SegmentRefused: a number was used outside the pieces, or the orders differ.
        """
        import torch

        self._settle()
        if self.escaped:
            raise SegmentRefused(self.escaped[0])
        if not self.loops:
            raise SegmentRefused("no loop of pieces to fold")
        for loop in self.loops:
            real = torch.from_numpy(next(i.real for i in self.inputs.values() if i.name == loop.name))
            got = gather_rows(loop, real)
            rows = torch.arange(loop.rows)
            want = []
            for p in loop.pieces:
                seg = rows[number(p.start):number(p.stop)]
                sizes = [number(s) for s in _view0(p)]
                r = len(loop.perm)
                want.append(seg.view(sizes[:r]).permute(loop.perm).reshape(-1))
            if not torch.equal(got, torch.cat(want)):
                raise SegmentRefused("the gather's row order differs from the reference's on the captured inputs")


def integer_inputs(problem, workload, names) -> dict[str, Any]:
    """The values (numpy arrays) of ``problem``'s integer tensor inputs among ``names`` at ``workload``, made on the
    CPU as the grader makes them (seed 0; a custom entry point makes all inputs); {} where there are none or all of the
    workload's inputs would pass :data:`MAX_INPUT_MIB`."""
    import torch

    from ..problem import torch_dtype

    ints = [n for n in names if not torch_dtype(problem.inputs[n].dtype).is_floating_point
            and torch_dtype(problem.inputs[n].dtype) is not torch.bool]
    shapes = problem.input_shapes(workload)
    mib = sum(math.prod(s) * torch.empty((), dtype=torch_dtype(problem.inputs[n].dtype)).element_size()
              for n, s in shapes.items() if s is not None) / 2**20
    if not ints or mib > MAX_INPUT_MIB:
        return {}
    made = problem.make_inputs(workload, device="cpu", seed=0)
    return {n: made[n].numpy() for n in ints if isinstance(made.get(n), torch.Tensor)}


def _view0(p: _Piece) -> list:
    return list(next(op[1] for op in p.ops if op[0] == "view"))


def _row_of(p: _Piece, r: int, columns: dict[str, int]) -> tuple[str, int, int]:
    """(integer input, its columns, its row) that ``p``'s row sizes read (its start sums the rows before)."""
    keys = set()
    for s in _view0(p)[:r]:
        if isinstance(s, Tracked):
            keys |= s.keys
    names = {k[0] for k in keys}
    if len(names) != 1:
        raise SegmentRefused("a piece's sizes read no number, or more than one integer input")
    name = names.pop()
    rows = {k[1] // columns[name] for k in keys}
    if len(rows) != 1:
        raise SegmentRefused("a piece's sizes read more than one row")
    return name, columns[name], rows.pop()


class _RowEnv(dict):
    """Element key → value: ``values`` for one row's numbers; other rows' elements (a piece's start sums the rows
    before it) a fixed even number each."""

    def __init__(self, name: str, cols: int, row: int, values: list[int]):
        super().__init__({(name, row * cols + j): v for j, v in enumerate(values)})

    def __missing__(self, key):
        return 2 * (1 + key[1] % 7)


class _ColumnEnv(dict):
    """Element key → the column of the integer input that element is in (every row at once)."""

    def __init__(self, table, cols: int):
        super().__init__()
        self.table, self.cols = table, cols

    def __missing__(self, key):
        return self.table[:, key[1] % self.cols] if self.table.dim() == 2 else self.table


def gather_rows(loop: _Loop, table):
    """The source row of each output row: output row q of table row g's piece is taken apart into the permuted
    view's digits (last fastest) and put together with the unpermuted view's strides, after the piece's start.

    Args:
        loop: a folded loop; ``table``: the integer input ([rows, columns], int64), fake under the capture or
            real on the CPU. Sizes that are numbers stay Python ints (``local % 2``), those read from the table
            are per-row tensors, each taken once per output row (``size[seg]``).

    Returns:
        int64 tensor [loop.rows].
    """
    import torch
    from torch.fx import traceback as fx_traceback

    cols = int(table.shape[-1]) if table.dim() == 2 else 1
    sizes = [s(_ColumnEnv(table, cols)) for s in loop.sizes]
    products: dict[tuple, Any] = {}

    def product(vals):  # (a number, the per-row tensor or None): numbers folded into one factor, each op once
        number_part = math.prod(v for v in vals if not isinstance(v, torch.Tensor))
        tensors = tuple(v for v in vals if isinstance(v, torch.Tensor))
        key = tuple(id(t) for t in tensors)
        if tensors and key not in products:
            prod = tensors[0]
            for t in tensors[1:]:
                prod = prod * t
            products[key] = (tensors, prod)
        return number_part, (products[key][1] if tensors else None)

    factor, count = product(sizes)  # rows of each table row's piece (a table row's tensor: _row_of saw one)
    count = count * factor if factor != 1 else count
    start = torch.cumsum(count, 0) - count
    # the row count as the output's rows times the source rows in each (num_merged_patches * 4, not num_patches:
    # the source may have rows no piece reads, as the grader's unlisted shapes do)
    with fx_traceback.annotate({"segment_rows": [loop.out_rows, loop.per_out_row]}):
        seg = torch.repeat_interleave(count, output_size=loop.rows)
    taken: dict[int, Any] = {}

    def at(v):  # a per-row tensor at each output row's piece (``v[seg]``, once each); a number as it is
        if not isinstance(v, torch.Tensor):
            return v
        if id(v) not in taken:
            taken[id(v)] = (v, v[seg])
        return taken[id(v)][1]

    index = at(start)
    local = torch.ones_like(seg).cumsum(0) - 1 - index  # an arange of the rows, its size taken from seg
    for m in reversed(range(len(loop.perm))):
        j = loop.perm[m]
        size = at(sizes[j])
        digit = local % size if m else local
        if m:
            local = local // size
        factor, stride = product(sizes[j + 1:])  # dim j's stride in the unpermuted view: the sizes after it
        term = digit * at(stride) if stride is not None else digit
        index = index + (term * factor if factor != 1 else term)
    return index
