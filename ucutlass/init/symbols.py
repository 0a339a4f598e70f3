"""Integers of a captured graph as axis expressions (issue 17): a view's shape or a slice bound that follows an axis
is written ``batch_size * seq_len``, not the number it had at the captured workload, so the program serves every
workload. Captures at several workloads (:func:`~.capture.other_workloads`) tell which axis an integer follows.
"""

from __future__ import annotations

from typing import Mapping


def symbolize(values: Mapping[str, tuple[int, ...]], consts: Mapping[str, int] | None = None):
    """A function (int at each capture) → text: the axis expression that takes those values at the captured
    workloads (``batch_size * seq_len``, ``2 * hidden``, ``batch_size * (text_seq_len + img_seq_len)``), or the number
    when they agree (a constant) or nothing fits.

    Args:
        values: var axis name → its value at each captured workload (the first: the one the graph is written at).
        consts: const axis name → value: a constant ≥ 16 that only one const axis has is written by its name.
    """
    named: dict[int, str | None] = {}
    for name, v in (consts or {}).items():
        if v >= 16:
            named[v] = None if v in named else name
    names = list(values)
    mul = lambda *xs: tuple(__import__("math").prod(t) for t in zip(*xs))  # noqa: E731
    cands = [(n, values[n]) for n in names]
    for i, n in enumerate(names):
        for m in names[i + 1:]:
            cands.append((f"{n} * {m}", mul(values[n], values[m])))
        for m in names:
            if n != m:
                cands.append((f"({n} - {m})", tuple(x - y for x, y in zip(values[n], values[m]))))
    for i, n in enumerate(names):
        for j, m in enumerate(names[i + 1:], i + 1):
            for o in names[j + 1:]:
                cands.append((f"{n} * {m} * {o}", mul(values[n], values[m], values[o])))
    # sums, last (a product or difference that fits wins): a concatenation's length (L2_030's torch.cat of text and
    # image tokens: text_seq_len + img_seq_len, batch_size * (text_seq_len + img_seq_len) rows once flattened)
    for i, n in enumerate(names):
        for m in names[i + 1:]:
            total = tuple(x + y for x, y in zip(values[n], values[m]))
            cands.append((f"({n} + {m})", total))
            for o in names:
                if o not in (n, m):
                    cands.append((f"{o} * ({n} + {m})", mul(values[o], total)))

    # blocks of a constant size, last: a sequence cut into windows (L2_045's nblocks = ceil(audio_seq_len / 15),
    # batch_size * nblocks windows, nblocks * 15 - audio_seq_len rows of padding); divisors: the const axes' values
    scaled = [(n, values[n]) for n in names]
    divisors = sorted({v for v in (consts or {}).values() if isinstance(v, int) and v >= 2})
    for d in divisors:
        for n in names:
            if all(x % d == 0 for x in values[n]):
                continue  # a ceiling and a floor agree on these values: no evidence of windows
            blocks = tuple(-(-x // d) for x in values[n])
            text = f"(({n} + {d - 1}) // {d})"
            cands.append((text, blocks))
            cands.append((f"({text} * {d} - {n})", tuple(b * d - x for b, x in zip(blocks, values[n]))))
            scaled.append((text, blocks))
            for m in names:
                if m != n:
                    cands.append((f"{m} * {text}", mul(values[m], blocks)))
                    scaled.append((f"{m} * {text}", mul(values[m], blocks)))

    def fn(vals: tuple) -> str:
        a = vals[0]
        if len(set(vals)) == 1:
            return named.get(a) or str(a)
        for text, c in cands:
            if c == vals:
                return text
        for text, c in scaled:
            if c[0] and a % c[0] == 0 and all(y * (a // c[0]) == v for y, v in zip(c, vals)):
                return f"{a // c[0]} * {text}"
            if a and c[0] % a == 0 and all(y % (c[0] // a) == 0 and y // (c[0] // a) == v for y, v in zip(c, vals)):
                return f"{text} // {c[0] // a}"
        for text, c in cands[:len(names)]:  # a rounded-down fraction of an axis: int(tokens * top_k / experts * 1.25)
            for d in divisors:  # k with (k * c[0]) // d == a: from ceil(a * d / c[0]) to ((a + 1) * d - 1) // c[0]
                for k in range(-(-a * d // c[0]), min(((a + 1) * d - 1) // c[0] + 1, -(-a * d // c[0]) + 64)) \
                        if c[0] > 0 and a > 0 else ():
                    if all((k * y) // d == v for y, v in zip(c, vals)):
                        return f"({k} * {text}) // {d}"
        return str(a)

    return fn


def evaluate_axes(text: str, axes: Mapping[str, int]) -> int | None:
    """The value of an axis expression :func:`symbolize` writes (``seq_len_kv``, ``20 * batch_size``,
    ``(a - b)``) at ``axes``; None for anything else (a name not in ``axes``, an operator it does not write).
    Read with :mod:`ast` (names, integers, ``+ - * // %``), never ``eval``."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod}

    def value(node) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            v = axes.get(node.id)
            return v if isinstance(v, int) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = value(node.operand)
            return None if v is None else -v
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            lhs, rhs = value(node.left), value(node.right)
            if lhs is None or rhs is None or (isinstance(node.op, (ast.FloorDiv, ast.Mod)) and rhs == 0):
                return None
            return ops[type(node.op)](lhs, rhs)
        return None

    try:
        return value(ast.parse(text, mode="eval").body)
    except SyntaxError:
        return None


def values_on_workloads(problem, text: str) -> list[int] | None:
    """The value of an axis expression (``seq_len_kv``, ``20 * batch_size``) on every workload of ``problem`` (its
    const axes included; :func:`evaluate_axes`), or None where it is not one (a name no workload has)."""
    consts = {n: a.value for n, a in problem.axes.items() if a.kind == "const" and a.value is not None}
    values = [evaluate_axes(text, {**consts, **dict(w.axes)}) for w in problem.workloads]
    return values if values and all(v is not None for v in values) else None
