"""Call a compiled attention kernel from PyTorch, and bind one to a problem's tensors.

The shared object exports the GEMM's C ABI (:mod:`ucutlass.codegen`): ``ucut_run(ptrs, scalars, extents, knobs,
workspace, workspace_bytes, stream)`` with ptrs ``q, k, v, o[, lse]``, extents ``B, Sq, Sk, Hq, Hkv, D``
(:data:`ucutlass.ir.EXTENTS`), no scalars and no knobs. :class:`AttentionCompiledKernel` checks every
tensor first (device, dtype, rank, contiguity, shapes, 16-byte alignment) and names the operand at fault;
:func:`bind_attention` is :func:`ucutlass.bind.bind` for attention kernels (the grader and tuner use it unchanged).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .codegen import ABI_VERSION, abi_of
from .ir import EXTENTS, AttentionKernel
from .errors import CheckError, Diagnostic, KernelRuntimeError
from .ir import Pos


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


def extents_of(kernel: AttentionKernel, shapes: Mapping[str, Sequence[int]]) -> tuple[dict[str, int], list[str]]:
    """Extents ``B, Sq, Sk, Hq, Hkv, D`` from operand shapes, and the disagreements found (as messages).

    K and V declared over ``Hq`` (or ``Sq``) make Hkv = Hq (Sk = Sq). The head dim must equal the declared one.
    """
    found: dict[str, tuple[int, str]] = {}
    errors: list[str] = []
    for name in ("q", "k", "v", "o", "lse"):
        if name in shapes and getattr(kernel, name) is not None:
            _merge(kernel, found, name, shapes[name], errors)
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


class AttentionCompiledKernel:
    """A compiled attention kernel loaded from its shared object.

    Call with torch tensors by operand name (destination passing: ``o`` and ``lse`` are written)::

        attn = AttentionCompiledKernel(result.so_path, kernel)
        attn(q=q, k=k, v=v, o=out)        # BSHD: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], out like q

    Raises:
        KernelRuntimeError: a bad argument (named) or a kernel failure with CUTLASS's status and message.
    """

    def __init__(self, so_path: str | os.PathLike, kernel: AttentionKernel):
        self.so_path = Path(so_path)
        self.kernel = kernel
        self.abi = abi_of(kernel)
        try:
            lib = ctypes.CDLL(str(self.so_path))
        except OSError as e:
            raise KernelRuntimeError(f"cannot load {self.so_path}: {e}") from None
        self._lib = lib
        lib.ucut_abi_version.restype = ctypes.c_int
        if lib.ucut_abi_version() != ABI_VERSION:
            raise KernelRuntimeError(f"{self.so_path} has ABI {lib.ucut_abi_version()}, expected {ABI_VERSION}")
        lib.ucut_info.restype = ctypes.c_char_p
        lib.ucut_last_error.restype = ctypes.c_char_p
        i64p = ctypes.POINTER(ctypes.c_int64)
        lib.ucut_workspace_size.restype = ctypes.c_size_t
        lib.ucut_workspace_size.argtypes = [i64p, i64p]
        lib.ucut_can_implement.restype = ctypes.c_int
        lib.ucut_can_implement.argtypes = [i64p, i64p]
        lib.ucut_run.restype = ctypes.c_int
        lib.ucut_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_double), i64p, i64p,
                                 ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self.info = json.loads(lib.ucut_info().decode())
        if self.info.get("family") != "attention" or self.info.get("digest") != kernel.build_digest():
            raise KernelRuntimeError(f"{self.so_path} was built from another kernel ({self.info.get('config')}) "
                                     f"than {kernel.config_name()}")
        self._knobs = (ctypes.c_int64 * 1)(0)
        self._scalars = (ctypes.c_double * 1)(0.0)
        self._plans: dict[tuple, tuple] = {}
        self._workspaces: dict[int, Any] = {}
        self._lock = threading.Lock()

    def _extents_array(self, ext: Mapping[str, int]):
        return (ctypes.c_int64 * len(EXTENTS))(*[int(ext[e]) for e in EXTENTS])

    def can_implement(self, extents: Mapping[str, int]) -> tuple[bool, str]:
        """Whether the kernel accepts ``extents`` (``{"B", "Sq", "Sk", "Hq", "Hkv", "D"}``), and why not."""
        rc = self._lib.ucut_can_implement(self._extents_array(extents), self._knobs)
        return rc == 0, "" if rc == 0 else self._lib.ucut_last_error().decode()

    def _plan(self, tensors: Mapping[str, Any]) -> tuple:
        import torch

        from .runtime import check_device

        k = self.kernel
        q = tensors["q"]
        if type(q) is not torch.Tensor or q.device.type != "cuda":
            raise KernelRuntimeError(f"{k.name}: operands must be CUDA tensors (q is "
                                     f"{getattr(q, 'device', type(q).__name__)})")
        check_device(k.target, q.device)
        for name in self.abi.ptr_names:
            t = tensors[name]
            op = getattr(k, name)
            want = getattr(torch, op.dtype.torch_name)
            if type(t) is not torch.Tensor:
                raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
            if t.device != q.device:
                raise KernelRuntimeError(f"{name}: on {t.device}, but q is on {q.device}")
            if t.dtype != want:
                raise KernelRuntimeError(f"{name}: dtype {t.dtype}, the kernel was compiled for {op.dtype.value}")
            if not t.is_contiguous():
                raise KernelRuntimeError(f"{name}: must be contiguous [{', '.join(op.dims)}] (call .contiguous())")
        ext, errors = extents_of(k, {n: tuple(tensors[n].shape) for n in self.abi.ptr_names})
        if errors:
            raise KernelRuntimeError(f"{k.name}: " + "; ".join(errors))
        arr = self._extents_array(ext)
        ok, why = self.can_implement(ext)
        if not ok:
            raise KernelRuntimeError(f"{k.name} ({k.config_name()}) cannot run {ext}: {why}")
        nbytes = int(self._lib.ucut_workspace_size(arr, self._knobs))
        return q.device, arr, nbytes, ext

    def __call__(self, **tensors: Any) -> Any:
        """Run the kernel on tensors by operand name; returns ``o`` (written in place)."""
        names = self.abi.ptr_names
        missing, unexpected = set(names) - tensors.keys(), tensors.keys() - set(names)
        if missing or unexpected:
            raise KernelRuntimeError(f"{self.kernel.name}: arguments are {', '.join(names)}"
                                     + (f"; missing {sorted(missing)}" if missing else "")
                                     + (f"; unexpected {sorted(unexpected)}" if unexpected else ""))
        self.call([tensors[n] for n in names])
        return tensors["o"]

    def call(self, values: Sequence[Any]) -> None:
        """Launch with tensors in ABI order (q, k, v, o[, lse]) on the current torch stream.

        Raises:
            KernelRuntimeError: as :meth:`__call__`.
        """
        import torch

        names = self.abi.ptr_names
        if len(values) != len(names):
            raise KernelRuntimeError(f"{self.kernel.name}: expected {len(names)} tensors ({', '.join(names)})")
        try:
            key = tuple((t.shape, t.stride(), t.dtype, t.device) for t in values)
        except AttributeError:
            key = None
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = self._plan(dict(zip(names, values)))
            if key is not None:
                if len(self._plans) > 256:
                    self._plans.clear()
                self._plans[key] = plan
        device, arr, nbytes, ext = plan
        addresses = [t.data_ptr() for t in values]
        if any(p % 16 for p in addresses):
            bad = names[next(i for i, p in enumerate(addresses) if p % 16)]
            raise KernelRuntimeError(f"{bad}: data pointer is not 16-byte aligned (a sliced view?)")
        index = device.index if device.index is not None else torch.cuda.current_device()
        ws = self._workspaces.get(index)
        if ws is None or ws.numel() < nbytes:
            with self._lock:
                ws = torch.empty(max(nbytes, 256), dtype=torch.uint8, device=f"cuda:{index}")
                self._workspaces[index] = ws
        ptrs = (ctypes.c_void_p * len(names))(*addresses)
        with torch.cuda.device(index):
            stream = torch.cuda.current_stream(index).cuda_stream
            rc = self._lib.ucut_run(ptrs, self._scalars, arr, self._knobs, ctypes.c_void_p(ws.data_ptr()),
                                    ws.numel(), ctypes.c_void_p(stream))
        if rc != 0:
            from .runtime import _status_text

            raise KernelRuntimeError(f"{self.kernel.name} ({self.kernel.config_name()}) failed on {ext}: status "
                                     f"{rc} ({_status_text(rc)}): {self._lib.ucut_last_error().decode()}")


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
        order = [names.index(tensor_of[arg]) for arg in compiled.abi.ptr_names]

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
