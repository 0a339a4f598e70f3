"""The attention family's launcher: a compiled ``kernel NAME : attention`` (FMHA) called on torch tensors.

The shared object exports the GEMM's C ABI (:mod:`.base`): ``ucut_run(ptrs, scalars, extents, knobs, workspace,
workspace_bytes, stream)`` with ptrs ``q, k, v, o[, lse][, bias]``, extents ``B, Sq, Sk, Hq, Hkv, D``
(:data:`ucutlass.ir.EXTENTS`), scalars the problem-bound ``scale`` / ``softcap`` (by name: ``attn(..., softcap=50.0)``)
and no knobs. A kernel with a score modifier writes its run-time values to the kernel's constant memory on the call's
stream before each launch: calls of one loaded kernel on two streams at once may see each other's bias or scalars. :class:`AttentionCompiledKernel` checks every
tensor first (device, dtype, rank, contiguity, shapes, 16-byte alignment) and names the operand at fault; binding
one to a problem's tensors is :mod:`ucutlass.bind.attention`'s.
"""

from __future__ import annotations

import ctypes
from typing import Any, Mapping, Sequence

from ..bind.attention import extents_of
# front names this module uses (one place to repoint)
from ..codegen import ABI_VERSION, abi_of
from ..errors import KernelRuntimeError
from ..ir import EXTENTS, AttentionKernel
from .base import KernelLauncher
from .device import check_device


class AttentionCompiledKernel(KernelLauncher):
    """A compiled attention kernel loaded from its shared object.

    Call with torch tensors by operand name (destination passing: ``o`` and ``lse`` are written)::

        attn = AttentionCompiledKernel(result.so_path, kernel)
        attn(q=q, k=k, v=v, o=out)        # BSHD: q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], out like q

    Raises:
        KernelRuntimeError: a bad argument (named) or a kernel failure with CUTLASS's status and message.
    """

    family = "attention"
    output = "o"
    abi_version = ABI_VERSION

    def _abi_of(self, kernel: AttentionKernel):
        return abi_of(kernel)

    def _expected_digest(self) -> str:
        return self.kernel.build_digest()

    def _extents_array(self, ext: Mapping[str, int]):
        return (ctypes.c_int64 * len(EXTENTS))(*[int(ext[e]) for e in EXTENTS])

    def can_implement(self, extents: Mapping[str, int]) -> tuple[bool, str]:
        """Whether the kernel accepts ``extents`` (``{"B", "Sq", "Sk", "Hq", "Hkv", "D"}``), and why not."""
        return self._can_implement_array(self._extents_array(extents))

    def _plan(self, values: Sequence[Any]) -> tuple:
        """Check q, k, v, o[, lse] (CUDA, dtype, contiguous, shapes that agree); the plan's sizes are the extents."""
        import torch

        k = self.kernel
        tensors = dict(zip(self.abi.ptr_names, values))
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
