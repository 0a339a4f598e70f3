"""Zeros added to a gemm's K or N where rows would not be 16-byte aligned (issue 17): TMA reads rows of 16-byte
multiples, and below 4 bytes (an odd bf16 extent) no mainloop reads them at all (sm90.align-cp-async). A zero
padding of K leaves the sum unchanged; a padding of N adds columns that are sliced off d. ``tr`` is the
:class:`~.partition.Translator` whose steps get the pad's step.
"""

from __future__ import annotations

from .steps import Step, node_val, ref_line
from .symbols import values_on_workloads


def k_pad(tr, node, k: int, dtype: str) -> str:
    """The zeros to add to K so that every row of a and b (K-contiguous, or b's K rows) starts 16-byte aligned
    (TMA; sm90.align-cp-async below that), as text: a number when K is one constant, else a step
    ``kpad = (8 - K % 8) % 8`` over K's axis expression (as examples/pipeline_score_value.ucut does); "" when K
    is aligned on every workload of the problem (K's expression evaluated on each; the captured ones where it
    has none) or the operands are f32 (3xTF32's cp.async mainloop reads any alignment: ``alignment = auto``)."""
    per = {"bf16": 8, "f16": 8, "f8e4m3": 16, "f8e5m2": 16}.get(dtype)
    ks = [k, *(node_val(o.args[-2]).shape[-1] for o in tr.pairs.get(node, []))]
    if per is None:
        return ""
    text = tr.fmt(k, ks[1:])
    every = values_on_workloads(tr.problem, text) or ks
    if all(x % per == 0 for x in every):
        return ""
    if len(set(every)) == 1:
        return str((-k) % per)
    name = tr.fresh(f"{node.name}_kpad", reserve=True)
    tr.steps.append(Step(name, f"({per} - {text} % {per}) % {per}", "torch", ref_line(node, tr.problem.id)))
    return name


def n_pad(tr, node, n: int, out: str) -> tuple[str, int, str] | None:
    """``(zeros, zeros at the captured workload, N)`` as text, to add to N so that d's rows are 16-byte aligned
    (TMA; sm90.align-cp-async below that) and slice back: numbers when N is one constant, a step
    ``npad = (8 - N % 8) % 8`` over N's axis expression when it varies (bf16/f16: evaluated on every workload);
    None when N is aligned everywhere."""
    per = {"bf16": 8, "f16": 8, "f32": 4}.get(out)
    ns = [n, *(node_val(o).shape[-1] for o in tr.pairs.get(node, []))]
    if per is None:
        return None
    if len(set(ns)) == 1:
        return (str((-n) % per), (-n) % per, str(n)) if n % per else None
    text = tr.fmt(n, ns[1:])
    every = values_on_workloads(tr.problem, text) if out != "f32" else None
    if every is None or all(x % per == 0 for x in every):
        return None
    name = tr.fresh(f"{node.name}_npad", reserve=True)
    tr.steps.append(Step(name, f"({per} - {text} % {per}) % {per}", "torch", ref_line(node, tr.problem.id)))
    return name, (-n) % per, text
