"""Count what a problem's PyTorch reference does for one workload, without allocating its tensors.

The reference (and the problem's own input generator) runs on ``meta`` tensors under a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that sees every aten op. It records:

- **matmul FLOPs by precision** for the ops that run on tensor cores: ``mm``, ``addmm``, ``bmm``,
  ``baddbmm``, ``addbmm``, ``mv``, ``dot``, ``_scaled_mm``, ``_int_mm``, ``_grouped_mm``, ``convolution``
  and scaled-dot-product attention (``F.scaled_dot_product_attention``, caught before it decomposes, and
  its flash / efficient / cuDNN aten ops). 2 FLOP per multiply-accumulate. A matmul is priced at the
  wider precision of its operands (:func:`ucutlass.sol.precision.matmul_precision`), where a value keeps
  the precision of its source while it is only converted, rearranged or scaled — so the
  dequantize-then-matmul of an fp8 reference counts at fp8.
- **causal masks**: ``is_causal``, and explicit masks built by ``triu``/``tril`` of a constant
  (additive ``-inf`` masks, ``masked_fill``, ``where``) are recognised; only the unmasked scores are
  counted — the lower triangle including the diagonal, for any Sq and Sk — in both Q·Kᵀ and P·V.
- **minimum DRAM bytes**: every tensor input read once and every output (as the definition declares it)
  written once; intermediates are fused away; scalar inputs are 0 bytes. An input that the reference
  only indexes (``w[e]``, ``w[idx]``, ``w[a:b]``, ``embedding``) costs only the slices it touches, and an
  input it never reads costs nothing.
- **elementwise and reduction work** (1 FLOP per element of the largest operand), reported but not part
  of T_SOL: it runs on CUDA cores beside the tensor cores and the published SOLAR bounds leave it out.

Data-dependent work (MoE routing, ``nonzero``, ``.item()``) needs values. Tensors small enough
(integer/bool up to 256 MiB, floating up to 8 MiB) carry a *shadow*: the same values on the CPU, made by
the same ops from the workload's seed (or from caller-given real inputs). ``nonzero`` and friends then give
the real shapes and only the experts that receive tokens are counted and loaded. Where values are
unknown, ``.item()`` returns a placeholder and ``nonzero`` assumes every element is non-zero (an upper
bound); both are recorded in the notes.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class OpCount:
    """FLOPs of one kind of tensor-core op in a reference (calls with equal op, precision and note merged).

    Attributes:
        op: aten op name (``aten.mm``) or ``scaled_dot_product_attention``.
        precision: the tensor-core precision it is priced at (``bf16``, ``tf32``, ``fp8`` …), or ``simt``
            for the elementwise/reduction total (not part of T_SOL).
        flops: FLOP summed over its calls.
        calls: how many calls were merged.
        note: how it was counted (masks, fallbacks).
    """

    op: str
    precision: str
    flops: int
    calls: int = 1
    note: str = ""

    def to_json(self) -> dict:
        return {"op": self.op, "precision": self.precision, "flops": self.flops, "calls": self.calls,
                "note": self.note}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpCount:
        """The inverse of :meth:`to_json`: ``OpCount.from_json(c.to_json()) == c``.

        Raises:
            ValueError: a field is missing or of the wrong type.
        """
        _check_keys(data, {"op", "precision", "flops", "calls", "note"}, "OpCount")
        return cls(op=_str(data["op"]), precision=_str(data["precision"]), flops=_number(data["flops"]),
                   calls=_int(data["calls"]), note=_str(data["note"]))


def op_counts(tracer) -> tuple[tuple[OpCount, ...], dict[str, int]]:
    """A :class:`~ucutlass.sol.tracer.Tracer`'s records merged by (op, precision, note), the elementwise and
    reduction total last as ``simt``, and the FLOP per precision (tensor-core precisions only)."""
    merged: dict[tuple, list] = {}
    for r in tracer.records:
        key = (r.op, r.precision, r.note)
        entry = merged.setdefault(key, [0, 0])
        entry[0] += r.effective
        entry[1] += 1
    per_op = [OpCount(op=k[0], precision=k[1], flops=v[0], calls=v[1], note=k[2]) for k, v in merged.items()]
    by_prec: dict[str, int] = {}
    for c in per_op:
        by_prec[c.precision] = by_prec.get(c.precision, 0) + c.flops
    if tracer.other_flops:
        per_op.append(OpCount(op="elementwise and reductions", precision="simt", flops=tracer.other_flops,
                              calls=tracer.other_calls, note="CUDA cores; not part of T_SOL"))
    return tuple(per_op), by_prec


@dataclass(frozen=True)
class Counts:
    """What one workload of a reference does.

    Attributes:
        flops_by_precision: tensor-core FLOP per precision.
        per_op: merged :class:`OpCount` records, in order of first appearance (the ``simt`` record last).
        input_bytes / output_bytes: minimum DRAM bytes per input and output.
        other_flops: elementwise and reduction FLOP (CUDA cores; not in T_SOL).
        notes: how the count was made, where it is uncertain.
        data_dependent: the work depended on input values (routing); the seed or inputs used matter.
        seed: the seed the inputs were generated with (None when the caller gave the inputs).
    """

    flops_by_precision: Mapping[str, int]
    per_op: tuple[OpCount, ...]
    input_bytes: Mapping[str, int]
    output_bytes: Mapping[str, int]
    other_flops: int = 0
    notes: tuple[str, ...] = ()
    data_dependent: bool = False
    seed: int | None = None

    def to_json(self) -> dict:
        """A JSON-able dict; :meth:`from_json` gives back an equal ``Counts`` (what the counting process sends)."""
        return {"flops_by_precision": dict(self.flops_by_precision), "per_op": [o.to_json() for o in self.per_op],
                "input_bytes": dict(self.input_bytes), "output_bytes": dict(self.output_bytes),
                "other_flops": self.other_flops, "notes": list(self.notes), "data_dependent": self.data_dependent,
                "seed": self.seed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Counts:
        """The inverse of :meth:`to_json`, checking every field (the data comes from another process).

        Raises:
            ValueError: a field is missing or of the wrong type.
        """
        _check_keys(data, {"flops_by_precision", "per_op", "input_bytes", "output_bytes", "other_flops", "notes",
                           "data_dependent", "seed"}, "Counts")
        if not isinstance(data["per_op"], list) or not isinstance(data["notes"], list):
            raise ValueError("Counts: per_op and notes must be lists")
        if not isinstance(data["data_dependent"], bool):
            raise ValueError("Counts: data_dependent must be a bool")
        return cls(flops_by_precision=_numbers(data["flops_by_precision"]),
                   per_op=tuple(OpCount.from_json(o) for o in data["per_op"]),
                   input_bytes=_numbers(data["input_bytes"]), output_bytes=_numbers(data["output_bytes"]),
                   other_flops=_number(data["other_flops"]), notes=tuple(_str(n) for n in data["notes"]),
                   data_dependent=data["data_dependent"], seed=None if data["seed"] is None else _int(data["seed"]))

    @property
    def flops(self) -> int:
        """Tensor-core FLOP over all precisions."""
        return sum(self.flops_by_precision.values())

    @property
    def bytes(self) -> int:
        """Minimum DRAM bytes: inputs read once plus outputs written once."""
        return sum(self.input_bytes.values()) + sum(self.output_bytes.values())


def _check_keys(data, keys: set, what: str) -> None:
    if not isinstance(data, Mapping) or set(data) != keys:
        got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
        raise ValueError(f"{what}: expected the fields {sorted(keys)}, got {got}")


def _str(v) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


def _int(v) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"expected an integer, got {v!r}")
    return v


def _number(v) -> int | float:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    return v


def _numbers(d) -> dict[str, int | float]:
    if not isinstance(d, Mapping):
        raise ValueError(f"expected an object of numbers, got {d!r}")
    return {_str(k): _number(v) for k, v in d.items()}


def workload_seed(workload) -> int:
    """The seed used for a workload's inputs when none is given: stable, from its uuid (31 bits)."""
    return int(hashlib.sha256(workload.uuid.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def count_workload(problem, workload, *, inputs: Mapping[str, Any] | None = None,
                   seed: int | None = None) -> Counts:
    """Run ``problem``'s reference for ``workload`` on meta tensors and count it, in this process.

    The reference is the problem's code: only trusted code runs it here (the counting process of
    :mod:`ucutlass.sol.isolation`, tests). :func:`ucutlass.sol.analyze` and :func:`ucutlass.sol.counts_for`
    run this in a child process, with a deadline.

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        workload: one of its workloads.
        inputs: real inputs (any device) to count from instead of generating them; their values decide
            data-dependent work exactly. Large tensors are only read for their shape and dtype.
        seed: seed for generated inputs; default :func:`workload_seed`.

    Returns:
        The :class:`Counts`.

    Raises:
        SolError: an op cannot run on meta tensors and its input values are unknown.
        ProblemError: the problem's inputs or reference are malformed.
    """
    import torch

    from .tracer import Tracer

    tracer = Tracer()
    module = problem.reference_module()
    used_seed = None
    # the caller's RNG state is left as it was (the grader may be generating inputs in this process)
    with torch.random.fork_rng(devices=[]), tracer.dispatch():
        if inputs is None:
            used_seed = workload_seed(workload) if seed is None else int(seed)
            meta_inputs = _generate(problem, workload, used_seed, module, tracer)
        else:
            meta_inputs = {n: tracer.adopt(v) for n, v in inputs.items()}
        tracer.start_counting(meta_inputs)
        with tracer.functions():
            result = problem.run_reference(meta_inputs, module=module)
    outputs = problem.name_outputs(result) if not isinstance(result, dict) else result

    axes = problem.resolve_axes(workload)
    output_bytes = {}
    notes = list(tracer.notes)
    for name, spec in problem.outputs.items():
        shape = problem.shape(spec, axes)
        size = torch.empty((), dtype=_dtype(spec.dtype)).element_size()
        output_bytes[name] = 0 if shape is None else math.prod(shape) * size
        got = outputs.get(name)
        if isinstance(got, torch.Tensor) and shape is not None and tuple(got.shape) != tuple(shape):
            notes.append(f"output {name!r}: the reference returns shape {tuple(got.shape)}, the definition "
                         f"declares {tuple(shape)}; bytes follow the definition")
    input_bytes = tracer.input_bytes(meta_inputs)
    for name, value in meta_inputs.items():
        if isinstance(value, torch.Tensor) and input_bytes[name] == 0 and value.numel():
            notes.append(f"input {name!r} is never read by the reference: 0 bytes")
    per_op, by_prec = op_counts(tracer)
    return Counts(flops_by_precision=by_prec, per_op=per_op, input_bytes=input_bytes,
                  output_bytes=output_bytes, other_flops=tracer.other_flops, notes=tuple(notes),
                  data_dependent=tracer.data_dependent, seed=used_seed)


def _dtype(name: str):
    from ..problem import torch_dtype

    return torch_dtype(name)


@contextlib.contextmanager
def _cpu_generators_for_meta():
    """While a problem's generator runs on meta: ``torch.Generator(device=meta)``, which torch refuses (meta is
    no accelerator), makes a CPU generator; random ops on meta take one (L2_015, L2_078 of SOL-ExecBench
    seed their own ``torch.Generator(device=device)``)."""
    import torch

    real = torch.Generator

    class Generator(real):
        def __new__(cls, device="cpu"):
            device = torch.device(device)
            return real.__new__(cls, "cpu" if device.type == "meta" else device)

        def __init__(self, device="cpu"):
            pass  # made by __new__

    torch.Generator = Generator
    try:
        yield
    finally:
        torch.Generator = real


def _generate(problem, workload, seed, module, tracer) -> dict[str, Any]:
    """Inputs on meta, made under the tracer so small ones get CPU shadows from ``seed``."""
    import torch

    from ..errors import ProblemError
    from ..problem import random_value

    if problem.custom_inputs_entrypoint:
        # The problem's own generator, on meta under the tracer: its small tensors (routing ids, scalar
        # flags) get real values on the CPU, its large ones are never allocated.
        fn = getattr(module, problem.custom_inputs_entrypoint, None)
        if not callable(fn):
            raise ProblemError(f"{problem.id}: custom_inputs_entrypoint {problem.custom_inputs_entrypoint!r} "
                               "is not defined in the reference")
        torch.default_generator.manual_seed(seed)  # the CPU generator only: shadows are made on the CPU
        with _cpu_generators_for_meta():
            made = fn({**problem.resolve_axes(workload), **workload.scalar_inputs()}, torch.device("meta"))
        missing = [n for n in problem.inputs if n not in made]
        if missing:
            raise ProblemError(f"{problem.id}: {problem.custom_inputs_entrypoint} made no input(s) {missing}")
        return {n: made[n] for n in problem.inputs}
    with tracer.paused():
        made = problem.make_inputs(workload, device="meta")
    torch.default_generator.manual_seed(seed)
    for name, value in made.items():
        # indices and masks steer control flow; random floats do not (and would cost CPU time)
        if isinstance(value, torch.Tensor) and not value.is_floating_point() and tracer.shadow_fits(value):
            kind = workload.inputs.get(name, {}).get("type", "random")
            if kind == "random":
                with tracer.paused():
                    real = random_value(tuple(value.shape), value.dtype, torch.device("cpu"))
                tracer.set_shadow(value, real)
    return made


__all__ = ["OpCount", "Counts", "count_workload", "workload_seed"]
