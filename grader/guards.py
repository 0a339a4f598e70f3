"""Guards: checks whose verdict is a named status rather than a silent pass.

Worker side (in the candidate's process, set up before any candidate code is imported):

- :class:`Integrity`: a snapshot of the functions that timing and replies rest on (``time.perf_counter``,
  ``torch.cuda.Event.elapsed_time``/``record``, ``torch.cuda.synchronize``, ``Tensor.zero_``, ``json.dumps``,
  …), of every function, class and code object of the grader's own modules (the channel's too), and
  of the trace/profile hooks. Anything replaced afterwards → TAMPERED. The grader also *binds* its timing
  primitives at start-up (:class:`ucutlass.grader.timing.Primitives`), so a patch has no effect on the
  measurement even before it is detected.
- :class:`ThreadWatch`: the native threads of the process (``/proc/self/task``) before a solution is
  loaded; any thread alive after a load, call or timing run that was not there → THREAD_SPAWNED (work
  finished by a background thread escapes both the events and the correctness check's synchronisation).
- :class:`L2Persisting`: the persisting-L2 set-aside reset to 0 and persisting lines demoted before every
  timed call (CUDA driver API through ctypes), so an access-policy window cannot keep a candidate's
  weights in L2 across the flush.
- :func:`aliasing`: a returned output that shares memory with an input or another output → OUTPUT_ALIASED.

Parent side: :func:`wall_verdict` compares the per-call time the parent measured with its own clock
(a synchronised batch of calls) against the events' median → UNTIMED_WORK when work escaped the events
(side streams, work enqueued after the end mark) or the reported times were forged.

All worker-side checks run in the candidate's process, so native code could defeat them; what the parent
measures itself (outputs it reads from buffers it owns, its own clock) is the layer that cannot be forged.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import time
from typing import Any, Iterable, Sequence

#: (object path, attribute) pairs whose identity must not change in the worker.
WATCHED: tuple[tuple[str, str], ...] = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "time"),
    ("time", "sleep"), ("os", "getpid"), ("os", "listdir"), ("os", "_exit"), ("json", "dumps"),
    ("json", "loads"), ("builtins", "sorted"), ("builtins", "len"), ("builtins", "min"), ("builtins", "max"),
    ("builtins", "sum"), ("builtins", "float"), ("builtins", "int"), ("builtins", "isinstance"),
    ("builtins", "range"), ("builtins", "zip"),
    ("socket.socket", "send"), ("socket.socket", "sendmsg"), ("socket.socket", "recv"),
    ("socket.socket", "recvmsg"), ("select", "select"), ("pickle", "loads"),
    ("torch", "mul"), ("torch", "empty"), ("torch", "full"), ("torch", "equal"), ("torch", "as_tensor"),
    ("torch.Tensor", "zero_"), ("torch.Tensor", "copy_"), ("torch.Tensor", "fill_"), ("torch.Tensor", "clone"),
    ("torch.Tensor", "mul"), ("torch.Tensor", "to"), ("torch.Tensor", "float"), ("torch.Tensor", "data_ptr"),
    ("torch.Tensor", "untyped_storage"), ("torch.Tensor", "is_contiguous"), ("torch.Tensor", "numel"),
    ("torch.Tensor", "element_size"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "current_stream"), ("torch.cuda", "Event"),
    ("torch.cuda", "Stream"), ("torch.cuda", "_lazy_init"), ("torch.cuda", "_get_device_index"),
    ("torch.cuda", "device"), ("torch.cuda.Event", "record"), ("torch.cuda.Event", "elapsed_time"),
    ("torch.cuda.Event", "synchronize"), ("torch.cuda.Event", "query"), ("torch.cuda.Event", "__new__"),
    ("torch.cuda.Event", "__init__"), ("torch._C", "_cuda_synchronize"), ("torch._C", "_cuda_getCurrentStream"),
    ("torch._C", "_cuda_setDevice"),
)

#: The grader's modules whose functions and classes must stay as imported.
GRADER_MODULES = ("ucutlass.grader.timing", "ucutlass.grader.worker", "ucutlass.grader.guards",
                  "ucutlass.grader.check", "ucutlass.grader.inputs", "ucutlass.grader.solutions",
                  "ucutlass.grader.channel", "ucutlass.grader.sandbox")


def _resolve(path: str):
    """Import the longest module prefix of ``path`` and walk the rest by getattr."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


_MISSING = object()


def _function_state(f) -> tuple:
    code = getattr(f, "__code__", None)
    return (id(f), id(code), id(getattr(f, "__defaults__", None)), id(getattr(f, "__kwdefaults__", None)))


class Integrity:
    """A snapshot of what the grader's measurements rely on; :meth:`changes` lists what was replaced.

    Args:
        extra: ``(label, getter, value)`` triples: ``getter()`` must keep returning ``value`` (e.g. the
            identity, address and size of the flush buffer).
    """

    def __init__(self, extra: Iterable[tuple[str, Any, Any]] = ()):
        self._watched: dict[str, Any] = {}
        for owner, attr in WATCHED:
            try:
                obj = _resolve(owner)
            except Exception:  # e.g. no torch.cuda.Event on an old build: nothing to watch
                continue
            self._watched[f"{owner}.{attr}"] = (obj, attr, getattr(obj, attr, _MISSING))
        self._modules: dict[str, dict[str, tuple]] = {}
        for name in GRADER_MODULES:
            mod = sys.modules.get(name)
            if mod is not None:
                self._modules[name] = self._module_state(mod)
        self._extra = list(extra)
        self._hooks = self._hook_state()

    @staticmethod
    def _module_state(mod) -> dict[str, tuple]:
        state: dict[str, tuple] = {}
        for k, v in list(vars(mod).items()):
            if k.startswith("__") and k not in ("__dict__",):
                continue
            if callable(v) and hasattr(v, "__code__"):
                state[k] = _function_state(v)
            elif isinstance(v, type) and v.__module__ == mod.__name__:
                state[k] = (id(v),)
                for ck, cv in list(vars(v).items()):
                    inner = getattr(cv, "__func__", cv)
                    state[f"{k}.{ck}"] = _function_state(inner) if hasattr(inner, "__code__") else (id(cv),)
            else:
                state[k] = (id(v),)
        return state

    @staticmethod
    def _hook_state() -> tuple:
        import gc
        import threading

        return (sys.gettrace(), sys.getprofile(), getattr(threading, "_trace_hook", None),
                getattr(threading, "_profile_hook", None), len(gc.callbacks))

    def changes(self) -> list[str]:
        """What differs from the snapshot (empty when nothing was replaced)."""
        out = []
        for label, (obj, attr, value) in self._watched.items():
            if getattr(obj, attr, _MISSING) is not value:
                out.append(label)
        for name, before in self._modules.items():
            mod = sys.modules.get(name)
            if mod is None:
                out.append(f"{name} (removed from sys.modules)")
                continue
            now = self._module_state(mod)
            for k in sorted(set(before) | set(now)):
                if before.get(k) != now.get(k):
                    out.append(f"{name}.{k}")
        for label, getter, value in self._extra:
            try:
                same = getter() == value
            except Exception:
                same = False
            if not same:
                out.append(label)
        hooks = self._hook_state()
        names = ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile", "gc.callbacks")
        out += [n for n, a, b in zip(names, self._hooks, hooks) if a is not b and a != b]
        return out


class ThreadWatch:
    """Native threads of this process, from ``/proc/self/task`` (Linux; elsewhere the guard is off)."""

    def __init__(self):
        self.available = os.path.isdir("/proc/self/task")

    def snapshot(self) -> frozenset[str]:
        if not self.available:
            return frozenset()
        try:
            return frozenset(os.listdir("/proc/self/task"))
        except OSError:
            return frozenset()

    def new_since(self, base: frozenset[str], settle_s: float = 0.1) -> list[str]:
        """Threads alive now that were not in ``base``, as ``"tid (name)"``. A thread that has just ended is
        not counted: Python's ``join`` returns before the kernel drops the thread from ``/proc/self/task``,
        so new threads are watched for up to ``settle_s`` seconds (only when there are any) until they go."""
        if not self.available:
            return []
        new = self.snapshot() - base
        deadline = time.monotonic() + settle_s
        while new and time.monotonic() < deadline:
            time.sleep(0.005)
            new &= self.snapshot()
        out = []
        for tid in sorted(new, key=int):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue  # gone already
            out.append(f"{tid} ({name})")
        return out


class L2Persisting:
    """Resets the persisting-L2 set-aside and demotes persisting lines (CUDA driver API, current context).

    ``reset()`` returns True when the limit had been raised (someone asked for persisting L2). A no-op
    where the driver library or the entry points are missing.
    """

    CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06

    def __init__(self):
        self.available = False
        self.raised = 0
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self._get = lib.cuCtxGetLimit
            self._set = lib.cuCtxSetLimit
            self._reset = lib.cuCtxResetPersistingL2Cache
            self._get.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
            self._set.argtypes = [ctypes.c_int, ctypes.c_size_t]
            self._reset.argtypes = []
            value = ctypes.c_size_t(0)
            self.available = self._get(ctypes.byref(value), self.CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0
        except (OSError, AttributeError):
            self.available = False

    def limit(self) -> int | None:
        if not self.available:
            return None
        value = ctypes.c_size_t(0)
        if self._get(ctypes.byref(value), self.CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != 0:
            return None
        return int(value.value)

    def reset(self) -> bool:
        if not self.available:
            return False
        value = ctypes.c_size_t(0)
        raised = False
        if self._get(ctypes.byref(value), self.CU_LIMIT_PERSISTING_L2_CACHE_SIZE) == 0 and value.value:
            self._set(self.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
            raised = True
            self.raised += 1
        self._reset()
        return raised


def _byte_range(t) -> tuple[int, int]:
    s = t.untyped_storage()
    start = s.data_ptr()
    return start, start + s.nbytes()


def aliasing(outputs: Sequence[tuple[str, Any]], inputs: Sequence[tuple[str, Any]]) -> str:
    """'' when no returned output shares memory with an input or another output, else one line why.

    Args:
        outputs / inputs: ``(name, value)`` pairs; non-tensors and empty tensors are ignored.
    """
    import torch

    def tensors(pairs):
        return [(n, v, _byte_range(v)) for n, v in pairs
                if isinstance(v, torch.Tensor) and v.numel() > 0 and v.untyped_storage().nbytes() > 0]

    outs, ins = tensors(outputs), tensors(inputs)
    for i, (n, v, (a0, a1)) in enumerate(outs):
        for m, w, (b0, b1) in ins:
            if v.device == w.device and a0 < b1 and b0 < a1:
                return f"output {n!r} shares memory with input {m!r}"
        for m, w, (b0, b1) in outs[i + 1:]:
            if v.device == w.device and a0 < b1 and b0 < a1:
                return f"outputs {n!r} and {m!r} share memory"
    return ""


# --- parent side ---------------------------------------------------------------------------------------

#: UNTIMED_WORK when (parent's per-call wall time − events' median) exceeds this fraction of the median
#: plus this absolute slack (CUDA; the CPU path is for CI and gets a looser bound).
WALL_FRACTION = 0.2
WALL_SLACK_MS = {"cuda": 0.004, "cpu": 0.5}
WALL_FRACTION_CPU = 0.5


def wall_verdict(per_call_ms: float, event_median_ms: float, device_type: str) -> tuple[bool, float, float]:
    """Whether the parent's wall clock agrees with the events.

    Returns:
        ``(ok, escaped_ms, allowed_ms)`` where ``escaped_ms = per_call_ms − event_median_ms``.
    """
    frac = WALL_FRACTION if device_type == "cuda" else WALL_FRACTION_CPU
    slack = WALL_SLACK_MS.get(device_type, WALL_SLACK_MS["cpu"])
    escaped = per_call_ms - event_median_ms
    allowed = frac * max(event_median_ms, 0.0) + slack
    return escaped <= allowed, escaped, allowed


def wall_chargeable(escaped_ms: float, allowed_ms: float, event_median_ms: float) -> bool:
    """Whether time the events missed (``escaped_ms`` over ``allowed_ms``, :func:`wall_verdict`) is charged to the
    candidate — its latency becomes the wall clock's per-call time and it passes — instead of failing it
    UNTIMED_WORK: when it is at most the events' own median beyond the allowance (all in ms).

    Why: an honest CUDA-graph replay (Quant_005's 19 µs FP8 GEMM on an H100) took 25–32 µs to return and
    "escaped" 5–8.6 µs in some grades and not others (docs/benchmarks/2026-12-06-h100-wall-charge.md); failing
    it threw away a 5× kernel. Charging loses nothing against a cheat: work hidden from the events in this zone
    is paid for at wall-clock time; work that dwarfs what the events saw (a side-stream GEMM behind an empty
    call) is still UNTIMED_WORK.
    """
    return escaped_ms <= allowed_ms + max(event_median_ms, 0.0)


__all__ = ["Integrity", "ThreadWatch", "L2Persisting", "aliasing", "wall_verdict", "wall_chargeable", "WATCHED",
           "GRADER_MODULES", "WALL_FRACTION", "WALL_SLACK_MS"]
