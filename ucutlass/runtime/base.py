"""The launch base every kernel family's loader derives from: the shared object, its C ABI, the plan cache, the
workspace and the status text.

Every family's ``.so`` exports the same C entry points (``templates/_gemm_common.j2``, ``templates/_fmha_common.j2``,
``templates/_grouped_gemm.j2``)::

    int         ucut_abi_version()
    const char* ucut_info()                      // JSON: name, config, family, ptrs, digest, …
    const char* ucut_last_error()
    size_t      ucut_workspace_size(const int64_t* extents, const int64_t* knobs)
    int         ucut_can_implement(const int64_t* extents, const int64_t* knobs)
    int         ucut_run(void** ptrs, double* scalars, const int64_t* extents, const int64_t* knobs,
                         void* workspace, size_t workspace_bytes, cudaStream_t stream)

so loading, checking the library against the kernel, caching a call's checked plan per set of tensor signatures,
keeping a workspace per device and launching on torch's current stream are written once, here
(:class:`KernelLauncher`). A family module (:mod:`.gemm`, :mod:`.grouped`, :mod:`.attention`) says only what differs:
its ABI, its run-time knobs, how it checks a call's tensors into extents (``_plan``), when a call has nothing to do,
and how it names a call's extents in messages.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import KernelRuntimeError

#: ``ucut_run``'s status codes: each range's base and what it means (cutlass::Status is added to the base).
STATUS_RANGES = (
    (100, "can_implement rejected the arguments"),
    (150, "workspace too small"),
    (200, "initialize failed"),
    (300, "run failed"),
    (400, "CUDA launch error"),
    (500, "C++ exception"),
)

#: At most this many plans are kept per kernel: shapes without end (a sweep) must not grow the table forever.
MAX_PLANS = 256


def status_text(rc: int) -> str:
    """What a non-zero status code of an entry point means (:data:`STATUS_RANGES`), e.g. 301 → ``run failed``."""
    what = "error"
    for base, text in STATUS_RANGES:
        if rc >= base:
            what = text
    return what


class KernelLauncher:
    """A compiled kernel of some family, loaded from its shared object, launched with torch tensors.

    Subclasses set :attr:`family` and :attr:`output` and implement ``_abi_of``, ``_expected_digest`` and ``_plan``;
    they may override ``_knob_values``, ``_built_from``, ``_is_empty`` and ``_describe``.

    Attributes:
        so_path: the shared object. kernel: the IR kernel it was built from. abi: its argument order
            (``ptr_names``, ``scalar_names``, ``extents``, ``knobs``). info: the library's ``ucut_info`` JSON.

    Raises:
        KernelRuntimeError: the library does not load, has another ABI version, or was built from another kernel.
    """

    #: The kernel family this class loads (``kernel.family`` and the library's ``info["family"]``).
    family = "gemm"
    #: The operand a call by name returns (written in place).
    output = "d"
    #: The ABI version the library must report (the front's ``ABI_VERSION``).
    abi_version = 0
    #: Operands whose data pointer must be 16-byte aligned at every call (None: every pointer).
    aligned: frozenset[str] | None = None

    def __init__(self, so_path: str | os.PathLike, kernel: Any):
        if getattr(kernel, "family", "gemm") != self.family:
            raise KernelRuntimeError(f"{kernel.name} is a {kernel.family} kernel, not a {self.family}")
        self.so_path = Path(so_path)
        self.kernel = kernel
        self.abi = self._abi_of(kernel)
        try:
            lib = ctypes.CDLL(str(self.so_path))  # RTLD_LOCAL: each kernel keeps its own symbols
        except OSError as e:
            raise KernelRuntimeError(f"cannot load {self.so_path}: {e}") from None
        self._lib = lib
        lib.ucut_abi_version.restype = ctypes.c_int
        if lib.ucut_abi_version() != self.abi_version:
            raise KernelRuntimeError(f"{self.so_path} has ABI {lib.ucut_abi_version()}, this ucutlass "
                                     f"expects {self.abi_version}: rebuild it")
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
        if not self._built_from(self.info):
            raise KernelRuntimeError(f"{self.so_path} was built from another kernel "
                                     f"({self.info.get('config')}) than {kernel.config_name()}")
        values = self._knob_values()
        self._knobs = (ctypes.c_int64 * max(1, len(values)))(*values)
        self._workspaces: dict[int, Any] = {}
        self._plans: dict[tuple, tuple] = {}  # checked argument signatures -> launch plan
        self._lock = threading.Lock()

    # --- what a family says ------------------------------------------------------------------------

    def _abi_of(self, kernel: Any) -> Any:
        """The kernel's argument order (the front's ``abi_of``)."""
        raise NotImplementedError

    def _expected_digest(self) -> str:
        """The build digest the library's ``info["digest"]`` must equal for :attr:`kernel`."""
        raise NotImplementedError

    def _built_from(self, info: Mapping[str, Any]) -> bool:
        """Whether the library's ``ucut_info`` describes :attr:`kernel` (its family, pointers and digest)."""
        return (info.get("family", "gemm") == self.family and list(info.get("ptrs", [])) == list(self.abi.ptr_names)
                and info.get("digest") == self._expected_digest())

    def _knob_values(self) -> list[int]:
        """The ``knobs`` array's values, in ``abi.knobs`` order (none by default)."""
        return []

    def _plan(self, values: Sequence[Any]) -> tuple:
        """Check a call's arguments (ABI order); return ``(device, extents array, workspace bytes, sizes)``.

        Raises:
            KernelRuntimeError: a bad argument, named.
        """
        raise NotImplementedError

    def _is_empty(self, sizes: Any) -> bool:
        """Whether a call of these sizes (the plan's last item) computes nothing (then nothing is launched)."""
        return False

    def _describe(self, sizes: Any) -> str:
        """A call's sizes as a failure message names them."""
        return str(sizes)

    # --- shared ------------------------------------------------------------------------------------

    def _can_implement_array(self, extents: Any) -> tuple[bool, str]:
        """``ucut_can_implement`` on an extents array: whether CUTLASS accepts it, and CUTLASS's reason if not."""
        rc = self._lib.ucut_can_implement(extents, self._knobs)
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
        """Run the kernel on its arguments by name (tensors; scalars as Python numbers); returns :attr:`output`
        (written in place).

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
        return tensors[self.output]

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
                if len(self._plans) > MAX_PLANS:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    def call(self, values: Sequence[Any]) -> None:
        """Launch with arguments in ABI order (:attr:`abi`: pointers, then scalars) on the current torch stream of
        the tensors' device.

        The first call with a given set of shapes, strides, dtypes and devices checks everything; later calls with
        the same set only re-check pointer alignment (:meth:`_cached_plan`).

        Raises:
            KernelRuntimeError: as :meth:`__call__`; a kernel failure gives the status, what it means and CUTLASS's
                message.
        """
        import torch

        names = self.abi.ptr_names
        n_ptrs = len(names)
        if len(values) != n_ptrs + len(self.abi.scalar_names):
            raise KernelRuntimeError(f"{self.kernel.name}: expected {n_ptrs + len(self.abi.scalar_names)} arguments "
                                     f"({', '.join(names + self.abi.scalar_names)}), got {len(values)}")
        device, ext, nbytes, sizes = self._cached_plan(values)
        if self._is_empty(sizes):
            return
        addresses = [t.data_ptr() for t in values[:n_ptrs]]
        for name, p in zip(names, addresses):
            if p % 16 and (self.aligned is None or name in self.aligned):
                raise KernelRuntimeError(f"{name}: data pointer is not 16-byte aligned (a sliced view?); "
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
            raise KernelRuntimeError(f"{k.name} ({k.config_name()}) failed on {self._describe(sizes)}: "
                                     f"status {rc} ({status_text(rc)}): {msg}")

    def _launch(self, index: int, ptrs, scalars, ext, nbytes: int) -> int:
        import torch

        ws = self._workspace(index, nbytes)
        try:
            stream = torch._C._cuda_getCurrentRawStream(index)  # what torch.cuda.current_stream() wraps
        except AttributeError:  # pragma: no cover - older torch
            stream = torch.cuda.current_stream(index).cuda_stream
        return self._lib.ucut_run(ptrs, scalars, ext, self._knobs, ctypes.c_void_p(ws.data_ptr()), ws.numel(),
                                  ctypes.c_void_p(stream))
