"""The worker process a candidate (or the reference, in a worker of its own) runs in.

Parent side: :class:`Worker` spawns the process (``torch.multiprocessing``'s *spawn* context: never fork
once CUDA is up), sends it requests and waits for a reply, the process's death, or a deadline — whichever
comes first — so a crash or a hang is a result, not a dead grader.

Child side: :func:`worker_main` sets up the device, warms up torch's thread pools and CUDA, binds the
timing primitives and takes the guards' snapshots (:mod:`.guards`) — all before any candidate code is
imported — then builds solutions with their loaders, calls them on tensors the parent owns and shares
(CUDA IPC on the GPU, shared memory on the CPU), and times them with :mod:`.timing`.

Protocol: requests (parent → child) are pickled dicts, because they carry shared tensors; replies
(child → parent) are JSON, so nothing the candidate's process sends is unpickled in the parent. A reply
never says whether outputs are right: the parent reads the buffers itself, and times the ``wall``
batches with its own clock.

=========  ==========================================================  ====================================
op         request fields                                              reply (``ok`` True)
=========  ==========================================================  ====================================
``info``   —                                                           pid, device, L2 and flush sizes, …
``load``   ``solution`` (:class:`SolutionRef`)                         ``load_ms``
``call``   ``key``, ``inputs``, ``outputs``                            ``wall_ms`` (outputs written, synced)
``bench``  ``key``, ``sets`` [{base, work, outputs, check}],           ``times_ms``, ``warmup_calls``,
           ``params``, ``plan`` {seed, rescale}                        ``estimate_ms``, ``snapshots``, …
``wall``   ``key``, ``n``, ``call`` (bool): on the last bench's sets   ``worker_ms`` (diagnostic only)
``exit``   —                                                           (no reply; the process exits)
=========  ==========================================================  ====================================

A failed request replies ``{"ok": False, "status": ..., "reason": ..., "traceback": ...}``. After every
request the guards run (TAMPERED, THREAD_SPAWNED); a guard that fires, or a CUDA error that leaves the
context unusable, also says ``"fatal": True`` and the worker exits: the parent records the status and
starts a fresh worker, so no candidate leaves state behind for the next.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
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
                   input_names: list[str] | None = None) -> None:
    """Copy a return-style result into the parent's output buffers, after checking every value.

    Each value must be exactly a ``torch.Tensor`` (a 0-d output may also be a Python number) on the
    buffer's device, with the buffer's shape and dtype, contiguous, and sharing memory with no input and
    no other output; nothing is copied unless all are.

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
        if not v.is_contiguous():
            raise _Failure(INCORRECT_SHAPE, f"output {name!r} is not contiguous (strides {tuple(v.stride())})")
    in_names = list(input_names) if input_names is not None else [f"input {i}" for i in range(len(inputs))]
    alias = aliasing(list(zip(names, values)), list(zip(in_names, inputs)))
    if alias:
        raise _Failure(OUTPUT_ALIASED, alias)
    for v, buf in zip(values, outputs):
        if type(v) is torch.Tensor:
            buf.copy_(v)
        else:
            buf.fill_(v)


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
        if op not in ("wall", "info"):
            self.timing = None  # the last timing run's sets are no longer needed: let the parent free them
        try:
            if op == "info":
                return self.info()
            if op == "load":
                reply = self.load(msg["solution"])
            elif op == "call":
                reply = self.call(msg["key"], msg["inputs"], msg["outputs"])
            elif op == "bench":
                reply = self.bench(msg["key"], msg["sets"], msg["params"], msg.get("plan") or {})
            elif op == "wall":
                reply = self.wall(msg["key"], int(msg["n"]), bool(msg["call"]))
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
            write_returned(result, outputs, self.names, inputs, self.input_names)
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
                write_returned(last[0], s["check"], self.names, s["work"], self.input_names)
            prims.sync()

        return before, call, after, counts

    def bench(self, key: str, sets: list, params: dict, plan: dict) -> dict:
        from .timing import BenchParams, bench

        sol = self._solution(key)
        before, call, after, counts = self._timing_callables(sol, sets, plan)
        raised = self.l2.raised if self.l2 is not None else 0
        out = bench(call, len(sets), self.device, self.flush, BenchParams(**params), before, after, self.prims)
        self.prims.sync()
        self.timing = {"key": key, "sets": sets, "before": before, "call": call}
        out.update(ok=True, counts=list(counts),
                   l2_persisting_resets=(self.l2.raised - raised) if self.l2 is not None else 0)
        return out

    def wall(self, key: str, n: int, with_call: bool) -> dict:
        from .timing import wall

        t = self.timing
        if t is None or t["key"] != key:
            raise _Failure(RUNTIME_ERROR, "no timing run of this solution to repeat")
        ms = wall(t["call"] if with_call else None, len(t["sets"]), n, self.flush, t["before"], self.prims)
        return {"ok": True, "worker_ms": ms}

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


def _redirect_output(log_path: str | None) -> None:
    if not log_path:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _watch_parent(parent_pid: int) -> None:
    """Leave when the parent is gone (a hung candidate would otherwise outlive a killed grader)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


def _send(conn, reply: dict) -> None:
    conn.send_bytes(json.dumps(reply, default=str).encode())


def worker_main(conn, problem, device: str, log_path: str | None, parent_pid: int) -> None:
    """Entry point of a spawned worker: set up, say ``ready``, then serve requests until ``exit``/EOF."""
    _redirect_output(log_path)
    faulthandler.enable(all_threads=True)  # a segfault leaves its stack in the log the parent reads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the grader; it stops the worker
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # torch.compile without worker threads
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        import torch

        from . import check, guards, inputs, timing  # noqa: F401  (imported before any candidate code)

        torch.set_grad_enabled(False)
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
            dev = torch.device("cuda", torch.cuda.current_device())
        _warm_up(dev)
        state = _State(problem, dev, timing.flush_buffer(dev), timing.Primitives(dev))
    except BaseException as e:  # noqa: BLE001
        _send(conn, {"ok": False, "status": CRASHED, "reason": f"worker setup failed: {type(e).__name__}: {e}",
                     "traceback": traceback.format_exc()})
        return
    _send(conn, {"ok": True, "event": "ready", "pid": os.getpid()})
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if not isinstance(msg, dict) or msg.get("op") == "exit":
            break
        reply = state.handle(msg)
        reply["id"] = msg.get("id")
        del msg  # drop the shared tensors before replying, so the parent may free them
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            _send(conn, reply)
        except (EOFError, OSError, BrokenPipeError):
            break
        if reply.get("fatal"):
            os._exit(FATAL_EXIT)


# ======================================================================================================
# parent side
# ======================================================================================================

@dataclass
class Reply:
    """What came back from one request.

    Attributes:
        ok: the request succeeded.
        status: when not ok, a status name (RUNTIME_ERROR, COMPILE_ERROR, INCORRECT_SHAPE,
            INCORRECT_DTYPE, CRASHED, TIMEOUT).
        reason: one line, when not ok.
        data: the reply's fields.
        log: what the worker printed (stdout and stderr, faulthandler's dump) during the request.
        dead: the worker is gone or must be replaced.
    """

    ok: bool
    status: str = ""
    reason: str = ""
    data: dict = field(default_factory=dict)
    log: str = ""
    dead: bool = False


_LOG_TAIL = 8000


class Worker:
    """A spawned worker process and the parent's end of its pipe.

    Args:
        problem: sent to the worker once, at start.
        device: ``"cuda"``, ``"cuda:1"`` or ``"cpu"``.
        log_path: the worker's stdout/stderr go here (read back into results).
        role: ``"candidate"`` or ``"reference"`` (process name and messages only).
    """

    def __init__(self, problem, device: str, log_path: Path, role: str = "candidate"):
        import torch.multiprocessing as tmp  # registers the reductions that share tensors

        ctx = tmp.get_context("spawn")
        self.role = role
        self.log_path = Path(log_path)
        self.log_path.touch()
        self._conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=worker_main, name=f"ucutlass-grader-{role}",
                                args=(child, problem, device, str(self.log_path), os.getpid()))
        self.proc.start()
        child.close()
        self.ready = False
        self.started = time.monotonic()
        self._seq = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.is_alive()

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return ""
        text = data.decode(errors="replace")
        return text if len(text) <= _LOG_TAIL else "…" + text[-_LOG_TAIL:]

    def _log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _death(self) -> str:
        self.proc.join(timeout=2.0)
        code = self.proc.exitcode
        if code is None:
            return "worker stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker died with {name} (exit code {code})"
        if code == FATAL_EXIT:
            return "worker left after a fatal CUDA error"
        return f"worker exited with code {code} before finishing"

    def _wait(self, timeout: float, what: str, offset: int, seq: int | None = None) -> Reply:
        from multiprocessing.connection import wait

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready = wait([self._conn, self.proc.sentinel], timeout=max(left, 0.0))
            if self._conn in ready or self._conn.poll(0):
                try:
                    raw = self._conn.recv_bytes()
                except (EOFError, OSError):
                    self.kill()
                    return Reply(False, CRASHED, self._death(), log=self._log_since(offset), dead=True)
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = None
                if not isinstance(data, dict):
                    self.kill()
                    return Reply(False, CRASHED, "worker sent a malformed reply", log=self._log_since(offset),
                                 dead=True)
                if data.get("id") != seq:  # the worker's own loop answers each request once, in order
                    self.kill()
                    return Reply(False, TAMPERED, f"a reply out of step with the requests (id {data.get('id')!r}, "
                                 f"expected {seq}): a forged or duplicated reply on the worker's pipe",
                                 log=self._log_since(offset), dead=True)
                log = self._log_since(offset)
                if data.get("ok") is True:
                    return Reply(True, data=data, log=log)
                dead = bool(data.get("fatal"))
                if dead:
                    self.proc.join(timeout=5.0)
                    self.kill()
                reason = str(data.get("reason", "failed"))
                tb = data.get("traceback")
                return Reply(False, str(data.get("status", RUNTIME_ERROR)), reason, data=data,
                             log=(tb + "\n" if tb else "") + log, dead=dead)
            if self.proc.sentinel in ready:
                return Reply(False, CRASHED, self._death(), log=self._log_since(offset), dead=True)
            if left <= 0:
                self.kill()
                return Reply(False, TIMEOUT, f"{what} did not finish within {timeout:g} s; worker killed",
                             log=self._log_since(offset), dead=True)

    def wait_ready(self, timeout: float) -> Reply:
        """Wait for the worker's ``ready`` (torch imported, device set up)."""
        if self.ready:
            return Reply(True)
        r = self._wait(timeout, "worker start", 0)
        self.ready = r.ok
        return r

    def request(self, msg: dict, timeout: float) -> Reply:
        """Send one request and wait for its reply, the worker's death, or ``timeout`` seconds.

        On death or timeout the worker is killed and the reply has ``dead`` set; a worker is never
        reused after that.
        """
        offset = self._log_offset()
        self._seq += 1
        msg = {**msg, "id": self._seq}
        try:
            self._conn.send(msg)
        except (EOFError, OSError, BrokenPipeError):
            self.kill()
            return Reply(False, CRASHED, self._death(), log=self._log_since(offset), dead=True)
        try:
            return self._wait(timeout, f"{msg.get('op', 'request')} request", offset, self._seq)
        except BaseException:  # e.g. KeyboardInterrupt: the reply would arrive out of step; start over
            self.kill()
            raise

    def kill(self) -> None:
        """Stop the process now (SIGKILL) and reap it."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10.0)

    def close(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit, kill it if it does not, and release the pipe."""
        if self.proc.is_alive():
            try:
                self._conn.send({"op": "exit"})
            except (EOFError, OSError, BrokenPipeError):
                pass
            self.proc.join(timeout=timeout)
        self.kill()
        try:
            self._conn.close()
        except OSError:
            pass
        try:
            self.proc.close()
        except ValueError:
            pass


__all__ = ["Worker", "Reply", "worker_main", "write_returned"]
