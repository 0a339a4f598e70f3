"""Numbers read from an integer input with ``.item()`` that remember where they came from and what was computed
from them (:mod:`.segment_loops` answers ``.item()`` with them while a reference is captured).
"""

from __future__ import annotations

from typing import Callable


class Tracked:
    """A number read from an integer input (``.item()``) and what was computed from it.

    Not an ``int`` subclass on purpose: Python takes an int subclass as an int without asking it (``range(t)``, a
    list index), so such a use would go unseen and bake the captured number into the graph; this class is asked
    (``__index__``), and says so. ``+ - * // %`` with ints or other Tracked numbers make Tracked numbers;
    ``form(env)`` recomputes one from ``env`` (element key → value: an int, or a tensor of a column, to compute
    every row at once); ``keys``: the elements it reads. Any other use is added to ``mode.escaped`` (``mode``: the
    :class:`~.segment_loops.SegmentMode` capturing), which refuses the capture.
    """

    def __init__(self, value: int, form: Callable, mode):
        self.value, self.form, self.mode, self.keys = int(value), form, mode, set()

    def _op(self, other, op, reflected: bool = False):
        if not isinstance(other, (int, Tracked)) or isinstance(other, bool):
            return NotImplemented
        o_value = other.value if isinstance(other, Tracked) else other
        o_form = other.form if isinstance(other, Tracked) else (lambda env, v=other: v)
        if reflected:
            out = Tracked(op(o_value, self.value), lambda env, f=self.form: op(o_form(env), f(env)), self.mode)
        else:
            out = Tracked(op(self.value, o_value), lambda env, f=self.form: op(f(env), o_form(env)), self.mode)
        out.keys = self.keys | (other.keys if isinstance(other, Tracked) else set())
        return out

    def __add__(self, o):
        return self._op(o, lambda x, y: x + y)

    def __radd__(self, o):
        return self._op(o, lambda x, y: x + y, True)

    def __sub__(self, o):
        return self._op(o, lambda x, y: x - y)

    def __rsub__(self, o):
        return self._op(o, lambda x, y: x - y, True)

    def __mul__(self, o):
        return self._op(o, lambda x, y: x * y)

    def __rmul__(self, o):
        return self._op(o, lambda x, y: x * y, True)

    def __floordiv__(self, o):
        return self._op(o, lambda x, y: x // y)

    def __rfloordiv__(self, o):
        return self._op(o, lambda x, y: x // y, True)

    def __mod__(self, o):
        return self._op(o, lambda x, y: x % y)

    def _escape(self, how: str):
        self.mode.escaped.append(how)

    def __index__(self):
        # torch's argument parser asks too, just before the call reaches the mode with this number among its
        # arguments: the mode counts these asks against the call's arguments (SegmentMode.call)
        self.mode.asked.append(self)
        return self.value

    def __int__(self):
        self._escape("converted with int()")
        return self.value

    def __float__(self):
        self._escape("converted with float() (math on it)")
        return float(self.value)

    def __bool__(self):
        self._escape("read as a truth value (if, while, and/or)")
        return self.value != 0

    def _compare(self, o, how, op):
        self._escape(f"compared ({how})")
        return op(self.value, o.value if isinstance(o, Tracked) else o)

    def __eq__(self, o):
        return self._compare(o, "==", lambda x, y: x == y)

    def __ne__(self, o):
        return self._compare(o, "!=", lambda x, y: x != y)

    def __lt__(self, o):
        return self._compare(o, "<", lambda x, y: x < y)

    def __le__(self, o):
        return self._compare(o, "<=", lambda x, y: x <= y)

    def __gt__(self, o):
        return self._compare(o, ">", lambda x, y: x > y)

    def __ge__(self, o):
        return self._compare(o, ">=", lambda x, y: x >= y)

    def __hash__(self):
        self._escape("hashed (a dict key, a set)")
        return hash(self.value)

    def __repr__(self):  # the value, for messages; not a use
        return f"Tracked({self.value})"


def number(x) -> int:
    """The value of an int or a Tracked number (without counting it as a use)."""
    return x.value if isinstance(x, Tracked) else int(x)


def plain(x):
    """``x`` with every Tracked int in it (nested in tuples, lists, slices) as a plain int."""
    if isinstance(x, Tracked):
        return x.value
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    if isinstance(x, slice):
        return slice(plain(x.start), plain(x.stop), plain(x.step))
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


def has_tracked(x) -> bool:
    """Whether ``x`` holds a Tracked number (nested in tuples, lists, slices, dicts)."""
    if isinstance(x, Tracked):
        return True
    if isinstance(x, (list, tuple)):
        return any(has_tracked(v) for v in x)
    if isinstance(x, slice):
        return any(has_tracked(v) for v in (x.start, x.stop, x.step))
    if isinstance(x, dict):
        return any(has_tracked(v) for v in x.values())
    return False


def form_of(x) -> Callable:
    """``x.form`` of a Tracked number; for an int, a form that is that int."""
    return x.form if isinstance(x, Tracked) else (lambda env, v=number(x): v)


def tracked_in(x):
    """The Tracked numbers of one argument (itself, or a slice's bounds)."""
    if isinstance(x, Tracked):
        yield x
    elif isinstance(x, slice):
        yield from (v for v in (x.start, x.stop, x.step) if isinstance(v, Tracked))


def flat(x):
    """The leaves of nested tuples and lists."""
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from flat(v)
    else:
        yield x
