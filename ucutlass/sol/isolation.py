"""Count a problem's reference in a child process, with a deadline.

A problem's reference (``run`` and its ``custom_inputs_entrypoint``) is data: it may sleep, spin, print
without end, call ``os._exit`` or crash the interpreter. It therefore never runs in the calling process.
:func:`count_in_child` starts a fresh interpreter (``subprocess``, never a fork of the caller: the caller
may hold CUDA state) that counts the given workloads of one problem with :func:`count_workload`, so
importing torch (about 2 s) is paid once for all of them.

The child imports torch and the counting code (within ``START_TIMEOUT_S``), then, for each request:

1. reads it and says ``ready``;
2. executes the reference source once (``loaded``, or ``error`` with phase ``load``);
3. for each workload says ``start``, then ``done`` with the :meth:`Counts.to_json` record, or ``error``;
4. says ``end``.

Outside :func:`shared_counting_process` a child serves one request and is killed; inside it, one child serves
the requests of many problems.

The request (problem, workloads, seed, inputs) goes to the child as a pickle in a temporary file, written by
the parent; results come back as JSON lines on a pipe of their own (``pass_fds``), so nothing the
problem's code makes is ever unpickled here. The child's stdout and stderr (the reference's prints,
faulthandler's traceback on a segfault) go to a second pipe, of which the last ``OUTPUT_CAP`` bytes are
kept for error messages and the rest is dropped.

Loading the reference and counting each workload must each finish within ``timeout_s``. Past it (after the
child has written its Python stack to its output), or when the child exits before ``end`` (an exit code,
a signal), the child's whole process group is killed
(``start_new_session``; on Linux the child also dies with its parent, ``PR_SET_PDEATHSIG``) and the
outcome is a :class:`BrokenReferenceError` naming the problem, the workload and the deadline or exit
status. An exception raised by the reference is the error it raised (``SolError``, ``ProblemError``;
any other type becomes a ``SolError`` naming it), for that workload only.

Length: both ends of one protocol (the parent's requests and deadlines, the child's loop) in one file, so what one
side writes and the other reads are read together.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import ProblemError, UcutError
from ._errors import BrokenReferenceError, HardwareError, SolError
from .counting import Counts, count_workload

#: Seconds the reference may take to load, and again to count each workload, by default.
DEFAULT_TIMEOUT_S = 60.0
#: Seconds the child may take to start (interpreter, torch, the counting code) before any problem code runs.
START_TIMEOUT_S = 120.0
#: Bytes of the child's own output (the reference's prints) kept for error messages: the last ones.
OUTPUT_CAP = 64 * 1024
#: Characters of that output quoted in an error message.
OUTPUT_QUOTED = 2000
#: A message line longer than this is not the child's (its records are a few kB).
MESSAGE_CAP = 64 * 1024 * 1024
#: Past a deadline the child is sent this signal first: faulthandler writes its Python stack to the output
#: (even in a pure-Python loop: the handler is C), which the error message then quotes.
DUMP_SIGNAL = signal.SIGUSR1

#: Errors that keep their type across the process boundary; any other becomes a SolError naming it.
_ERRORS: dict[str, type[UcutError]] = {"SolError": SolError, "ProblemError": ProblemError,
                                       "HardwareError": HardwareError}

#: The child's first lines: the parent's import path (as multiprocessing's spawn does), then :func:`child_main`.
#: Its output is unbuffered (PYTHONUNBUFFERED), so that the last prints before a hang reach the error message.
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[3]); "
         "from ucutlass.sol.isolation import child_main; sys.exit(child_main(sys.argv[1:3]))")


def check_timeout(timeout_s: float | None) -> float:
    """``timeout_s``, or :data:`DEFAULT_TIMEOUT_S` for None.

    Raises:
        ValueError: not a positive number of seconds.
    """
    if timeout_s is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


def count_in_child(problem, workloads: Sequence, *, seed: int | None = None,
                   inputs: Mapping[str, Any] | None = None, timeout_s: float | None = None) -> list:
    """Count ``workloads`` of ``problem`` in one child process (see the module docstring).

    Args:
        problem: a :class:`ucutlass.problem.Problem`.
        workloads: its workloads to count, in this order.
        seed: as :func:`count_workload`.
        inputs: as :func:`count_workload` (for one workload). Tensors small enough for a CPU shadow are copied
            to the child; larger ones travel as their shape, strides and dtype only (all that is used of them).
        timeout_s: limit for loading the reference, and for counting each workload (default
            :data:`DEFAULT_TIMEOUT_S`).

    Returns:
        One outcome per workload, in order: its :class:`Counts`, or the :class:`UcutError` counting it raised.
        When the child hangs or exits, the list ends early with a :class:`BrokenReferenceError` in the place
        of the workload it was on; the later workloads are left out.

    Raises:
        SolError: the child itself could not start (no problem code had run yet).
        ValueError: ``timeout_s`` is not a positive number.
    """
    timeout_s = check_timeout(timeout_s)
    workloads = list(workloads)
    if not workloads:
        return []
    with tempfile.TemporaryDirectory(prefix="ucutlass-sol-") as tmp:
        request = Path(tmp) / "request.pickle"
        request.write_bytes(pickle.dumps({"problem": problem, "workloads": workloads, "seed": seed,
                                          "inputs": _encode_inputs(inputs)}))
        child = _take_child()
        try:
            return child.count(problem, workloads, request, timeout_s)
        finally:
            _give_back(child)


@contextlib.contextmanager
def shared_counting_process():
    """Within this block (in this thread), problems are counted one after another in one child process instead
    of one process per :func:`count_in_child` call.

    Each process pays ~4 s to start (torch and torch._dynamo); a caller that counts many problems (a campaign,
    a test suite, ``python -m ucutlass.sol.published``) saves that per problem. The process is replaced after
    any hang, exit or malformed message, and killed when the block ends. The references of the problems counted
    in it then share one interpreter (a reference that changes torch's global state affects those after it),
    never the caller's. Blocks nest; the outermost one owns the process.
    """
    depth = getattr(_LOCAL, "depth", 0)
    _LOCAL.depth = depth + 1
    try:
        yield
    finally:
        _LOCAL.depth = depth
        if depth == 0:
            child, _LOCAL.child = getattr(_LOCAL, "child", None), None
            if child is not None:
                child.close()


_LOCAL = threading.local()  # depth of shared_counting_process blocks, and the process kept for reuse


def _take_child() -> _Child:
    """The shared process when one is kept and healthy, else a new one."""
    child, _LOCAL.child = getattr(_LOCAL, "child", None), None
    if child is not None and child.owner == (os.getpid(), threading.get_ident()) and not child._exited():
        return child
    if child is not None:
        child.close()
    return _Child()


def _give_back(child: _Child) -> None:
    """Keep a healthy child for the next request inside :func:`shared_counting_process`; else kill it."""
    if getattr(_LOCAL, "depth", 0) and child.healthy:
        _LOCAL.child = child
    else:
        child.close()


# --- parent side ---------------------------------------------------------------------------------------

class _Deadline(Exception):
    """The deadline of the current phase passed."""


class _Child:
    """One counting process, its message pipe and its capped output."""

    def __init__(self):
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(write_fd), str(os.getpid()), json.dumps(sys.path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._messages = read_fd
        self._output = self.proc.stdout.fileno()
        os.set_blocking(self._messages, False)
        os.set_blocking(self._output, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._messages, selectors.EVENT_READ)
        self._selector.register(self._output, selectors.EVENT_READ)
        self._buffer = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._eof = False
        self.healthy = True
        self.owner = (os.getpid(), threading.get_ident())

    # reading

    def _read(self, fd: int) -> None:
        """Read what ``fd`` holds now (non-blocking); on EOF stop watching it."""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                if fd in self._selector.get_map():
                    self._selector.unregister(fd)
                if fd == self._messages:
                    self._eof = True
                return
            if fd == self._messages:
                self._buffer += data
            else:
                self._tail += data
                if len(self._tail) > OUTPUT_CAP:
                    self._dropped += len(self._tail) - OUTPUT_CAP
                    del self._tail[:len(self._tail) - OUTPUT_CAP]

    def _status(self) -> int | None:
        """The child's exit status (negative: the signal that killed it), or None while it runs. Where the OS
        allows (``waitid`` with ``WNOWAIT``) the child stays unreaped, so that its pid, which is also its
        process group's id, cannot be reused before :meth:`close` kills the group."""
        if self.proc.returncode is not None or not hasattr(os, "waitid"):
            return self.proc.poll()
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.proc.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _exited(self) -> bool:
        return self._status() is not None

    def next_message(self, deadline: float) -> dict | None:
        """The next message, or None once the child has closed its pipe or exited.

        Raises:
            _Deadline: none came before ``deadline``.
            ValueError: a line that is not a JSON object, or far too long.
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                try:
                    msg = json.loads(line)
                except RecursionError:
                    raise ValueError("JSON nested too deep") from None
                if not isinstance(msg, dict):
                    raise ValueError(f"not a JSON object: {line[:200]!r}")
                return msg
            if len(self._buffer) > MESSAGE_CAP:
                raise ValueError(f"a message line over {MESSAGE_CAP} bytes")
            if self._eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Deadline()
            for key, _ in self._selector.select(min(left, 0.2)):
                self._read(key.fd)
            if self._exited():
                # a grandchild may hold the pipes open: read what is there and call it the end
                self._read(self._messages)
                self._read(self._output)
                self._eof = True

    def dump_stack(self, wait_s: float = 0.5) -> None:
        """Have the child write its Python stack to its output (:data:`DUMP_SIGNAL`) and read it."""
        try:
            os.kill(self.proc.pid, DUMP_SIGNAL)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and b"most recent call first" not in self._tail[-4096:]:
            if self._output in self._selector.get_map():
                self._selector.select(0.05)
            else:
                time.sleep(0.05)
            self._read(self._output)
        time.sleep(0.05)  # the rest of the dump
        self._read(self._output)

    def output(self) -> str:
        """The child's last output (at most :data:`OUTPUT_QUOTED` characters), for an error message."""
        self._read(self._output)
        text = self._tail.decode(errors="replace").strip()
        if self._dropped or len(text) > OUTPUT_QUOTED:
            text = "…" + text[-OUTPUT_QUOTED:]
        return text

    # ending

    def close(self) -> None:
        """Kill the child's process group (the child and anything it started), reap the child, close the pipes."""
        if self.owner[0] != os.getpid():
            return  # a fork of the process that started it: the child is not ours to kill
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        self._selector.close()
        os.close(self._messages)
        self.proc.stdout.close()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def exit_status(self, grace_s: float = 2.0) -> str:
        """How the child ended (``exited with code 3``, ``was killed by signal SIGSEGV (11)``), waiting up to
        ``grace_s`` for it to end after closing its pipe."""
        deadline = time.monotonic() + grace_s
        while (code := self._status()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if code is None:
            return "closed its message pipe and went on running"
        if code >= 0:
            return f"exited with code {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by signal {name} ({-code})"

    # the conversation

    def count(self, problem, workloads: list, request: Path, timeout_s: float) -> list:
        """Send one request and collect its outcomes (see :func:`count_in_child`). Afterwards ``healthy`` says
        whether the child may take another request."""
        self.healthy = False
        self._read(self._output)
        self._tail.clear()  # quote only this request's output
        self._dropped = 0
        try:
            self.proc.stdin.write(f"{request}\n".encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # it died already: the first read says how
        outcomes: list = []
        state, deadline = "starting", time.monotonic() + START_TIMEOUT_S
        while True:
            where = workloads[min(len(outcomes), len(workloads) - 1)].label()  # the workload it is on
            try:
                msg = self.next_message(deadline)
            except _Deadline:
                self.dump_stack()
                if state == "starting":
                    raise SolError(f"the SOL counting process for {problem.id} did not start within "
                                   f"{START_TIMEOUT_S:g} s{_quoted(self.output())}") from None
                what = ("loading (executing its source)" if state == "loading"
                        else f"counting workload {where}")
                return outcomes + [BrokenReferenceError(
                    f"broken problem {problem.id}: its reference did not finish {what} within {timeout_s:g} s; "
                    f"the counting process was killed (if it is only slow, allow more with --timeout SECONDS)"
                    f"{_quoted(self.output())}", problem_id=problem.id, workload=where, timeout_s=timeout_s)]
            except ValueError as e:
                return outcomes + [BrokenReferenceError(
                    f"broken problem {problem.id}: the counting process sent a malformed message ({e}) while "
                    f"{_doing(state, where)}", problem_id=problem.id, workload=where)]
            if msg is None:
                status = self.exit_status()
                if state == "starting":
                    raise SolError(f"the SOL counting process for {problem.id} {status} before it started"
                                   f"{_quoted(self.output())}")
                return outcomes + [BrokenReferenceError(
                    f"broken problem {problem.id}: the counting process {status} while {_doing(state, where)}"
                    f"{_quoted(self.output())}", problem_id=problem.id, workload=where, status=status)]
            event, index = msg.get("event"), msg.get("index")
            expected = len(outcomes)
            if state == "starting" and event == "ready":
                state = "loading"
            elif state == "loading" and event == "loaded":
                state = "idle"
            elif state == "loading" and event == "error":
                error = _rebuild(msg.get("error"), problem, None)
                self.healthy = True
                return [error] * len(workloads)
            elif state == "idle" and event == "start" and index == expected < len(workloads):
                state = "counting"
            elif state == "counting" and event == "done" and index == expected:
                try:
                    outcomes.append(Counts.from_json(msg.get("counts")))
                except ValueError as e:
                    return outcomes + [BrokenReferenceError(
                        f"broken problem {problem.id}: the counting process sent malformed counts ({e}) for "
                        f"workload {where}", problem_id=problem.id, workload=where)]
                state = "idle"
            elif state == "counting" and event == "error" and index == expected:
                outcomes.append(_rebuild(msg.get("error"), problem, workloads[expected]))
                state = "idle"
            elif state == "idle" and event == "end" and expected == len(workloads):
                self.healthy = True
                return outcomes
            else:
                return outcomes + [BrokenReferenceError(
                    f"broken problem {problem.id}: the counting process sent {event!r} (index {index!r}) "
                    f"while {_doing(state, where)}: not its protocol", problem_id=problem.id, workload=where)]
            deadline = time.monotonic() + timeout_s


def _doing(state: str, where: str) -> str:
    return {"loading": "its reference was loading (executing its source)",
            "counting": f"counting workload {where}"}.get(state, f"between workloads (before {where})")


def _quoted(output: str) -> str:
    return f"\nits last output:\n{output}" if output else ""


def _rebuild(error: Any, problem, workload) -> UcutError:
    """The parent's exception for an ``error`` record of the child."""
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return SolError(f"{problem.id}: counting failed and the counting process sent no reason ({error!r})")
    kind, message = str(error.get("type")), error["message"]
    if kind in _ERRORS:
        return _ERRORS[kind](message)
    where = f" workload {workload.label()}" if workload is not None else " the reference"
    at = f" ({error['at']})" if isinstance(error.get("at"), str) and error["at"] else ""
    return SolError(f"{problem.id}: counting{where} failed: {kind}: {message}{at}")


def _encode_inputs(inputs: Mapping[str, Any] | None) -> dict | None:
    """Caller inputs for the request: small tensors as CPU copies (their values steer the count), large ones
    (and meta ones) as shape, strides and dtype."""
    if inputs is None:
        return None
    import torch

    from .tracer import Tracer

    out: dict[str, tuple] = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            out[name] = ("value", value)
        elif value.device.type != "meta" and Tracer.shadow_fits(value):
            cpu = value.detach().to("cpu")
            if cpu.untyped_storage().nbytes() > 2 * max(cpu.numel() * cpu.element_size(), 1):
                cpu = cpu.clone()  # a small view of a large storage: do not copy all of it
            out[name] = ("tensor", cpu)
        else:
            out[name] = ("meta", tuple(value.shape), tuple(value.stride()), value.dtype)
    return out


# --- child side ----------------------------------------------------------------------------------------

def child_main(argv: Sequence[str]) -> int:
    """Entry point of the counting process: ``MESSAGE_FD PARENT_PID``; on stdin, one line per request: the path
    of its pickle. Exits at the end of stdin."""
    import faulthandler

    faulthandler.enable()  # a segfault in the reference leaves its Python traceback in the output
    faulthandler.register(DUMP_SIGNAL, all_threads=False)  # so does a hang: the parent signals before the kill
    fd, parent = int(argv[0]), int(argv[1])
    _die_with_parent(parent)

    def send(**msg) -> None:
        data = (json.dumps(msg) + "\n").encode()
        while data:
            data = data[os.write(fd, data):]

    # The start phase pays for these, not the reference's deadline: the first dispatch mode imports torch._dynamo
    # (~2 s), through torch._disable_dynamo.
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    from . import tracer  # noqa: F401

    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        _serve(pickle.loads(Path(line.strip()).read_bytes()), send)


def _serve(request: Mapping[str, Any], send) -> None:
    """Count one request: load the reference, then each workload (see the module docstring)."""
    problem, workloads, seed = request["problem"], request["workloads"], request["seed"]
    inputs = _decode_inputs(request["inputs"])
    send(event="ready")
    try:
        problem.reference_module()
    except Exception as e:
        send(event="error", phase="load", error=_error_record(e, problem))
        return
    send(event="loaded")
    for i, workload in enumerate(workloads):
        send(event="start", index=i)
        try:
            counts = count_workload(problem, workload, inputs=inputs, seed=seed)
        except Exception as e:
            send(event="error", index=i, error=_error_record(e, problem))
        else:
            send(event="done", index=i, counts=counts.to_json())
    send(event="end")


def _die_with_parent(parent: int) -> None:
    """On Linux, have the kernel kill this process when its parent dies; leave if it has died already."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _decode_inputs(encoded: Mapping[str, tuple] | None) -> dict[str, Any] | None:
    if encoded is None:
        return None
    import torch

    out = {}
    for name, (kind, *rest) in encoded.items():
        if kind == "meta":
            shape, stride, dtype = rest
            out[name] = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        else:
            out[name] = rest[0]
    return out


def _error_record(e: Exception, problem) -> dict:
    """What the parent needs to raise the same error: its type, message, and the reference line it came from."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == f"<{problem.id} reference>"]
    at = f"reference line {frames[-1].lineno}, in {frames[-1].name}" if frames else ""
    return {"type": type(e).__name__, "message": str(e), "at": at}


__all__ = ["count_in_child", "shared_counting_process", "check_timeout", "DEFAULT_TIMEOUT_S", "START_TIMEOUT_S",
           "OUTPUT_CAP"]
