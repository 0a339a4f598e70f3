"""The convolution family's launcher: a compiled ``kernel NAME : conv`` called on torch tensors.

The shared object exports the common C ABI (:mod:`.base`) with ptrs ``a, b, [c,] d`` and the epilogue's tensor inputs,
extents ``N``, the activation's spatial dims, ``C``, ``K``, the filter's spatial dims
(:func:`ucutlass.codegen.abi_of`), no knobs. :class:`ConvCompiledKernel` checks every tensor first (device, dtype,
rank, packed channels-last, extents that agree, the output's spatial extents from stride, padding and dilation) and
names the operand at fault.
"""

from __future__ import annotations

import ctypes
from typing import Any, Mapping, Sequence

# front names this module uses (one place to repoint)
from ..codegen import ABI_VERSION, abi_of
from ..errors import KernelRuntimeError
from ..ir import ConvKernel, output_extent, spatial_of
from .base import KernelLauncher
from .device import check_device


class ConvCompiledKernel(KernelLauncher):
    """A compiled conv kernel loaded from its shared object.

    Call with torch tensors by operand name (destination passing: ``d`` is written)::

        conv = ConvCompiledKernel(result.so_path, kernel)
        conv(a=x, b=w, d=out, bias=bias)     # 1-D: x [N, W, C], w [K, S, C], out [N, Q, K], bias [K]

    Raises:
        KernelRuntimeError: a bad argument (named) or a kernel failure with CUTLASS's status and message.
    """

    family = "conv"
    output = "d"
    abi_version = ABI_VERSION

    def _abi_of(self, kernel: ConvKernel):
        return abi_of(kernel)

    def _expected_digest(self) -> str:
        return self.kernel.build_digest()

    def _extents_array(self, ext: Mapping[str, int]):
        return (ctypes.c_int64 * len(self.abi.extents))(*[int(ext[e]) for e in self.abi.extents])

    def can_implement(self, extents: Mapping[str, int]) -> tuple[bool, str]:
        """Whether the kernel accepts ``extents`` (by dim name, :attr:`abi` ``.extents``), and CUTLASS's reason if
        not."""
        return self._can_implement_array(self._extents_array(extents))

    def _plan(self, values: Sequence[Any]) -> tuple:
        """Check a, b, d and the epilogue's inputs; the plan's sizes are the extents by dim name."""
        import torch

        k = self.kernel
        tensors = dict(zip(self.abi.ptr_names, values))
        a = tensors["a"]
        if type(a) is not torch.Tensor or a.device.type != "cuda":
            raise KernelRuntimeError(f"{k.name}: operands must be CUDA tensors (a is "
                                     f"{getattr(a, 'device', type(a).__name__)})")
        check_device(k.target, a.device)
        ext: dict[str, int] = {}
        inputs = {i.name: i for i in (*k.epilogue_inputs, *k.epilogue_outputs)}
        for name in self.abi.ptr_names:
            t = tensors[name]
            decl = getattr(k, name) if name in ("a", "b", "c", "d") else inputs[name]
            if type(t) is not torch.Tensor:
                raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
            if t.device != a.device:
                raise KernelRuntimeError(f"{name}: on {t.device}, but a is on {a.device}")
            if t.dtype != getattr(torch, decl.dtype.torch_name):
                raise KernelRuntimeError(f"{name}: dtype {t.dtype}, the kernel was compiled for {decl.dtype.value}")
            dims = decl.dims  # scalars are not pointers: every pointer is a tensor
            if t.dim() != len(dims) or not t.is_contiguous():
                raise KernelRuntimeError(f"{name}: must be a contiguous [{', '.join(dims)}] tensor (channels last), "
                                         f"got shape {list(t.shape)}{'' if t.is_contiguous() else ' not contiguous'}")
            for dim, size in zip(dims, t.shape):
                if ext.setdefault(dim, int(size)) != int(size):
                    raise KernelRuntimeError(f"{name}: {dim} = {int(size)}, but an earlier operand has {dim} = "
                                             f"{ext[dim]}")
        for i, (size, window, out) in enumerate(zip(spatial_of(k.a.dims), spatial_of(k.b.dims),
                                                    spatial_of(k.d.dims))):
            want = output_extent(ext[size], ext[window], k.stride[i], k.padding[i], k.dilation[i])
            if ext[out] != want:
                raise KernelRuntimeError(f"d: {out} = {ext[out]}, but {size} = {ext[size]} with filter {window} = "
                                         f"{ext[window]}, stride {k.stride[i]}, padding {k.padding[i]}, dilation "
                                         f"{k.dilation[i]} gives {want}")
        arr = self._extents_array(ext)
        if self._is_empty(ext):
            return a.device, arr, 0, ext
        ok, why = self.can_implement(ext)
        if not ok:
            raise KernelRuntimeError(f"{k.name} ({k.config_name()}) cannot run {ext}: {why}")
        nbytes = int(self._lib.ucut_workspace_size(arr, self._knobs))
        return a.device, arr, nbytes, ext

    def _is_empty(self, sizes: Any) -> bool:
        """No output: a zero batch, output extent or channel count."""
        return any(int(v) == 0 for v in sizes.values())
