"""The grouped GEMM family's launcher: a compiled ``kernel NAME : grouped_gemm`` called on torch tensors.

The shared object exports the same C ABI as a GEMM (``ucut_run``, ``ucut_workspace_size``, …; see
``templates/_grouped_gemm.j2``) with extents (M, N, K, G) and the group operand as the last pointer. A call
launches two kernels on the current stream: a one-block setup kernel that reads the group operand on the device and
writes the per-group problem shapes, pointers and strides into the workspace, then CUTLASS's grouped kernel. Nothing
is copied to or from the host, so a call never synchronises; the price is that the group values are not checked on
the host: the setup kernel clamps every group's rows to [0, M] (a bad group vector can leave rows of ``d``
unwritten, never touch memory outside ``a``, ``b`` and ``d``). :meth:`GroupedCompiledKernel.check_groups` checks
them (with a synchronisation) when wanted.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Sequence

from ..errors import KernelRuntimeError
from ..ir import EpilogueInputKind, IndexType, Layout
from .device import check_device
from .gemm import CompiledKernel

__all__ = ["GroupedCompiledKernel", "index_type_of"]


class GroupedCompiledKernel(CompiledKernel):
    """A compiled grouped GEMM loaded from its shared object; call it by operand name (``d`` is written in place)::

        experts = GroupedCompiledKernel(result.so_path, kernel)
        experts(a=x_sorted, b=w, d=out, m_sizes=tokens_per_expert)   # out[rows of g] = x_sorted[rows of g] · w[g]ᵀ

    Tensors: ``a`` [M, K] (contiguous; leading dims fold into M), ``b`` [G, N, K] (or [G, K, N] as declared,
    contiguous), ``d`` [M, N], the group operand [G] (``torch.int32`` or ``torch.int64`` as declared), epilogue
    inputs [N], [G, N] or [M], all on one CUDA device; N and K × element bytes multiples of 16 bytes.

    Raises:
        KernelRuntimeError: bad arguments (named), or the kernel's status code with CUTLASS's message.
    """

    family = "grouped_gemm"
    #: re-checked at every call: what TMA reads (the group operand is read by the setup kernel; the epilogue
    #: vectors' pointers are checked when a call's shapes are first planned)
    aligned = frozenset({"a", "b", "d"})

    def _is_empty(self, sizes) -> bool:
        return sizes[0] == 0 or sizes[1] == 0 or sizes[3] == 0

    def _describe(self, sizes) -> str:
        m, n, k, g = sizes
        return f"M={m} N={n} K={k} G={g}"

    # --- argument checks ---------------------------------------------------------------------------

    def _stacked(self, t: Any, extents: dict[str, int], device: Any) -> Any:
        """Check ``b``: a contiguous 3-D tensor over its declared dims ([G, N, K] or [G, K, N])."""
        import torch

        op = self.kernel.b
        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"b: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device:
            raise KernelRuntimeError(f"b: on {t.device}, but the other operands are on {device}")
        if t.dtype != getattr(torch, op.dtype.torch_name):
            raise KernelRuntimeError(f"b: dtype {t.dtype}, the kernel was compiled for {op.dtype.value} "
                                     f"(torch.{op.dtype.torch_name})")
        if t.dim() != 3:
            raise KernelRuntimeError(f"b: expected a 3-D tensor [{', '.join(op.dims)}] (one matrix per group, "
                                     f"stacked), got shape {tuple(t.shape)}")
        if not t.is_contiguous():
            raise KernelRuntimeError(f"b: must be contiguous [{', '.join(op.dims)}] (call .contiguous())")
        for dim, size in zip(op.dims, t.shape):
            if dim in extents and extents[dim] != size:
                raise KernelRuntimeError(f"b: {dim} = {size}, but another operand gives {dim} = {extents[dim]} "
                                         f"(shape {tuple(t.shape)} for [{', '.join(op.dims)}])")
            extents[dim] = int(size)
        self._check_row_bytes("b", op.dims[-1], int(t.shape[-1]), op.dtype.bytes)
        if t.data_ptr() % 16:
            raise KernelRuntimeError("b: data pointer is not 16-byte aligned (a sliced view?)")
        return t

    @staticmethod
    def _check_row_bytes(name: str, dim: str, extent: int, elem_bytes: int) -> None:
        if (extent * elem_bytes) % 16:
            step = 16 // math.gcd(16, elem_bytes)
            lo = extent // step * step
            raise KernelRuntimeError(
                f"{name}: {dim} = {extent} × {elem_bytes} bytes is not a multiple of 16; TMA needs 16-byte aligned "
                f"rows (nearest valid {dim}: {lo or step} or {lo + step})")

    def _groups(self, t: Any, extents: dict[str, int], device: Any) -> Any:
        import torch

        op = self.kernel.groups
        want = getattr(torch, op.dtype.torch_name)
        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{op.name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device or t.dtype != want:
            raise KernelRuntimeError(f"{op.name}: expected {op.dtype.value} (torch.{op.dtype.torch_name}) on {device}, "
                                     f"got {t.dtype} on {t.device}")
        if t.dim() != 1 or not t.is_contiguous():
            raise KernelRuntimeError(f"{op.name}: expected a contiguous 1-D tensor [G], got shape {tuple(t.shape)}")
        if extents.get("G") is not None and t.numel() != extents["G"]:
            raise KernelRuntimeError(f"{op.name}: {t.numel()} values, but b has G = {extents['G']} groups")
        return t

    def _plan(self, values: Sequence[Any]) -> tuple:
        import torch

        k = self.kernel
        tensors = dict(zip(self.abi.ptr_names, values))
        a = tensors["a"]
        device = a.device if isinstance(a, torch.Tensor) else None
        if device is None or device.type != "cuda":
            raise KernelRuntimeError(f"{k.name}: operands must be CUDA tensors (a is on {device})")
        check_device(k.target, device)
        extents: dict[str, int] = {}
        self._stacked(tensors["b"], extents, device)
        for op in (k.a, k.d):
            self._matrix(op.name, tensors[op.name], op.dims, Layout.row, op.dtype, extents, device)
        self._groups(tensors[k.groups.name], extents, device)
        inputs = {i.name: i for i in k.epilogue_inputs}
        for name in self.abi.ptr_names:
            inp = inputs.get(name)
            if inp is None:
                continue
            t = tensors[name]
            if inp.kind is EpilogueInputKind.col_vector:
                self._vector(name, t, "M", inp.dtype, extents, device)
            elif inp.dims == ("G", "N"):
                if type(t) is not torch.Tensor or tuple(t.shape) != (extents["G"], extents["N"]) or \
                        not t.is_contiguous():
                    shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                    raise KernelRuntimeError(f"{name}: expected a contiguous [G, N] = [{extents['G']}, {extents['N']}] "
                                             f"tensor (one row per group), got {shape}")
                if t.device != device or t.dtype != getattr(torch, inp.dtype.torch_name):
                    raise KernelRuntimeError(f"{name}: expected {inp.dtype.value} on {device}, got {t.dtype} on "
                                             f"{t.device}")
            else:
                self._vector(name, t, "N", inp.dtype, extents, device)
        m, n, kk, g = extents["M"], extents["N"], extents["K"], extents["G"]
        if kk == 0 and m and n:
            raise KernelRuntimeError(f"{k.name}: K = 0 is not supported")
        ext = (ctypes.c_int64 * 4)(m, n, kk, g)
        nbytes = int(self._lib.ucut_workspace_size(ext, self._knobs)) if m and n and g else 0
        return device, ext, nbytes, (m, n, kk, g)

    # --- calling -----------------------------------------------------------------------------------

    def workspace_size(self, m: int, n: int, k: int, g: int = 1) -> int:  # type: ignore[override]
        """Bytes of device workspace for extents (M, N, K, G): CUTLASS's plus the per-group arrays."""
        ext = (ctypes.c_int64 * 4)(m, n, k, g)
        return int(self._lib.ucut_workspace_size(ext, self._knobs))

    def can_implement(self, m: int, n: int, k: int, g: int = 1) -> tuple[bool, str]:  # type: ignore[override]
        """Whether CUTLASS accepts extents (M, N, K, G); the reason when it does not."""
        return self._can_implement_array((ctypes.c_int64 * 4)(m, n, k, g))

    def check_groups(self, groups: Any, m: int) -> None:
        """Check a group operand on the host (this synchronises): sizes >= 0 summing to ``m``, or non-decreasing
        offsets ending at ``m``.

        Raises:
            KernelRuntimeError: which group is wrong, and how.
        """
        values = [int(v) for v in groups.tolist()]
        name = self.kernel.groups.name
        ends = values if name == "m_offsets" else [sum(values[: i + 1]) for i in range(len(values))]
        if name == "m_sizes" and any(v < 0 for v in values):
            bad = next(i for i, v in enumerate(values) if v < 0)
            raise KernelRuntimeError(f"m_sizes[{bad}] = {values[bad]} < 0")
        if name == "m_offsets":
            for i, (lo, hi) in enumerate(zip([0] + values[:-1], values)):
                if hi < lo:
                    raise KernelRuntimeError(f"m_offsets[{i}] = {hi} < m_offsets[{i - 1}] = {lo}: offsets are "
                                             "cumulative row ends, non-decreasing")
        total = ends[-1] if ends else 0
        if total != m:
            raise KernelRuntimeError(f"{name} covers {total} rows, but a has M = {m}")


def index_type_of(dtype: Any) -> IndexType:
    """The :class:`IndexType` of a torch integer dtype (``torch.int32`` → ``i32``).

    Raises:
        KeyError: not int32 or int64.
    """
    return {"torch.int32": IndexType.i32, "torch.int64": IndexType.i64}[str(dtype)]
