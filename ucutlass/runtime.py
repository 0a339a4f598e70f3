"""Load a compiled kernel (.so) with ctypes and call it on torch tensors.

The shared object exports the C ABI of the GEMM templates (``templates/_gemm_common.j2``; see
:mod:`ucutlass.codegen`). Calls go on the current torch CUDA stream of the tensors' device; the workspace
comes from torch's allocator. Everything a kernel would reject later (the GPU's architecture, device,
dtype, shape, strides, 16-byte alignment) is checked first and reported with the operand's name.

Kernels are compiled for an arch-specific target (``sm_90a``, ``sm_100a``), whose code runs only on GPUs of
exactly that compute capability (CUDA C++ Programming Guide, "Feature Set Compiler Targets": ``a``
targets are not forward compatible): :func:`check_device` refuses, before any launch, an sm100 kernel on
an H200 or an sm90 kernel on a B200.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from .arch import canonical
from .codegen import ABI_VERSION, Abi, abi_of
from .errors import KernelRuntimeError
from .ir import DType, EpilogueInputKind, GemmKernel, Layout, RasterOrder, ReductionMode, Target

#: The compute capability whose GPUs run each target's code, and how to name the target in messages.
TARGET_CAPABILITY: dict[Target, tuple[int, int]] = {Target.sm90: (9, 0), Target.sm100: (10, 0)}
TARGET_NAME: dict[Target, str] = {Target.sm90: "Hopper, sm_90a", Target.sm100: "Blackwell, sm_100a"}


def device_mismatch(target: Target, device: Any = None) -> str | None:
    """Why a kernel built for ``target`` cannot run on ``device`` (a CUDA device or index; None: the current
    one), or None when it can. Needs CUDA; ``torch.cuda.get_device_capability`` tells the GPU's arch."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == TARGET_CAPABILITY[target]:
        return None
    return (f"kernel built for {target.value} ({TARGET_NAME[target]}); this GPU is sm_{major}{minor} "
            f"({torch.cuda.get_device_name(device)}): compile only here")


def check_device(target: Target, device: Any = None) -> None:
    """Raise :class:`KernelRuntimeError` when a kernel built for ``target`` cannot run on ``device``.

    Example message: ``kernel built for sm100 (Blackwell, sm_100a); this GPU is sm_90 (NVIDIA H200):
    compile only here``.
    """
    why = device_mismatch(target, device)
    if why:
        raise KernelRuntimeError(why)


_STATUS_RANGES = (
    (100, "can_implement rejected the arguments"),
    (150, "workspace too small"),
    (200, "initialize failed"),
    (300, "run failed"),
    (400, "CUDA launch error"),
    (500, "C++ exception"),
)


def _status_text(rc: int) -> str:
    what = "error"
    for base, text in _STATUS_RANGES:
        if rc >= base:
            what = text
    return what


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


class CompiledKernel:
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

    def __init__(self, so_path: str | os.PathLike, kernel: GemmKernel):
        self.so_path = Path(so_path)
        self.kernel = kernel
        self.abi: Abi = abi_of(kernel)
        try:
            lib = ctypes.CDLL(str(self.so_path))  # RTLD_LOCAL: each kernel keeps its own symbols
        except OSError as e:
            raise KernelRuntimeError(f"cannot load {self.so_path}: {e}") from None
        self._lib = lib
        lib.ucut_abi_version.restype = ctypes.c_int
        if lib.ucut_abi_version() != ABI_VERSION:
            raise KernelRuntimeError(f"{self.so_path} has ABI {lib.ucut_abi_version()}, this ucutlass "
                                     f"expects {ABI_VERSION}: rebuild it")
        lib.ucut_info.restype = ctypes.c_char_p
        lib.ucut_last_error.restype = ctypes.c_char_p
        lib.ucut_workspace_size.restype = ctypes.c_size_t
        i64p = ctypes.POINTER(ctypes.c_int64)
        lib.ucut_workspace_size.argtypes = [i64p, i64p]
        lib.ucut_can_implement.restype = ctypes.c_int
        lib.ucut_can_implement.argtypes = [i64p, i64p]
        lib.ucut_run.restype = ctypes.c_int
        lib.ucut_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_double), i64p, i64p,
                                 ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self.info = json.loads(lib.ucut_info().decode())
        if list(self.info.get("ptrs", [])) != list(self.abi.ptr_names) or \
                self.info.get("digest") != canonical(kernel).build_digest():  # swap_ab = auto as the rules decide
            raise KernelRuntimeError(f"{self.so_path} was built from another kernel "
                                     f"({self.info.get('config')}) than {kernel.config_name()}")
        # Run-time settings (split_k, raster, swizzle) of this kernel, in the ABI's knobs order.
        raster_code = {RasterOrder.auto: 0, RasterOrder.along_m: 1, RasterOrder.along_n: 2}
        reduction_code = {ReductionMode.deterministic: 0, ReductionMode.nondeterministic: 1}
        values = {"split_k": kernel.split_k, "raster": raster_code[kernel.raster], "swizzle": kernel.swizzle,
                  "reduction_mode": reduction_code[kernel.reduction_mode]}
        self._knobs = (ctypes.c_int64 * len(self.abi.knobs))(*[values[k] for k in self.abi.knobs])
        self._workspaces: dict[int, Any] = {}
        self._plans: dict[tuple, tuple] = {}  # checked argument signatures -> launch plan
        self._lock = threading.Lock()
        # epilogue inputs and extra outputs (-> in the epilogue) by name: checked alike, in ABI order
        self._inputs = {i.name: i for i in (*kernel.epilogue_inputs, *kernel.epilogue_outputs)}

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
        from .ir import Target, split_dim

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
        ext = self._extents(m, n, k, l)
        rc = self._lib.ucut_can_implement(ext, self._knobs)
        return rc == 0, "" if rc == 0 else self._lib.ucut_last_error().decode()

    def _workspace(self, index: int, nbytes: int):
        """A device buffer of at least ``nbytes`` from torch's allocator, kept per device."""
        buf = self._workspaces.get(index)
        if buf is None or buf.numel() < nbytes:
            import torch

            with self._lock:
                buf = torch.empty(max(nbytes, 256), dtype=torch.uint8, device=f"cuda:{index}")
                self._workspaces[index] = buf
        return buf

    def __call__(self, **tensors: Any) -> Any:
        """Run the kernel; returns ``d`` (written in place).

        Args:
            tensors: ``a``, ``b``, ``d`` (and ``c``) plus the epilogue inputs by name; scalars as
                Python numbers.

        Raises:
            KernelRuntimeError: a missing or unexpected argument, a bad tensor, or a kernel failure.
        """
        names = self.abi.ptr_names + self.abi.scalar_names
        missing = set(names) - tensors.keys()
        unexpected = tensors.keys() - set(names)
        if missing or unexpected:
            raise KernelRuntimeError(f"{self.kernel.name}: arguments are {', '.join(names)}"
                                     + (f"; missing {sorted(missing)}" if missing else "")
                                     + (f"; unexpected {sorted(unexpected)}" if unexpected else ""))
        self.call([tensors[n] for n in names])
        return tensors["d"]

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

    def _cached_plan(self, values: Sequence[Any]) -> tuple:
        """:meth:`_plan` of arguments in ABI order, checked once per set of shapes, strides, dtypes and devices of
        the tensors and cached (later calls with the same set only re-check pointer alignment: a small GEMM runs in
        microseconds, so the host path must stay short).

        Raises:
            KernelRuntimeError: as :meth:`__call__`.
        """
        import torch

        n_ptrs = len(self.abi.ptr_names)
        try:
            key = tuple((t.shape, t.stride(), t.dtype, t.device) for t in values[:n_ptrs]
                        if type(t) is torch.Tensor)
        except AttributeError:
            key = None
        plan = self._plans.get(key) if key is not None and len(key) == n_ptrs else None
        if plan is None:
            plan = self._plan(values)
            if key is not None and len(key) == n_ptrs:
                if len(self._plans) > 256:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def modes(self, values: Sequence[Any]) -> dict[str, int]:
        """The GEMM modes ``{"M", "N", "K"}`` of a call with these arguments (ABI order), as its launch computes
        them (leading dims folded into M; M = 0 for a batched call with no batches); the plan is cached for the
        call that follows (:func:`ucutlass.dispatch.dispatch_callable` picks a kernel with it).

        Raises:
            KernelRuntimeError: as :meth:`__call__` (the arguments are checked).
        """
        m, n, k = self._cached_plan(values)[3][:3]
        return {"M": m, "N": n, "K": k}

    def call(self, values: Sequence[Any]) -> None:
        """Launch with arguments in ABI order (:attr:`abi`: pointers, then scalars) on the current stream.

        The first call with a given set of shapes, strides, dtypes and devices checks everything; later
        calls with the same set only re-check pointer alignment (:meth:`_cached_plan`).

        Raises:
            KernelRuntimeError: as :meth:`__call__`.
        """
        import torch

        n_ptrs = len(self.abi.ptr_names)
        tensors = values[:n_ptrs]
        device, ext, nbytes, (m, n, kk) = self._cached_plan(values)
        if m == 0 or n == 0:
            return
        addresses = [t.data_ptr() for t in tensors]
        if any(p % 16 for p in addresses):
            bad = self.abi.ptr_names[next(i for i, p in enumerate(addresses) if p % 16)]
            raise KernelRuntimeError(f"{bad}: data pointer is not 16-byte aligned (a sliced view?); "
                                     "pass a fresh or .contiguous() tensor")
        ptrs = (ctypes.c_void_p * n_ptrs)(*addresses)
        scalars = (ctypes.c_double * max(1, len(self.abi.scalar_names)))(*[float(v) for v in values[n_ptrs:]])
        index = device.index if device.index is not None else torch.cuda.current_device()
        if torch.cuda.current_device() != index:
            with torch.cuda.device(index):
                rc = self._launch(index, ptrs, scalars, ext, nbytes)
        else:
            rc = self._launch(index, ptrs, scalars, ext, nbytes)
        if rc != 0:
            msg = self._lib.ucut_last_error().decode()
            k = self.kernel
            raise KernelRuntimeError(f"{k.name} ({k.config_name()}) failed on M={m} N={n} K={kk}: "
                                     f"status {rc} ({_status_text(rc)}): {msg}")

    def _launch(self, index: int, ptrs, scalars, ext, nbytes: int) -> int:
        import torch

        ws = self._workspace(index, nbytes)
        try:
            stream = torch._C._cuda_getCurrentRawStream(index)  # what torch.cuda.current_stream() wraps
        except AttributeError:  # pragma: no cover - older torch
            stream = torch.cuda.current_stream(index).cuda_stream
        return self._lib.ucut_run(ptrs, scalars, ext, self._knobs, ctypes.c_void_p(ws.data_ptr()), ws.numel(),
                                  ctypes.c_void_p(stream))


def load_kernel(so_path: str | os.PathLike, kernel: GemmKernel) -> CompiledKernel:
    """Load ``so_path`` (built from ``kernel``) as a callable; see :class:`CompiledKernel`."""
    if getattr(kernel, "family", "gemm") == "attention":  # FMHA: ucutlass.attention_runtime
        from .attention_runtime import AttentionCompiledKernel
        return AttentionCompiledKernel(so_path, kernel)  # type: ignore[return-value]
    if getattr(kernel, "family", "gemm") == "grouped_gemm":  # ptr-array grouped GEMM: ucutlass.grouped_runtime
        from .grouped_runtime import GroupedCompiledKernel
        return GroupedCompiledKernel(so_path, kernel)
    return CompiledKernel(so_path, kernel)


def load_solution(payload: Mapping[str, Any], problem: Any):
    """Grader loader for a compiled `.ucut` solution (``SolutionRef.loader = "ucutlass.runtime:load_solution"``).

    Args:
        payload: one kernel: ``{"so_path": …, "source": <concrete .ucut text>, "file": …, "kernel": name or None}``;
            a dispatch (:meth:`ucutlass.ir.Program.dispatch`; :func:`ucutlass.dispatch.dispatch_solution` writes it):
            ``{"so_paths": {kernel name: path, …}, "source": …, "file": …}``, one .so per kernel of the dispatch.
        problem: the :class:`ucutlass.problem.Problem` the program binds to.

    Returns:
        A destination-passing callable ``fn(*inputs, *outputs)`` in the problem's definition order; for a dispatch,
        each call runs the kernel whose ``when`` its modes meet (:func:`ucutlass.dispatch.dispatch_callable`).

    Raises:
        KernelRuntimeError: a kernel built for another GPU, a .so that does not load or is missing from
            ``so_paths``, or ``so_paths`` for a program that is no dispatch.
    """
    from .bind import bind
    from .lang import parse

    program = parse(payload["source"], payload.get("file", "<solution>"))
    if "so_paths" in payload:
        kernels = program.dispatch()
        if not kernels:
            raise KernelRuntimeError(f"{program.file}: the payload names so_paths, but no kernel has a when "
                                     "(a dispatch); give one kernel's so_path and kernel instead")
        missing = [k.name for k in kernels if k.name not in payload["so_paths"]]
        if missing:
            raise KernelRuntimeError(f"{program.file}: no .so for kernel(s) {', '.join(missing)} of the dispatch "
                                     f"(so_paths has {', '.join(payload['so_paths']) or 'none'})")
    else:
        kernels = (program.kernel(payload.get("kernel")),)
    import torch

    if torch.cuda.is_available():
        for kernel in kernels:
            check_device(kernel.target)  # refuse before grading starts (the first call would refuse too)
    runs = []
    for kernel in kernels:
        binding = bind(kernel, problem)  # binding.kernel: alignment = auto lowered to what the workloads allow
        so_path = payload["so_paths"][kernel.name] if "so_paths" in payload else payload["so_path"]
        runs.append(binding.callable(load_kernel(so_path, getattr(binding, "kernel", kernel))))
    if "so_paths" not in payload:
        return runs[0]
    from .dispatch import dispatch_callable

    # modes from the fallback's plan: every kernel binds the same tensors, so any would give the same ones
    return dispatch_callable(runs, [k.when for k in kernels], runs[-1].modes)
