"""The GEMM family's launcher: a compiled ``kernel NAME : gemm`` called on torch tensors.

The shared object exports the C ABI of the GEMM templates (``templates/_gemm_common.j2``; see
:mod:`ucutlass.codegen`); loading, the plan cache, the workspace and the launch are :class:`.base.KernelLauncher`'s.
This module checks a call's tensors (device, dtype, shape, strides, 16-byte alignment, batch strides, scale factors)
into the ABI's extents, and reports anything a kernel would reject later with the operand's name.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Mapping, Sequence

# front names this module uses (one place to repoint)
from ..arch import canonical
from ..codegen import ABI_VERSION, Abi, abi_of
from ..errors import KernelRuntimeError
from ..ir import DType, EpilogueInputKind, GemmKernel, Layout, RasterOrder, ReductionMode, Target, split_dim
from .base import KernelLauncher
from .device import check_device

#: ``raster`` and ``reduction_mode`` as the ``knobs`` array codes them (``templates/_gemm_common.j2``).
RASTER_CODE = {RasterOrder.auto: 0, RasterOrder.along_m: 1, RasterOrder.along_n: 2}
REDUCTION_CODE = {ReductionMode.deterministic: 0, ReductionMode.nondeterministic: 1}


def extent_values(abi: Abi, m: int, n: int, k: int, l: int = 1, batch_strides: Mapping[str, int] | None = None,
                  shared_b: bool = True) -> list[int]:
    """The ``extents`` array a kernel of ``abi`` takes for the problem's modes M, N, K (and batch count L).

    The modes go in the order ``abi.extents`` names them: ``M, N, K`` or, for a kernel that swaps AB (CUTLASS runs
    Dᵀ = B·Aᵀ), ``N, M, K``; a batched kernel adds ``L`` and each operand's batch stride: ``batch_strides[name]``
    when given, else packed (M·K for a, N·K for b or 0 when ``shared_b``, M·N for c and d). Pointers need no
    reordering: the ABI names them as declared and the kernel reads each where CUTLASS wants it.
    """
    modes = {"M": m, "N": n, "K": k, "L": l}
    values = [modes[name] for name in abi.extents[:4]]
    packed = {"a": m * k, "b": 0 if shared_b else n * k, "c": m * n, "d": m * n}
    for key in abi.extents[4:]:  # batch_stride_a, ...
        op = key.removeprefix("batch_stride_")
        values.append((batch_strides or {}).get(op, packed[op]))
    return values


class CompiledKernel(KernelLauncher):
    """A compiled GEMM kernel loaded from its shared object.

    Call it with torch tensors by operand name (destination passing: ``d`` is written in place)::

        gemm = CompiledKernel(result.so_path, kernel)
        gemm(a=x, b=w, d=out, bias=b)          # out = epilogue(x · wᵀ, bias)

    Shapes follow the `.ucut` declaration: ``a : bf16[M, K] row`` takes a tensor of shape [..., K]
    whose leading dimensions fold into M (it must be contiguous); a ``col`` operand takes the declared
    shape with column-major strides (e.g. ``x.t()`` of a contiguous tensor).

    Raises:
        KernelRuntimeError: bad arguments (named), or the kernel's status code with CUTLASS's message.
    """

    family = "gemm"
    output = "d"
    abi_version = ABI_VERSION

    def __init__(self, so_path, kernel: GemmKernel):
        super().__init__(so_path, kernel)
        # epilogue inputs and extra outputs (-> in the epilogue) by name: checked alike, in ABI order
        self._inputs = {i.name: i for i in (*kernel.epilogue_inputs, *kernel.epilogue_outputs)}

    def _abi_of(self, kernel: GemmKernel) -> Abi:
        return abi_of(kernel)

    def _expected_digest(self) -> str:
        return canonical(self.kernel).build_digest()  # swap_ab = auto as the rules decide

    def _knob_values(self) -> list[int]:
        """Run-time settings (split_k, raster, swizzle, reduction_mode) of this kernel, in the ABI's knobs order."""
        k = self.kernel
        values = {"split_k": k.split_k, "raster": RASTER_CODE[k.raster], "swizzle": k.swizzle,
                  "reduction_mode": REDUCTION_CODE[k.reduction_mode]}
        return [values[name] for name in self.abi.knobs]

    def _is_empty(self, sizes) -> bool:
        return sizes[0] == 0 or sizes[1] == 0

    def _describe(self, sizes) -> str:
        m, n, k = sizes[:3]
        return f"M={m} N={n} K={k}"

    # --- argument checks ---------------------------------------------------------------------------

    def _matrix(self, name: str, t: Any, dims: tuple[str, ...], layout: Layout, dtype: DType,
                extents: dict[str, int], device: Any, batch: tuple[str, ...] = (), align: int | None = None,
                batch_strides: dict[str, int] | None = None) -> Any:
        """Check one operand; return its 2-D view (one batch's view for a batched operand).

        A batched operand (``batch`` dims declared) is exactly ``[*batch, *dims]``, batch dims outermost; its batch
        strides must be packed unless ``batch_strides`` is given (a, b, c, d: the ABI passes them), where the batch
        dims must fold into one stride (a multiple of the access size; d's batches must not overlap), recorded
        under ``name``. An unbatched one folds leading dims into its first mode (row layout) unless the kernel is
        batched (then it is shared by every batch and must be 2-D; batch stride 0). ``align``: elements per access
        the kernel was built for (16 bytes when None).
        """
        import torch

        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device:
            raise KernelRuntimeError(f"{name}: on {t.device}, but the other operands are on {device}")
        if t.dtype != getattr(torch, dtype.torch_name):
            raise KernelRuntimeError(f"{name}: dtype {t.dtype}, the kernel was compiled for {dtype.value} "
                                     f"(torch.{dtype.torch_name})")
        if batch:
            if t.dim() != len(batch) + 2:
                raise KernelRuntimeError(f"{name}: expected a {len(batch) + 2}-D tensor [{', '.join(batch + dims)}], "
                                         f"got shape {tuple(t.shape)}")
            for dim, size in zip(batch, t.shape):
                if extents.setdefault(dim, int(size)) != size:
                    raise KernelRuntimeError(f"{name}: batch dim {dim} = {size}, but another operand gives {dim} = "
                                             f"{extents[dim]}")
            per_batch = t.shape[-2] * t.shape[-1]
            want_batch = [per_batch * math.prod(t.shape[i + 1:len(batch)]) for i in range(len(batch))]
            if batch_strides is not None:
                batch_strides[name] = self._batch_stride(name, t, len(batch), per_batch,
                                                          align or 16 // math.gcd(16, dtype.bytes))
            elif any(size > 1 and stride != w for size, stride, w in zip(t.shape, t.stride(), want_batch)):
                raise KernelRuntimeError(f"{name}: batch strides {tuple(t.stride()[:len(batch)])} are not packed "
                                         f"(expected {tuple(want_batch)}: each batch's matrix after the other)")
            if not all(t.shape[:len(batch)]):  # no batches: nothing to read, only the extents to record
                for dim, size in zip(dims, t.shape[-2:]):
                    extents.setdefault(dim, int(size))
                return t
            t = t[(0,) * len(batch)]  # one batch's matrix: the layout checks below apply to it
        elif self.kernel.batch and t.dim() != 2:
            raise KernelRuntimeError(f"{name}: declared without batch dims, it is shared by every batch and must be "
                                     f"2-D [{', '.join(dims)}], got shape {tuple(t.shape)}")
        elif self.kernel.batch and batch_strides is not None:
            batch_strides[name] = 0  # one matrix for every batch
        if t.dim() > 2 and layout is Layout.row:
            if not t.is_contiguous():
                raise KernelRuntimeError(f"{name}: a {t.dim()}-D operand folds its leading dimensions into "
                                         f"{dims[0]} and must be contiguous (call .contiguous())")
            t = t.reshape(-1, t.shape[-1])
        if t.dim() != 2:
            raise KernelRuntimeError(f"{name}: expected a 2-D tensor [{', '.join(dims)}], got shape "
                                     f"{tuple(t.shape)}")
        for dim, size in zip(dims, t.shape):
            if dim in extents and extents[dim] != size:
                raise KernelRuntimeError(f"{name}: {dim} = {size}, but another operand gives {dim} = "
                                         f"{extents[dim]} (shape {tuple(t.shape)} for [{', '.join(dims)}])")
            extents[dim] = int(size)
        rows, cols = t.shape
        want = (cols, 1) if layout is Layout.row else (1, rows)
        if any(size > 1 and stride != w for size, stride, w in zip(t.shape, t.stride(), want)):
            raise KernelRuntimeError(f"{name}: strides {tuple(t.stride())} do not match a {layout.value}-major "
                                     f"[{', '.join(dims)}] tensor (expected {want})")
        contiguous_extent = cols if layout is Layout.row else rows
        step = align or 16 // math.gcd(16, dtype.bytes)
        if contiguous_extent % step:
            lo = contiguous_extent // step * step
            contiguous_dim = dims[-1] if layout is Layout.row else dims[0]
            if step * dtype.bytes == 16:
                why = (f"{contiguous_dim} = {contiguous_extent} × {dtype.bytes} bytes is not a multiple of 16; TMA "
                       "needs 16-byte aligned rows")
            else:
                why = (f"{contiguous_dim} = {contiguous_extent} is not a multiple of {step} elements, the alignment "
                       f"this kernel was built with")
            fit = math.gcd(contiguous_extent, step)
            raise KernelRuntimeError(
                f"{name}: {why} (nearest valid {contiguous_dim}: {lo or step} or {lo + step}; this extent needs a "
                f"kernel built with alignment = {fit} or less)")
        if t.data_ptr() % 16:
            raise KernelRuntimeError(f"{name}: data pointer is not 16-byte aligned (a sliced view?); "
                                     "pass a fresh or .contiguous() tensor")
        return t

    def _batch_stride(self, name: str, t: Any, n_batch: int, per_batch: int, step: int) -> int:
        """Elements between two batches of ``t``, whose first ``n_batch`` dims are batch dims folded into one mode L
        (each dim's stride is the next one's times its size, size-1 dims aside); packed when L ≤ 1."""
        live = [(int(size), int(stride)) for size, stride in zip(t.shape[:n_batch], t.stride()[:n_batch]) if size > 1]
        if any(outer != inner * size for (_, outer), (size, inner) in zip(live, live[1:])):
            raise KernelRuntimeError(f"{name}: batch strides {tuple(t.stride()[:n_batch])} of batch dims "
                                     f"{tuple(t.shape[:n_batch])} do not fold into one batch mode (each dim's stride "
                                     "must be the next one's times its size)")
        if not live:
            return per_batch
        stride = live[-1][1]
        if stride % step:
            raise KernelRuntimeError(f"{name}: batch stride {stride} is not a multiple of {step} elements (each "
                                     "batch's matrix must start 16-byte aligned, or at the kernel's alignment)")
        if name == "d" and stride < per_batch:
            raise KernelRuntimeError(f"{name}: batch stride {stride} < {per_batch} elements per batch: the output's "
                                     "batches overlap")
        return stride

    def _vector(self, name: str, t: Any, size_dim: str, dtype: DType, extents: dict[str, int], device: Any,
                batches: int = 1):
        """Check a vector of ``extents[size_dim]`` elements (``batches`` of them, packed, for a batched input)."""
        import torch

        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device or t.dtype != getattr(torch, dtype.torch_name):
            raise KernelRuntimeError(f"{name}: expected {dtype.value} on {device}, got {t.dtype} on {t.device}")
        if not t.is_contiguous() or t.numel() != extents[size_dim] * batches:
            per = f"{batches} batches × " if batches != 1 else ""
            raise KernelRuntimeError(f"{name}: expected a contiguous vector of {per}{size_dim} = {extents[size_dim]} "
                                     f"elements, got shape {tuple(t.shape)}")
        if t.data_ptr() % 16:
            raise KernelRuntimeError(f"{name}: data pointer is not 16-byte aligned")
        return t

    def _scale(self, scale: Any, t: Any, extents: Mapping[str, int], device: Any) -> None:
        """Check a scale-factor tensor (:class:`ucutlass.ir.Scale`) against the extents of a and b.

        Per-tensor: one element. Blockwise (sm90): the declared shape with each ``X/g`` extent ceil(X / g), in the
        declared layout. sm100 block-scaled: CUTLASS's 128x4-atom layout, roundup(M or N, 128) x roundup(K/g, 4)
        elements (``Sm1xxBlockScaledConfig``), contiguous.
        """
        import torch

        name = scale.name
        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        want = getattr(torch, scale.dtype.torch_name)
        if t.device != device or t.dtype != want:
            raise KernelRuntimeError(f"{name}: expected {scale.dtype.value} (torch.{scale.dtype.torch_name}) on "
                                     f"{device}, got {t.dtype} on {t.device}")
        if scale.per_tensor:
            if t.numel() != 1:
                raise KernelRuntimeError(f"{name}: a per-tensor scale is one element, got shape {tuple(t.shape)}")
            return
        sizes = []
        for dim in scale.dims:
            base, div = split_dim(dim)
            sizes.append(-(-extents[base] // div))
        if self.kernel.target is Target.sm100:
            mn, kb = (sizes[0], sizes[1]) if split_dim(scale.dims[0])[0] != "K" else (sizes[1], sizes[0])
            need = -(-mn // 128) * 128 * (-(-kb // 4) * 4)
            if not t.is_contiguous() or t.numel() != need:
                raise KernelRuntimeError(f"{name}: expected {need} contiguous scale factors in CUTLASS's 128x4 "
                                         f"blocked layout (roundup({mn}, 128) x roundup({kb}, 4)), got shape "
                                         f"{tuple(t.shape)}")
            return
        if t.dim() > 2 and scale.layout is Layout.row and t.is_contiguous():
            t = t.reshape(-1, t.shape[-1])
        if tuple(t.shape) != tuple(sizes):
            raise KernelRuntimeError(f"{name}: expected shape {tuple(sizes)} for [{', '.join(scale.dims)}] "
                                     f"(ceil of each extent over its block), got {tuple(t.shape)}")
        rows, cols = sizes
        want_strides = (cols, 1) if scale.layout is Layout.row else (1, rows)
        if any(size > 1 and st != w for size, st, w in zip(t.shape, t.stride(), want_strides)):
            raise KernelRuntimeError(f"{name}: strides {tuple(t.stride())} do not match a {scale.layout.value}-major "
                                     f"[{', '.join(scale.dims)}] tensor (expected {want_strides})")

    # --- calling -----------------------------------------------------------------------------------

    def _extents(self, m: int, n: int, k: int, l: int = 1, batch_strides: Mapping[str, int] | None = None):
        """The ``extents`` array of the ABI (:func:`extent_values`) for the problem's M, N, K and batch count L."""
        if l != 1 and len(self.abi.extents) == 3:
            raise KernelRuntimeError(f"{self.kernel.name} is not batched; L = {l}")
        values = extent_values(self.abi, m, n, k, l, batch_strides, shared_b=not self.kernel.b.batch)
        return (ctypes.c_int64 * len(values))(*values)

    def workspace_size(self, m: int, n: int, k: int, l: int = 1) -> int:
        """Bytes of device workspace for extents (M, N, K, batch count L) with this kernel's run-time settings."""
        return int(self._lib.ucut_workspace_size(self._extents(m, n, k, l), self._knobs))

    def can_implement(self, m: int, n: int, k: int, l: int = 1) -> tuple[bool, str]:
        """Whether CUTLASS accepts extents (M, N, K, batch count L); the reason when it does not."""
        return self._can_implement_array(self._extents(m, n, k, l))

    def _plan(self, values: Sequence[Any]) -> tuple:
        """Check every argument (see :meth:`_matrix`); return what a launch needs for these shapes."""
        import torch

        k = self.kernel
        a = values[0]
        device = a.device if isinstance(a, torch.Tensor) else None
        if device is None or device.type != "cuda":
            raise KernelRuntimeError(f"{k.name}: operands must be CUDA tensors (a is on {device})")
        check_device(k.target, device)  # before any launch: an sm_100a kernel cannot run on an H200
        extents: dict[str, int] = {}
        strides: dict[str, int] = {}  # batch strides of a, b, c, d (batched kernels)
        tensors = dict(zip(self.abi.ptr_names, values))
        for op in k.operands:
            self._matrix(op.name, tensors[op.name], op.dims, op.layout, op.dtype, extents, device, op.batch,
                         k.alignment_of(op.dtype), strides if k.batch else None)
        batches = math.prod(extents[d] for d in k.batch)
        scales = {s.name: s for s in k.scales}
        for name in [n for n in self.abi.ptr_names[len(k.operands):] if n not in scales]:
            inp = self._inputs[name]
            if inp.kind is EpilogueInputKind.matrix:
                self._matrix(name, tensors[name], inp.dims, inp.layout, inp.dtype, extents, device, inp.batch)
            else:
                dim = "N" if inp.kind is EpilogueInputKind.row_vector else "M"
                self._vector(name, tensors[name], dim, inp.dtype, extents, device, batches if inp.batch else 1)
        for scale in scales.values():
            self._scale(scale, tensors[scale.name], extents, device)
        m, n, kk = extents["M"], extents["N"], extents["K"]
        if kk == 0 and m and n and batches:
            raise KernelRuntimeError(f"{k.name}: K = 0 is not supported")
        if not batches:
            m = 0  # an empty batch: nothing to compute
        if batches > 1 and self._batches_are_rows(m, n, kk, strides):
            ext = self._extents(m * batches, n, kk, 1)  # one GEMM of L·M rows: b read once, one M tail
        else:
            ext = self._extents(m, n, kk, batches, strides)
        nbytes = int(self._lib.ucut_workspace_size(ext, self._knobs)) if m and n else 0
        return device, ext, nbytes, (m, n, kk)

    def _batches_are_rows(self, m: int, n: int, k: int, strides: Mapping[str, int]) -> bool:
        """Whether a batched call is one GEMM of L·M rows: b shared by every batch (stride 0); a, d (and c)
        row-major with each batch right after the one before (batch strides M·K, M·N), as torch's matmul folds
        the leading dims of ``x @ w.T``; and no epilogue tensor that differs by batch or runs along M (only
        scalars and unbatched row vectors [N], which every row reads alike) and no block scales. Then L GEMMs,
        each reading all of b and each with its own ragged M tile, become one (SOL-ExecBench L1_003 at batch > 1
        ran at 0.68-0.71x of torch as L GEMMs)."""
        k_ = self.kernel
        if k_.b.batch or strides.get("b", 0) != 0 or k_.scales:
            return False
        packed = {"a": m * k, "c": m * n, "d": m * n}
        for op in k_.operands:
            if op.name in packed and (op.layout is not Layout.row or strides.get(op.name) != packed[op.name]):
                return False
        return all(i.kind is EpilogueInputKind.scalar or (i.kind is EpilogueInputKind.row_vector and not i.batch)
                   for i in self._inputs.values())

    def modes(self, values: Sequence[Any]) -> dict[str, int]:
        """The GEMM modes ``{"M", "N", "K"}`` of a call with these arguments (ABI order), as its launch computes
        them (leading dims folded into M; M = 0 for a batched call with no batches); the plan is cached for the
        call that follows (:func:`ucutlass.runtime.dispatch_callable` picks a kernel with it).

        Raises:
            KernelRuntimeError: as :meth:`__call__` (the arguments are checked).
        """
        m, n, k = self._cached_plan(values)[3][:3]
        return {"M": m, "N": n, "K": k}
