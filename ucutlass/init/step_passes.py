"""Passes over a translated pipeline's steps (:class:`.steps.Step`) before it is written: the live steps only, one
view for views written alike, and the problem's output names on the steps that make the returned tensors."""

from __future__ import annotations

import re

from .steps import Step


def name_outputs(steps: list[Step], returns: list[str], outputs: list[str], taken: set[str]) -> list[str]:
    """``returns`` with each step result that the pipeline returns renamed to the problem's output name
    (``to_copy_1281`` → ``output``), in the steps that make and read it, where that name is free."""
    used = taken | {t for s in steps for t in s.target.split(", ")}
    out = list(returns)
    for i, (name, want) in enumerate(zip(returns, outputs)):
        if name == want or want in used or name in out[:i] or not any(name in s.target.split(", ") for s in steps):
            continue
        word = re.compile(rf"(?<![.\w]){re.escape(name)}\b")  # not torch.index_add for index_add
        for s in steps:
            s.target, s.expr = word.sub(want, s.target), word.sub(want, s.expr)
        out[i] = want
        used.add(want)
    return out


def live(steps: list[Step], returns: list[str]) -> list[Step]:
    """The steps whose result is used by a later step or returned (a ``.t()`` bound as a kernel's b is not)."""
    used = set(returns)
    out = []
    for step in reversed(steps):
        if used & set(step.target.split(", ")):
            out.append(step)
            used |= set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", step.expr))
    return list(reversed(out))


def shared_views(steps: list[Step], returns: list[str]) -> list[Step]:
    """``steps`` without a view step whose expression an earlier view step already has (the reference reshaping
    one input the same way before each of its three projections): its readers read the first. A returned view
    stays (an output is its own name)."""
    first: dict[str, str] = {}
    rename: dict[str, str] = {}
    out = []
    for step in steps:
        if rename:
            word = re.compile(r"(?<![.\w])(" + "|".join(map(re.escape, rename)) + r")\b")
            step.expr = word.sub(lambda m: rename[m.group(1)], step.expr)
        if step.kind == "view" and ", " not in step.target and not step.note:
            same = first.get(step.expr)
            if same is not None and step.target not in returns:
                rename[step.target] = same
                continue
            first.setdefault(step.expr, step.target)
        out.append(step)
    return out


__all__ = ["live", "shared_views", "name_outputs"]
