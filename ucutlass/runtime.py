"""Load a compiled kernel (.so) with ctypes and call it on torch tensors.

The shared object exports the C ABI of ``templates/sm90_gemm.cu.j2`` (see :mod:`ucutlass.codegen`).
Calls go on the current torch CUDA stream of the tensors' device; the workspace comes from torch's
allocator. Everything a kernel would reject later (device, dtype, shape, strides, 16-byte alignment)
is checked first and reported with the operand's name.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Mapping

from .codegen import ABI_VERSION, Abi, abi_of
from .errors import KernelRuntimeError
from .ir import DType, EpilogueInputKind, GemmKernel, Layout, RasterOrder

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
                self.info.get("digest") != kernel.build_digest():
            raise KernelRuntimeError(f"{self.so_path} was built from another kernel "
                                     f"({self.info.get('config')}) than {kernel.config_name()}")
        # Run-time settings (split_k, raster, swizzle) of this kernel, in the ABI's knobs order.
        raster_code = {RasterOrder.auto: 0, RasterOrder.along_m: 1, RasterOrder.along_n: 2}
        values = {"split_k": kernel.split_k, "raster": raster_code[kernel.raster], "swizzle": kernel.swizzle}
        self._knobs = (ctypes.c_int64 * len(self.abi.knobs))(*[values[k] for k in self.abi.knobs])
        self._workspaces: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._inputs = {i.name: i for i in kernel.epilogue_inputs}

    # --- argument checks ---------------------------------------------------------------------------

    def _matrix(self, name: str, t: Any, dims: tuple[str, ...], layout: Layout, dtype: DType,
                extents: dict[str, int], device: Any) -> Any:
        """Check one 2-D operand (folding leading dims for row layout); return its 2-D view."""
        import torch

        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device:
            raise KernelRuntimeError(f"{name}: on {t.device}, but the other operands are on {device}")
        if t.dtype != getattr(torch, dtype.torch_name):
            raise KernelRuntimeError(f"{name}: dtype {t.dtype}, the kernel was compiled for {dtype.value} "
                                     f"(torch.{dtype.torch_name})")
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
        if (contiguous_extent * dtype.bytes) % 16:
            step = 16 // math.gcd(16, dtype.bytes)
            lo = contiguous_extent // step * step
            contiguous_dim = dims[-1] if layout is Layout.row else dims[0]
            raise KernelRuntimeError(
                f"{name}: {contiguous_dim} = {contiguous_extent} × {dtype.bytes} bytes is not a multiple of 16; "
                f"TMA needs 16-byte aligned rows (nearest valid {contiguous_dim}: {lo or step} or {lo + step})")
        if t.data_ptr() % 16:
            raise KernelRuntimeError(f"{name}: data pointer is not 16-byte aligned (a sliced view?); "
                                     "pass a fresh or .contiguous() tensor")
        return t

    def _vector(self, name: str, t: Any, size_dim: str, dtype: DType, extents: dict[str, int], device: Any):
        import torch

        if type(t) is not torch.Tensor:
            raise KernelRuntimeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device != device or t.dtype != getattr(torch, dtype.torch_name):
            raise KernelRuntimeError(f"{name}: expected {dtype.value} on {device}, got {t.dtype} on {t.device}")
        if not t.is_contiguous() or t.numel() != extents[size_dim]:
            raise KernelRuntimeError(f"{name}: expected a contiguous vector of {size_dim} = {extents[size_dim]} "
                                     f"elements, got shape {tuple(t.shape)}")
        if t.data_ptr() % 16:
            raise KernelRuntimeError(f"{name}: data pointer is not 16-byte aligned")
        return t

    # --- calling -----------------------------------------------------------------------------------

    def workspace_size(self, m: int, n: int, k: int) -> int:
        """Bytes of device workspace for extents (M, N, K) with this kernel's run-time settings."""
        ext = (ctypes.c_int64 * 3)(m, n, k)
        return int(self._lib.ucut_workspace_size(ext, self._knobs))

    def can_implement(self, m: int, n: int, k: int) -> tuple[bool, str]:
        """Whether CUTLASS accepts extents (M, N, K); the reason when it does not."""
        ext = (ctypes.c_int64 * 3)(m, n, k)
        rc = self._lib.ucut_can_implement(ext, self._knobs)
        return rc == 0, "" if rc == 0 else self._lib.ucut_last_error().decode()

    def _workspace(self, device: Any, nbytes: int):
        import torch

        with self._lock:
            buf = self._workspaces.get(device)
            if buf is None or buf.numel() < nbytes:
                buf = torch.empty(max(nbytes, 256), dtype=torch.uint8, device=device)
                self._workspaces[device] = buf
            return buf

    def __call__(self, **tensors: Any) -> Any:
        """Run the kernel; returns ``d`` (written in place).

        Args:
            tensors: ``a``, ``b``, ``d`` (and ``c``) plus the epilogue inputs by name; scalars as
                Python numbers.

        Raises:
            KernelRuntimeError: a missing or unexpected argument, a bad tensor, or a kernel failure.
        """
        import torch

        k = self.kernel
        expected = set(self.abi.ptr_names) | set(self.abi.scalar_names)
        missing = expected - tensors.keys()
        unexpected = tensors.keys() - expected
        if missing or unexpected:
            raise KernelRuntimeError(f"{k.name}: arguments are {', '.join(self.abi.ptr_names + self.abi.scalar_names)}"
                                     + (f"; missing {sorted(missing)}" if missing else "")
                                     + (f"; unexpected {sorted(unexpected)}" if unexpected else ""))
        device = tensors["a"].device if isinstance(tensors["a"], torch.Tensor) else None
        if device is None or device.type != "cuda":
            raise KernelRuntimeError(f"{k.name}: operands must be CUDA tensors (a is on {device})")
        extents: dict[str, int] = {}
        views: dict[str, Any] = {}
        for op in k.operands:
            views[op.name] = self._matrix(op.name, tensors[op.name], op.dims, op.layout, op.dtype, extents, device)
        for name in self.abi.ptr_names[len(k.operands):]:
            inp = self._inputs[name]
            if inp.kind is EpilogueInputKind.matrix:
                views[name] = self._matrix(name, tensors[name], inp.dims, inp.layout, inp.dtype, extents, device)
            else:
                dim = "N" if inp.kind is EpilogueInputKind.col_vector else "M"
                views[name] = self._vector(name, tensors[name], dim, inp.dtype, extents, device)
        m, n, kk = extents["M"], extents["N"], extents["K"]
        if m == 0 or n == 0:
            return tensors["d"]
        if kk == 0:
            raise KernelRuntimeError(f"{k.name}: K = 0 is not supported")
        ptrs = (ctypes.c_void_p * len(self.abi.ptr_names))(*[views[n_].data_ptr() for n_ in self.abi.ptr_names])
        scalars = (ctypes.c_double * max(1, len(self.abi.scalar_names)))(
            *[float(tensors[s]) for s in self.abi.scalar_names])
        ext = (ctypes.c_int64 * 3)(m, n, kk)
        with torch.cuda.device(device):
            nbytes = int(self._lib.ucut_workspace_size(ext, self._knobs))
            ws = self._workspace(device, nbytes)
            stream = torch.cuda.current_stream(device).cuda_stream
            rc = self._lib.ucut_run(ptrs, scalars, ext, self._knobs, ctypes.c_void_p(ws.data_ptr()), ws.numel(),
                                    ctypes.c_void_p(stream))
        if rc != 0:
            msg = self._lib.ucut_last_error().decode()
            raise KernelRuntimeError(f"{k.name} ({k.config_name()}) failed on M={m} N={n} K={kk}: "
                                     f"status {rc} ({_status_text(rc)}): {msg}")
        return tensors["d"]


def load_kernel(so_path: str | os.PathLike, kernel: GemmKernel) -> CompiledKernel:
    """Load ``so_path`` (built from ``kernel``) as a callable; see :class:`CompiledKernel`."""
    return CompiledKernel(so_path, kernel)


def load_solution(payload: Mapping[str, Any], problem: Any):
    """Grader loader for a compiled `.ucut` solution (``SolutionRef.loader = "ucutlass.runtime:load_solution"``).

    Args:
        payload: ``{"so_path": …, "source": <concrete .ucut text>, "file": …, "kernel": name or None}``.
        problem: the :class:`ucutlass.problem.Problem` the program binds to.

    Returns:
        A destination-passing callable ``fn(*inputs, *outputs)`` in the problem's definition order.
    """
    from .bind import bind
    from .dsl import parse

    program = parse(payload["source"], payload.get("file", "<solution>"))
    kernel = program.kernel(payload.get("kernel"))
    return bind(kernel, problem).callable(load_kernel(payload["so_path"], kernel))
