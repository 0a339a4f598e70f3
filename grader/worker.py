"""The worker process a candidate (or the problem's reference, in a worker of its own) runs in: the child side.

The parent's side (starting the worker below its supervisor, requests, deadlines, the verdicts on a crash, a
hang or a process left running) is :mod:`.worker_handle`.

Child side: :func:`serve` reads its set-up (the problem, the device, the folders it may write), warms up
torch's thread pools and CUDA, binds the timing primitives and takes the guards' snapshots
(:mod:`.guards`), then confines itself (:func:`.sandbox.confine`: Landlock — writes only to its scratch
folder and ``/dev``, no ptrace, and from Linux 6.12 no signals, outside its domain) — all before any
candidate code is imported — then builds solutions with their loaders, calls them on tensors the parent
owns and shares (CUDA IPC on the GPU, passed shared-memory descriptors on the CPU), and times them with
:mod:`.timing`.

Protocol: requests (parent → child) are pickled dicts, because they carry shared tensors; replies
(child → parent) are JSON, so nothing the candidate's process sends is unpickled in the parent. A reply
never says whether outputs are right: the parent reads the buffers itself, and times the ``wall``
batches with its own clock.

============  =======================================================  ====================================
op            request fields                                           reply (``ok`` True)
============  =======================================================  ====================================
``info``      —                                                        pid, device, L2 and flush sizes, …
``load``      ``solution`` (:class:`SolutionRef`)                      ``load_ms``
``call``      ``key``, ``inputs``, ``outputs``                         ``wall_ms`` (outputs written, synced)
``bench``     ``key``, ``sets`` [{base, work, outputs, check}],        ``times_ms``, ``warmup_calls``,
              ``params``, ``plan`` {seed, rescale}                     ``estimate_ms``, ``snapshots``, …
``wall``      ``key``, ``n``, ``call`` (bool): the loop on the last        ``worker_ms``, ``call_host_ms``,
              bench's sets                                             ``spin_cycles`` (diagnostics)
``reference`` ``inputs``, ``upcast`` (bool): the problem's ``run()``      ``outputs`` {name: dtype, shape},
              (reference role), held until ``fetch``                    ``how`` (the ground truth's dtype)
``inputs``    ``workload``, ``seed``: the problem's custom input         ``outputs`` {name: dtype, shape or
              generator (reference role), held until ``fetch``            ``value`` for a scalar}
``fetch``     ``buffers`` {name: tensor}: copy what is held into them   —
``exit``      —                                                        (no reply; the process exits)
============  =======================================================  ====================================

A failed request replies ``{"ok": False, "status": ..., "reason": ..., "traceback": ...}``. After every
request the guards run (TAMPERED, THREAD_SPAWNED); a guard that fires, or a CUDA error that leaves the
context unusable, also says ``"fatal": True`` and the worker exits: the parent records the status and
starts a fresh worker, so no candidate leaves state behind for the next.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
import traceback
from collections import OrderedDict
from typing import Any

# Statuses used in replies (the names of ucutlass.grader.results.Status).
RUNTIME_ERROR = "RUNTIME_ERROR"
COMPILE_ERROR = "COMPILE_ERROR"
INCORRECT_SHAPE = "INCORRECT_SHAPE"
INCORRECT_DTYPE = "INCORRECT_DTYPE"
OUTPUT_ALIASED = "OUTPUT_ALIASED"
CRASHED = "CRASHED"
TIMEOUT = "TIMEOUT"
TAMPERED = "TAMPERED"
THREAD_SPAWNED = "THREAD_SPAWNED"
PROCESS_SPAWNED = "PROCESS_SPAWNED"

#: How many built solutions a worker keeps (the tuner moves on; old ones only hold memory).
SOLUTION_CACHE = 2
#: Exit code of a worker that left after a fatal CUDA error or a guard's verdict.
FATAL_EXIT = 70


# ======================================================================================================
# child side
# ======================================================================================================

class _Failure(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _type_name(v: Any) -> str:
    t = type(v)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def write_returned(result: Any, outputs: list, names: list[str], inputs: list | tuple = (),
                   input_names: list[str] | None = None, strided: bool = False) -> None:
    """Copy a return-style result into the parent's output buffers, after checking every value.

    Each value must be exactly a ``torch.Tensor`` (a 0-d output may also be a Python number) on the
    buffer's device, with the buffer's shape and dtype, contiguous (unless ``strided``: the problem's own
    reference, whose ``run()`` may return a permuted tensor, e.g. L2_055's residual sum), and sharing memory
    with no input and no other output (unless ``strided``: the reference may return views of one tensor, e.g.
    L2_030's two halves of one projection); nothing is copied unless all are.

    Raises:
        _Failure: INCORRECT_SHAPE (wrong number of outputs, missing name, wrong shape, not contiguous),
            INCORRECT_DTYPE (not a plain tensor, wrong device or dtype) or OUTPUT_ALIASED.
    """
    import torch

    from .guards import aliasing

    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise _Failure(INCORRECT_SHAPE, f"returned dict lacks outputs {missing} (has {list(result)})")
        values = [result[n] for n in names]
    elif isinstance(result, (tuple, list)):
        if len(result) != len(names):
            raise _Failure(INCORRECT_SHAPE, f"returned {len(result)} values, the definition has "
                                            f"{len(names)} outputs {names}")
        values = list(result)
    else:
        if len(names) != 1:
            raise _Failure(INCORRECT_SHAPE, f"returned one {_type_name(result)}, the definition has "
                                            f"outputs {names}")
        values = [result]
    for name, v, buf in zip(names, values, outputs):
        if type(v) is not torch.Tensor:
            if buf.dim() == 0 and type(v) in (int, float, bool):
                continue
            raise _Failure(INCORRECT_DTYPE, f"output {name!r} is a {_type_name(v)}, expected exactly torch.Tensor")
        if v.device != buf.device:
            raise _Failure(INCORRECT_DTYPE, f"output {name!r} is on {v.device}, expected {buf.device}")
        if tuple(v.shape) != tuple(buf.shape):
            raise _Failure(INCORRECT_SHAPE, f"output {name!r} has shape {tuple(v.shape)}, "
                                            f"expected {tuple(buf.shape)}")
        if v.dtype != buf.dtype:
            raise _Failure(INCORRECT_DTYPE, f"output {name!r} has dtype {v.dtype}, expected {buf.dtype}")
        if not strided and not v.is_contiguous():
            raise _Failure(INCORRECT_SHAPE, f"output {name!r} is not contiguous (strides {tuple(v.stride())})")
    in_names = list(input_names) if input_names is not None else [f"input {i}" for i in range(len(inputs))]
    # the problem's own reference may return views of one tensor or of an input (L2_030 splits one projection into
    # its two outputs): they are copied into the buffers as they are; a candidate's may not (OUTPUT_ALIASED)
    alias = "" if strided else aliasing(list(zip(names, values)), list(zip(in_names, inputs)))
    if alias:
        raise _Failure(OUTPUT_ALIASED, alias)
    for v, buf in zip(values, outputs):
        if type(v) is torch.Tensor:
            buf.copy_(v)
        else:
            buf.fill_(v)


def _is_reference(sol: Any) -> bool:
    """Whether ``sol`` (a loaded :class:`_Solution`) is the problem's own reference ``run()``."""
    from .solutions import REFERENCE_LOADER

    return sol.ref.loader == REFERENCE_LOADER


def _warm_up(device) -> None:
    """Start what torch starts lazily (intra-op thread pool, CUDA context, cuBLAS, events), so the thread
    guard's baseline already holds those threads."""
    import torch

    a = torch.randn(256, 256)
    (a @ a).sum().item()
    torch.ones(1 << 22).sum().item()
    (a.bfloat16() @ a.bfloat16()).float().sum().item()
    if device.type == "cuda":
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            b = torch.randn(256, 256, device=device, dtype=dt)
            (b @ b).float().sum().item()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.ones(1 << 20, device=device).sum()
        e.record()
        torch.cuda.synchronize(device)
        s.elapsed_time(e)


class _Solution:
    """A built solution: its recipe, callable, and the threads that existed before it was loaded."""

    def __init__(self, ref, fn, threads: frozenset[str]):
        self.ref, self.fn, self.threads = ref, fn, threads


class _State:
    """What a worker holds between requests: the problem, device, flush buffer, timing primitives,
    guards, built solutions and the last timing run's sets (for ``wall`` requests)."""

    def __init__(self, problem, device, flush, prims):
        from .check import poison_value
        from .guards import Integrity, L2Persisting, ThreadWatch

        self.problem = problem
        self.device = device
        self.flush = flush
        self.prims = prims
        self.names = list(problem.outputs)
        self.input_names = list(problem.inputs)
        self.solutions: OrderedDict[str, _Solution] = OrderedDict()
        self.timing: dict | None = None
        self.held: dict[str, Any] = {}  # reference role: outputs or inputs waiting for a ``fetch``
        self._module = None  # reference role: the problem's reference, executed once
        self._loading: frozenset[str] | None = None
        self.threads = ThreadWatch()
        self.l2 = L2Persisting() if device.type == "cuda" else None
        self._poison_value = poison_value
        flush_state = (id(flush), flush.data_ptr(), flush.numel())
        self.integrity = Integrity(extra=[
            ("the flush buffer", lambda: (id(self.flush), self.flush.data_ptr(), self.flush.numel()), flush_state),
            ("the timing primitives", lambda: tuple(id(v) for v in vars(self.prims).values()),
             tuple(id(v) for v in vars(prims).values())),
        ])

    # -- requests --------------------------------------------------------------------------------------

    def handle(self, msg: dict) -> dict:
        op = msg.get("op")
        if op not in ("wall", "info", "trim"):
            self.timing = None  # the last timing run's sets are no longer needed: let the parent free them
        try:
            if op == "info":
                return self.info()
            if op == "trim":
                return self.trim()
            if op == "load":
                reply = self.load(msg["solution"])
            elif op == "call":
                reply = self.call(msg["key"], msg["inputs"], msg["outputs"])
            elif op == "bench":
                reply = self.bench(msg["key"], msg["sets"], msg["params"], msg.get("plan") or {})
            elif op == "wall":
                reply = self.wall(msg["key"], int(msg["n"]), bool(msg["call"]))
            elif op == "reference":
                reply = self.reference(msg["inputs"], bool(msg.get("upcast")))
            elif op == "inputs":
                reply = self.make_inputs(msg["workload"], int(msg["seed"]))
            elif op == "fetch":
                reply = self.fetch(msg["buffers"])
            else:
                return {"ok": False, "status": RUNTIME_ERROR, "reason": f"unknown request {op!r}"}
        except _Failure as f:
            reply = {"ok": False, "status": f.status, "reason": f.reason}
        except BaseException as e:  # noqa: BLE001 - the candidate may raise anything, SystemExit included
            status = COMPILE_ERROR if op == "load" else RUNTIME_ERROR
            reply = {"ok": False, "status": status, "reason": f"{type(e).__name__}: {e}"[:2000],
                     "traceback": traceback.format_exc()[-8000:]}
            reply = self._check_context(reply)
        if not reply.get("fatal"):
            reply = self._guards(msg, reply)
        return reply

    def info(self) -> dict:
        import torch

        d = {"ok": True, "pid": os.getpid(), "device": str(self.device),
             "flush_bytes": self.flush.numel() * self.flush.element_size(), "torch": torch.__version__,
             "threads": len(self.threads.snapshot()), "thread_guard": self.threads.available,
             "l2_persisting_guard": bool(self.l2 and self.l2.available)}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            d.update(device_name=props.name, l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0))
        return d

    def trim(self) -> dict:
        """Give the GPU memory torch's caching allocator holds but no tensor uses back to the device, so that
        another process (the reference's worker, the candidate's) can allocate it."""
        import gc

        import torch

        gc.collect()
        if self.device.type != "cuda":
            return {"ok": True, "reserved_bytes": 0}
        torch.cuda.empty_cache()
        return {"ok": True, "reserved_bytes": int(torch.cuda.memory_reserved(self.device))}

    def load(self, ref) -> dict:
        from .solutions import resolve_loader

        key = ref.key()
        if key in self.solutions:
            self.solutions.move_to_end(key)
            return {"ok": True, "load_ms": 0.0, "cached": True}
        before = self.threads.snapshot()
        self._loading = before
        t0 = time.perf_counter()
        fn = resolve_loader(ref.loader)(ref.payload, self.problem)
        if not callable(fn):
            raise _Failure(COMPILE_ERROR, f"loader {ref.loader} returned a {_type_name(fn)}, not a callable")
        self.prims.sync()
        self.solutions[key] = _Solution(ref, fn, before)
        while len(self.solutions) > SOLUTION_CACHE:
            self.solutions.popitem(last=False)
        return {"ok": True, "load_ms": (time.perf_counter() - t0) * 1e3, "cached": False}

    def _solution(self, key: str) -> _Solution:
        if key not in self.solutions:
            raise _Failure(RUNTIME_ERROR, "solution not loaded in this worker")
        return self.solutions[key]

    def call(self, key: str, inputs: list, outputs: list) -> dict:
        sol = self._solution(key)
        t0 = time.perf_counter()
        if sol.ref.destination_passing:
            sol.fn(*inputs, *outputs)
            self.prims.sync()
        else:
            result = sol.fn(*inputs)
            self.prims.sync()
            write_returned(result, outputs, self.names, inputs, self.input_names, _is_reference(sol))
            self.prims.sync()
        return {"ok": True, "wall_ms": (time.perf_counter() - t0) * 1e3}

    def _timing_callables(self, sol: _Solution, sets: list, plan: dict):
        """``before``, ``call`` and ``after`` for :func:`timing.bench` and :func:`timing.wall`."""
        from .inputs import rescale, rescale_factor

        prims, l2 = self.prims, self.l2
        seed = int(plan.get("seed", 0))
        rescaled = [list(ix) for ix in plan.get("rescale", [[] for _ in sets])]
        counts = [0] * len(sets)
        poison = [[self._poison_value(o.dtype) for o in s["outputs"]] for s in sets]
        dps = sol.ref.destination_passing
        fn = sol.fn
        last: list[Any] = [None]

        def before(i: int) -> None:
            s = sets[i]
            use = counts[i]
            counts[i] = use + 1
            if rescaled[i]:
                f = rescale_factor(seed, i, use)
                for j in rescaled[i]:
                    rescale(s["base"][j], f, out=s["work"][j])
            if dps:
                for o, v in zip(s["outputs"], poison[i]):
                    prims.fill_(o, v)
            if l2 is not None:
                l2.reset()

        if dps:
            def call(i: int) -> None:
                fn(*sets[i]["work"], *sets[i]["outputs"])
        else:
            def call(i: int) -> None:
                last[0] = None
                last[0] = fn(*sets[i]["work"])

        def after(j: int, i: int) -> None:
            s = sets[i]
            if dps:
                for c, o in zip(s["check"], s["outputs"]):
                    prims.copy_(c, o)
            else:
                write_returned(last[0], s["check"], self.names, s["work"], self.input_names, _is_reference(sol))
            prims.sync()

        return before, call, after, counts

    def bench(self, key: str, sets: list, params: dict, plan: dict) -> dict:
        from .timing import BenchParams, bench, wall_spin_cycles

        sol = self._solution(key)
        before, call, after, counts = self._timing_callables(sol, sets, plan)
        raised = self.l2.raised if self.l2 is not None else 0
        out = bench(call, len(sets), self.device, self.flush, BenchParams(**params), before, after, self.prims)
        self.prims.sync()
        self.timing = {"key": key, "sets": sets, "before": before, "call": call,
                       "spin_cycles": wall_spin_cycles(float(out.get("host_ms", 0.0)))}
        out.update(ok=True, counts=list(counts),
                   l2_persisting_resets=(self.l2.raised - raised) if self.l2 is not None else 0)
        return out

    def wall(self, key: str, n: int, with_call: bool) -> dict:
        from .timing import wall

        t = self.timing
        if t is None or t["key"] != key:
            raise _Failure(RUNTIME_ERROR, "no timing run of this solution to repeat")
        host: list[float] = []
        ms = wall(t["call"] if with_call else None, len(t["sets"]), n, self.flush, t["before"], self.prims,
                  t["spin_cycles"], host)
        host.sort()
        return {"ok": True, "worker_ms": ms, "call_host_ms": host[len(host) // 2] * 1e3 if host else None,
                "spin_cycles": t["spin_cycles"]}

    # -- the problem's own code (reference role) -------------------------------------------------------

    def _reference_module(self):
        if self._module is None:
            self._module = self.problem.reference_module()
        return self._module

    def _hold(self, values: dict) -> dict:
        """Keep ``values`` (tensors or scalars) for a ``fetch``; describe them for the parent."""
        import torch

        self.held, described = {}, {}
        for name, v in values.items():
            if isinstance(v, torch.Tensor) or (hasattr(v, "shape") and hasattr(v, "dtype")):
                t = torch.as_tensor(v).detach()
                self.held[name] = t
                described[name] = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
            elif isinstance(v, (bool, int, float)) or v is None:
                described[name] = {"value": v}
            else:
                raise _Failure(RUNTIME_ERROR, f"{name!r} is a {_type_name(v)}, neither a tensor nor a number")
        return described

    def reference(self, inputs: list, upcast: bool) -> dict:
        """Run the problem's ``run()`` on ``inputs`` (definition order); with ``upcast`` the ground truth
        (:func:`.accuracy.ground_truth`: float64, else float32). The outputs are held for a ``fetch``."""
        from .accuracy import ground_truth

        module = self._reference_module()
        named = dict(zip(self.input_names, inputs))
        if upcast:
            truth, how = ground_truth(self.problem, module, named)
            out = self._hold(truth) if truth is not None else {}
            self.prims.sync()
            if self.device.type == "cuda":
                import torch

                # float64 needs several times the reference's memory (L2_055 at batch 80: ~90 GB reserved by this
                # worker; the grader's own process then ran out fetching the truth): only the held outputs stay.
                torch.cuda.empty_cache()
            return {"ok": True, "outputs": out, "how": how, "truth": truth is not None}
        out = self._hold(self.problem.run_reference(named, module=module))
        self.prims.sync()
        return {"ok": True, "outputs": out}

    def make_inputs(self, workload, seed: int) -> dict:
        """The problem's own input generator (``custom_inputs_entrypoint``) for ``workload``; held for a
        ``fetch``."""
        made = self.problem.make_inputs(workload, device=self.device, seed=seed, module=self._reference_module())
        out = self._hold(made)
        self.prims.sync()
        return {"ok": True, "outputs": out}

    def fetch(self, buffers: dict) -> dict:
        """Copy what the last ``reference``/``inputs`` request holds into the parent's ``buffers``."""
        held, self.held = self.held, {}
        for name, buf in buffers.items():
            if name not in held:
                raise _Failure(RUNTIME_ERROR, f"nothing held under {name!r}")
            buf.copy_(held[name].reshape(buf.shape))
        self.prims.sync()
        del held
        if self.device.type == "cuda":  # the problem's own peak (a float64 ground truth: tens of GB at L2_055's
            import torch                # batch 80) is given back, for the candidate's worker to allocate

            torch.cuda.empty_cache()
        return {"ok": True}

    # -- guards and CUDA health ------------------------------------------------------------------------

    def _guards(self, msg: dict, reply: dict) -> dict:
        """TAMPERED or THREAD_SPAWNED (fatal: the worker must go) when a guard fires after a request."""
        op = msg.get("op")
        if op not in ("load", "call", "bench", "wall"):
            return reply
        changed = self.integrity.changes()
        if changed:
            shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
            return {"ok": False, "status": TAMPERED, "fatal": True,
                    "reason": f"the candidate replaced what the grader measures with: {shown}"}
        key = msg.get("key") or (msg["solution"].key() if op == "load" else None)
        sol = self.solutions.get(key) if key else None
        base = sol.threads if sol is not None else self._loading
        if base is not None:
            new = self.threads.new_since(base)
            if new:
                return {"ok": False, "status": THREAD_SPAWNED, "fatal": True,
                        "reason": f"the candidate started {len(new)} thread(s) that outlive its calls: "
                                  f"{', '.join(new[:6])} (work done by a background thread escapes timing "
                                  "and correctness checks)"}
        return reply

    def _check_context(self, reply: dict) -> dict:
        """After an exception on CUDA: is the context still usable? If not, the worker must go."""
        if self.device.type != "cuda":
            return reply
        import torch

        try:
            torch.cuda.synchronize(self.device)
            torch.ones(1, device=self.device).add_(1).item()
        except BaseException as e:  # noqa: BLE001
            reply.update(status=CRASHED, fatal=True,
                         reason=f"CUDA context lost: {reply['reason']} (then: {type(e).__name__}: {e})"[:2000])
        return reply


#: torch's intra-op threads in a CPU worker (candidate and reference alike). One: on a machine that runs
#: other work, a parallel region waits for its slowest thread, and a preempted thread made CPU times jump
#: ~100x (0.1 ms → 12 ms) with a steady median; one thread each keeps the two sides comparable.
#: ``$UCUTLASS_GRADER_CPU_THREADS`` changes it.
CPU_THREADS = 1


def _set_up(init: dict):
    """The worker's set-up before any candidate code: device, warm-up, timing primitives, guards, then the
    confinement. Returns ``(state, confinement)``."""
    import torch

    from . import channel, check, guards, inputs, sandbox, timing  # noqa: F401  (before any candidate code)
    from .sandbox import confine

    torch.set_grad_enabled(False)
    if init["device"] == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("UCUTLASS_GRADER_CPU_THREADS", CPU_THREADS))))
    dev = torch.device(init["device"])
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        dev = torch.device("cuda", torch.cuda.current_device())
    _warm_up(dev)
    state = _State(init["problem"], dev, timing.flush_buffer(dev), timing.Primitives(dev))
    confinement = confine(init.get("writable") or []) if init.get("confine", True) else None
    return state, confinement


def serve() -> None:
    """Entry point of a worker started by :mod:`.supervisor`: read the set-up from the channel (the
    descriptor in ``$UCUTLASS_GRADER_FD``), set up, say ``ready``, then serve requests until ``exit`` or
    end of file."""
    import socket

    from .channel import MAX_REQUEST_BYTES, Channel, ChannelError, loads_request

    faulthandler.enable(all_threads=True)  # a segfault leaves its stack in the log the parent reads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the grader; it stops the worker
    chan = Channel(socket.socket(fileno=int(os.environ.pop("UCUTLASS_GRADER_FD"))))
    try:
        data, fds = chan.recv(max_bytes=MAX_REQUEST_BYTES, accept_fds=True)
        init = loads_request(data, fds)
        state, confinement = _set_up(init)
    except BaseException as e:  # noqa: BLE001
        try:
            chan.send_json({"ok": False, "status": CRASHED, "reason": f"worker setup failed: {type(e).__name__}: {e}",
                            "traceback": traceback.format_exc()})
        except (OSError, ChannelError):
            pass
        return
    import torch

    chan.send_json({"ok": True, "event": "ready", "pid": os.getpid(), "threads": torch.get_num_threads(),
                    "confinement": confinement.to_json() if confinement is not None else None})
    while True:
        try:
            data, fds = chan.recv(max_bytes=MAX_REQUEST_BYTES, accept_fds=True)
            msg = loads_request(data, fds)
        except (ChannelError, OSError, EOFError):
            break
        if not isinstance(msg, dict) or msg.get("op") == "exit":
            break
        reply = state.handle(msg)
        reply["id"] = msg.get("id")
        del msg  # drop the shared tensors before replying, so the parent may free them
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            chan.send_json(reply)
        except (ChannelError, OSError):
            break
        if reply.get("fatal"):
            os._exit(FATAL_EXIT)


__all__ = ["serve", "write_returned", "SOLUTION_CACHE", "FATAL_EXIT"]
