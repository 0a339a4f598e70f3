"""The attention family's binding: q, k, v, o[, lse][, bias] and the scalars scale / softcap ↔ a problem's tensors,
and the extents of their shapes.

:func:`bind_attention` is :func:`ucutlass.bind.bind` for ``kernel NAME : attention`` (the grader and tuner use it
through that table); :func:`extents_of` reads ``B, Sq, Sk, Hq, Hkv, D`` from operand shapes, for a binding's
workloads and for the launcher's checks of a call's tensors alike (:mod:`ucutlass.runtime.attention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..errors import CheckError, Diagnostic
# front names this module uses (one place to repoint)
from ..ir import EXTENTS, AttentionKernel, Pos

#: Sq must be a multiple of this on sm90 (16 bytes of bf16/f16; example 88's can_implement).
SM90_SEQ_ALIGNMENT = 8


def _dims_extents(kernel: AttentionKernel, name: str, shape: Sequence[int]) -> dict[str, int]:
    """Extents named by operand ``name``'s declared dims (the head dim under ``D``)."""
    op = getattr(kernel, name)
    out: dict[str, int] = {}
    for dim, size in zip(op.dims, shape):
        out["D" if dim.isdigit() else dim] = int(size)
    return out


def _merge(kernel: AttentionKernel, found: dict[str, tuple[int, str]], name: str, shape: Sequence[int],
           errors: list[str]) -> None:
    op = getattr(kernel, name)
    if len(shape) != len(op.dims):
        errors.append(f"{name}: expected {len(op.dims)} dims [{', '.join(op.dims)}], got shape {list(shape)}")
        return
    for dim, size in _dims_extents(kernel, name, shape).items():
        if dim in found and found[dim][0] != size:
            errors.append(f"{name}: {dim} = {size}, but {found[dim][1]} gives {dim} = {found[dim][0]}")
        found.setdefault(dim, (size, name))


def _merge_bias(kernel: AttentionKernel, found: dict[str, tuple[int, str]], shape: Sequence[int],
                errors: list[str]) -> None:
    """The bias's extents (its Sq, Sk and B must be the q and k ones; a dim ``1`` must be 1)."""
    dims = kernel.bias.dims
    if len(shape) != len(dims):
        errors.append(f"bias: expected {len(dims)} dims [{', '.join(dims)}], got shape {list(shape)}")
        return
    for dim, size in zip(dims, shape):
        if dim.isdigit():
            if int(size) != int(dim):
                errors.append(f"bias: the dim declared {dim} is {size} (one bias for every head)")
            continue
        if dim in found and found[dim][0] != size:
            errors.append(f"bias: {dim} = {size}, but {found[dim][1]} gives {dim} = {found[dim][0]}")
        found.setdefault(dim, (int(size), "bias"))


def extents_of(kernel: AttentionKernel, shapes: Mapping[str, Sequence[int]]) -> tuple[dict[str, int], list[str]]:
    """Extents ``B, Sq, Sk, Hq, Hkv, D`` from operand shapes, and the disagreements found (as messages).

    K and V declared over ``Hq`` (or ``Sq``) make Hkv = Hq (Sk = Sq). The head dim must equal the declared one.
    """
    found: dict[str, tuple[int, str]] = {}
    errors: list[str] = []
    for name in ("q", "k", "v", "o", "lse"):
        if name in shapes and getattr(kernel, name) is not None:
            _merge(kernel, found, name, shapes[name], errors)
    if kernel.bias is not None and "bias" in shapes:
        _merge_bias(kernel, found, shapes["bias"], errors)
    ext = {k: v for k, (v, _) in found.items()}
    ext.setdefault("Hkv", ext.get("Hq", 0))
    ext.setdefault("Sk", ext.get("Sq", 0))
    ext = {e: ext[e] for e in EXTENTS if e in ext}
    if ext.get("D") is not None and ext["D"] != kernel.head_dim:
        errors.append(f"head dim D = {ext['D']}, the kernel was compiled for {kernel.head_dim}")
    if ext.get("Hkv") and ext.get("Hq") and ext["Hq"] % ext["Hkv"]:
        errors.append(f"Hq = {ext['Hq']} is not a multiple of Hkv = {ext['Hkv']}")
    if getattr(kernel.target, "value", kernel.target) == "sm90" and ext.get("Sq", 0) % SM90_SEQ_ALIGNMENT:
        # fmha_collective_tma_warpspecialized.hpp, can_implement: get<2>(problem_size) % Alignment == 0, with
        # Alignment = 16 bytes of elements (TMA); example 88 has no masked tail for Sq.
        errors.append(f"Sq = {ext['Sq']} is not a multiple of {SM90_SEQ_ALIGNMENT}: CUTLASS's sm90 FMHA (example 88) "
                      f"loads Q in 16-byte TMA rows; pad the sequence to {-(-ext['Sq'] // 8) * 8}")
    if kernel.mask == "causal" and ext.get("Sq", 0) > ext.get("Sk", 0):
        errors.append(f"causal attention needs Sq <= Sk (Sq = {ext['Sq']}, Sk = {ext['Sk']})")
    return ext, errors


@dataclass(frozen=True)
class AttentionSlot:
    """One bound operand: the kernel's name, the problem tensor and its declared dims."""

    arg: str
    tensor: str
    dims: tuple[str, ...]
    is_output: bool
    pos: Pos


@dataclass(frozen=True)
class AttentionBinding:
    """An attention kernel bound to a problem (the interface of :class:`ucutlass.bind.Binding`)."""

    kernel: AttentionKernel
    problem: Any
    slots: tuple[AttentionSlot, ...]

    def extents(self, workload: Any) -> dict[str, int]:
        """Extents ``B, Sq, Sk, Hq, Hkv, D`` of a workload.

        Raises:
            CheckError: operands disagree, Hq is not a multiple of Hkv, or the head dim differs.
        """
        axes = self.problem.resolve_axes(workload)
        shapes = {}
        for s in self.slots:
            if not s.dims:
                continue  # a scalar
            spec = self.problem.inputs.get(s.tensor) or self.problem.outputs[s.tensor]
            shapes[s.arg] = tuple(self.problem.shape(spec, axes) or ())
        ext, errors = extents_of(self.kernel, shapes)
        if errors:
            label = workload.label() if hasattr(workload, "label") else str(dict(workload))
            raise CheckError([Diagnostic(f"{e} (workload {label})", self.kernel.pos, code="bind-extent")
                              for e in errors])
        return ext

    def callable(self, compiled: Any) -> Callable[..., None]:
        """A destination-passing ``fn(*inputs, *outputs)`` in the problem's definition order."""
        names = list(self.problem.inputs) + list(self.problem.outputs)
        tensor_of = {s.arg: s.tensor for s in self.slots}
        order = [names.index(tensor_of[arg]) for arg in compiled.abi.ptr_names + compiled.abi.scalar_names]

        def run(*args: Any) -> None:
            if len(args) != len(names):
                raise TypeError(f"expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
            compiled.call([args[i] for i in order])

        run.__name__ = f"{self.kernel.name}_on_{self.problem.id}"
        run.kernel = compiled  # type: ignore[attr-defined]
        return run


def bind_attention(kernel: AttentionKernel, problem: Any) -> AttentionBinding:
    """Bind an attention kernel's operands to a problem's tensors and check every workload.

    Raises:
        CheckError: an unbound operand, an unknown name (valid names listed), a dtype mismatch, an unused
            problem tensor, or extents that disagree on some workload.
    """
    diags: list[Diagnostic] = []
    slots: list[AttentionSlot] = []
    for op in kernel.operands:
        out = op.name in ("o", "lse")
        pool = problem.outputs if out else problem.inputs
        arrow = "->" if out else "<-"
        if op.binding is None:
            diags.append(Diagnostic(f"{op.name} is not bound to a problem {'output' if out else 'input'} (write "
                                    f"`{arrow} NAME`)", op.pos, tuple(pool), code="bind-missing"))
            continue
        if op.binding not in pool:
            diags.append(Diagnostic(f"problem {problem.id} has no {'output' if out else 'input'} {op.binding!r}",
                                    op.pos, tuple(pool), code="bind-unknown"))
            continue
        spec = pool[op.binding]
        if spec.dtype != op.dtype.torch_name:
            diags.append(Diagnostic(f"{op.name} is {op.dtype.value} but {problem.id}.{op.binding} is {spec.dtype}",
                                    op.pos, code="bind-dtype"))
        slots.append(AttentionSlot(op.name, op.binding, op.dims, out, op.pos))
    for sc in kernel.scalars:
        if sc.binding not in problem.inputs:
            diags.append(Diagnostic(f"problem {problem.id} has no input {sc.binding!r} (the {sc.name} scalar)", sc.pos,
                                    tuple(n for n, spec in problem.inputs.items() if spec.shape is None),
                                    code="bind-unknown"))
            continue
        if problem.inputs[sc.binding].shape is not None:
            diags.append(Diagnostic(f"{sc.name} is a scalar but {problem.id}.{sc.binding} is a tensor", sc.pos,
                                    code="bind-shape"))
            continue
        slots.append(AttentionSlot(sc.name, sc.binding, (), False, sc.pos))
    used = {s.tensor for s in slots}
    for name in list(problem.inputs) + list(problem.outputs):
        if name not in used:
            diags.append(Diagnostic(f"problem tensor {name!r} of {problem.id} is not bound to any operand of "
                                    f"kernel {kernel.name!r}", kernel.pos, code="bind-unused"))
    if diags:
        raise CheckError(diags)
    binding = AttentionBinding(kernel, problem, tuple(slots))
    for w in problem.workloads:
        binding.extents(w)
    return binding
