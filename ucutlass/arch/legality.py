"""Legality of a kernel's open choices: which combinations pass the rules (:func:`legal_combinations`), which of
them build distinct kernels (:func:`distinct_combinations`), and :func:`check`, the diagnostics ``ucutlass check``
prints (each rule broken; for open choices a summary and the options no legal combination uses)."""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Mapping, Sequence

from .. import ir
from ..errors import CheckError, Diagnostic
from ..ir import GemmKernel, Program
from .targets import canonical, check_kernel

#: Most combinations of a kernel's open choices that are enumerated (each is checked against the rules, ~0.5 ms
#: on a small machine; the tuner's space is the same set). A larger product is refused, counted first.
MAX_COMBINATIONS = 4096


def count_combinations(kernel: GemmKernel) -> int:
    """The number of combinations of a kernel's open choices (the product of their option counts; 1 when
    concrete), computed without enumerating them."""
    return math.prod(len(c.options) for c in kernel.choices().values())


def require_countable(kernel: GemmKernel) -> int:
    """:func:`count_combinations`, refused past :data:`MAX_COMBINATIONS` before anything is enumerated.

    Returns:
        The number of combinations.

    Raises:
        CheckError: code ``too-large`` at the kernel, naming the count, each choice with its number of options
            (largest first) and which choices to narrow to come under the limit; ``valid`` lists those choices.
    """
    choices = kernel.choices()
    total = count_combinations(kernel)
    if total <= MAX_COMBINATIONS:
        return total
    by_size = sorted(choices.items(), key=lambda kv: -len(kv[1].options))
    narrow, left = [], total
    for key, choice in by_size:  # pin the largest choices until the rest fit
        if left <= MAX_COMBINATIONS:
            break
        narrow.append(key)
        left //= len(choice.options)
    sizes = " × ".join(f"{key} {len(c.options)}" for key, c in by_size)
    message = (f"kernel {kernel.name}: its open choices make {total} combinations ({sizes}); at most "
               f"{MAX_COMBINATIONS} are checked: narrow {', '.join(narrow)} (one option each leaves {left}), or "
               "drop options of several choices")
    pos = choices[narrow[0]].pos if narrow and choices[narrow[0]].pos.line else kernel.pos
    raise CheckError([Diagnostic(message, pos, tuple(narrow), code="too-large")])


def legal_combinations(kernel: GemmKernel, extents: Mapping[str, int] | None = None,
                       decide: Callable[[Any], Any] | None = None
                       ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], list[Diagnostic]]]]:
    """Check every combination of a kernel's open choices against the arch rules.

    Args:
        kernel: a kernel, usually with open choices (a concrete one gives one empty combination).
        extents: optional problem extents (``{"M": 4096, ...}``) for the alignment rules.
        decide: applied to each combination's kernel before the rules (``ucutlass check --problem`` passes
            :func:`ucutlass.bind.resolve_auto` for the workloads: ``alignment``/``swap_ab = auto`` decided per
            combination, as the tuner decides them).

    Returns:
        ``(legal, rejected)``: ``legal`` lists the picks (keys as :meth:`GemmKernel.choices`, values typed,
        e.g. ``{"tile": (128, 128, 64), "schedule": Schedule.pingpong}``) that pass; ``rejected`` pairs each
        other pick with the errors it breaks. Both in the order of the product of the options.

    Raises:
        CheckError: more than :data:`MAX_COMBINATIONS` combinations (:func:`require_countable`), before any is
            checked.
    """
    require_countable(kernel)
    choices = kernel.choices()
    keys = list(choices)
    legal: list[dict[str, Any]] = []
    rejected: list[tuple[dict[str, Any], list[Diagnostic]]] = []
    for combo in itertools.product(*(choices[k].options for k in keys)):
        picks = dict(zip(keys, combo))
        resolved = kernel.resolve(picks)
        errors = [d for d in check_kernel(decide(resolved) if decide else resolved, extents)
                  if d.severity == "error"]
        (rejected.append((picks, errors)) if errors else legal.append(picks))
    return legal, rejected


def distinct_combinations(kernel: GemmKernel, picks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of ``picks`` (e.g. the ``legal`` of :func:`legal_combinations`), the first of each kernel: combinations
    that :func:`ucutlass.arch.canonical` makes equal (an ``auto`` setting the rules decide) build one kernel."""
    first: dict[str, Mapping[str, Any]] = {}
    for p in picks:
        first.setdefault(canonical(kernel.resolve(p)).digest(), p)
    return list(first.values())


def check(program_or_kernel: Program | GemmKernel, extents: Mapping[str, int] | None = None,
          decide: Callable[[Any], Any] | None = None) -> list[Diagnostic]:
    """Run the architecture rules on a program or one kernel.

    A concrete kernel gets the rule violations of :func:`ucutlass.arch.check_kernel`. A kernel with
    open choices is checked in every combination: each rule that *every* combination breaks is reported
    as an error, each option that no legal combination uses as a warning (``dead-option``, at the option),
    both in source order and followed by a summary (severity ``note`` when some combinations are legal, ``error``
    when none is) that counts the legal combinations and names the rules that rejected the others.

    Args:
        program_or_kernel: a :class:`~ucutlass.ir.Program` (all its kernels) or a single kernel.
        extents: optional problem extents by dim name, for the 16-byte alignment rule.
        decide: applied to each kernel (each combination) before the rules, as in :func:`legal_combinations`.

    Returns:
        The diagnostics; no ``error`` among them means every kernel (or some combination) is legal.

    Raises:
        CheckError: a kernel's open choices make more than :data:`MAX_COMBINATIONS` combinations.
    """
    kernels = program_or_kernel.kernels if isinstance(program_or_kernel, Program) else (program_or_kernel,)
    out: list[Diagnostic] = []
    for kernel in kernels:
        if kernel.is_concrete():
            out.extend(sorted(check_kernel(decide(kernel) if decide else kernel, extents), key=_source_order))
            continue
        legal, rejected = legal_combinations(kernel, extents, decide)
        total = len(legal) + len(rejected)
        keys = ", ".join(kernel.choices())
        found: list[Diagnostic] = _dead_options(kernel, legal, rejected)
        if not legal:
            common = set.intersection(*({d.code for d in errs} for _, errs in rejected))
            for d in rejected[0][1]:
                if d.code in common:
                    found.append(Diagnostic(f"{d.message} (this rule rejects every combination of the open "
                                            "choices)", d.pos, d.valid, d.code, d.severity))
        out.extend(sorted(found, key=_source_order))
        counts: dict[str, int] = {}
        for _, errs in rejected:  # by the first rule each breaks, as `tune --dry-run` counts them
            counts[errs[0].code] = counts.get(errs[0].code, 0) + 1
        targets = kernel.target.options if isinstance(kernel.target, ir.Choice) else (kernel.target,)
        rules = "/".join(t.value for t in targets)
        message = f"{len(legal)} of {total} combinations of the open choices ({keys}) pass the {rules} rules"
        distinct = len(distinct_combinations(kernel, legal))
        if distinct < len(legal):
            message += f" ({distinct} distinct kernels: an auto setting makes some combinations the same kernel)"
        if counts:
            message += "; rejected (by the first rule each breaks): " + ", ".join(f"{code} ({n})"
                                                                                  for code, n in counts.items())
        out.append(Diagnostic(message, kernel.pos, code="choices", severity="note" if legal else "error"))
    return out


def _source_order(d: Diagnostic) -> tuple:
    return d.pos.line, d.pos.column


def _dead_options(kernel, legal: list[dict[str, Any]],
                  rejected: list[tuple[dict[str, Any], list[Diagnostic]]]) -> list[Diagnostic]:
    """A warning at each option of a ``{…}`` choice that no legal combination uses, with a rule that rejects
    every combination holding it (else the first rule of the first) and the options that some legal one uses.
    None when nothing is legal: the summary is an error then."""
    out: list[Diagnostic] = []
    if not legal:
        return out
    for key, choice in kernel.choices().items():
        used = [any(p[key] == option for p in legal) for option in choice.options]
        valid = tuple(s for s, ok in zip(choice.spellings, used) if ok)
        for i, (option, ok) in enumerate(zip(choice.options, used)):
            if ok:
                continue
            with_it = [errs for picks, errs in rejected if picks[key] == option]
            common = set.intersection(*({d.code for d in errs} for errs in with_it))
            why = next((d for d in with_it[0] if d.code in common), with_it[0][0])  # the rule it always breaks
            pos = choice.positions[i] if i < len(choice.positions) else choice.pos
            out.append(Diagnostic(f"{key} = {choice.spellings[i]} is in no legal combination: {why.message}", pos,
                                  valid, code="dead-option", severity="warning"))
    return out
