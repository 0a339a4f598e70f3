"""The parent's handle on a grader worker (:mod:`.worker` is the child side and holds the protocol's table).

:class:`Worker` starts a *supervisor* (:mod:`.supervisor`), which starts the worker in a session of its own and
owns its whole process tree, and talks to the worker over one UNIX socket (:mod:`.channel`): a request goes out,
and the parent waits for the reply, the worker's end (the supervisor reports it), or a deadline — whichever comes
first — so a crash or a hang is a result, not a dead grader. After every reply the parent looks for processes the
candidate left running below the supervisor (PROCESS_SPAWNED). Stopping a worker stops and kills everything below
the supervisor. Replies are JSON: nothing the candidate's process sends is unpickled here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .worker import CRASHED, FATAL_EXIT, PROCESS_SPAWNED, RUNTIME_ERROR, TAMPERED, TIMEOUT

@dataclass
class Reply:
    """What came back from one request.

    Attributes:
        ok: the request succeeded.
        status: when not ok, a status name (RUNTIME_ERROR, COMPILE_ERROR, INCORRECT_SHAPE,
            INCORRECT_DTYPE, CRASHED, TIMEOUT, TAMPERED, THREAD_SPAWNED, PROCESS_SPAWNED).
        reason: one line, when not ok.
        data: the reply's fields.
        log: what the worker printed (stdout and stderr, faulthandler's dump) during the request, at most
            :data:`LOG_HEAD` + :data:`LOG_TAIL` characters (its start and its end).
        log_bytes: how many bytes the worker printed during the request (``log`` may show fewer).
        dead: the worker is gone or must be replaced.
    """

    ok: bool
    status: str = ""
    reason: str = ""
    data: dict = field(default_factory=dict)
    log: str = ""
    log_bytes: int = 0
    dead: bool = False


#: What a reply's log keeps of a request's output: its first and its last characters.
LOG_HEAD = 2000
LOG_TAIL = 6000
#: The log file is emptied between requests once it passes this size (the worker appends; only the part
#: a request wrote is read back).
LOG_TRUNCATE_BYTES = 32 << 20
#: No file a worker writes grows past this (RLIMIT_FSIZE): its log, its builds, its caches.
WORKER_FILE_BYTES = 1 << 30
#: A process found below the supervisor after a request is looked at again for this long before it is a
#: verdict (a child the candidate waited for may still be on its way out).
PROCESS_SETTLE_S = 0.2

_SUPERVISOR = Path(__file__).with_name("supervisor.py")
_SERVE = "from ucutlass.grader.worker import serve; serve()"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class Worker:
    """A worker process below its supervisor, and the parent's ends of the channel and control socket.

    Args:
        problem: sent to the worker at start (its ``path`` the scratch copy of the problem's files).
        device: ``"cuda"``, ``"cuda:1"`` or ``"cpu"``.
        log_path: the worker's stdout/stderr go here (read back into results, bounded).
        role: ``"candidate"`` or ``"reference"`` (messages only).
        scratch: the worker's working folder: its only writable folder besides ``writable``.
        writable: further folders it may write (Landlock), e.g. ``/dev`` and a build cache.
        env: the worker's environment (default: this process's).
        confine: apply the confinement (off only to test what holds without it).
    """

    def __init__(self, problem, device: str, log_path: Path, role: str = "candidate", *, scratch: Path,
                 writable: tuple[str, ...] = (), env: dict | None = None, confine: bool = True):
        import socket
        import subprocess

        from .channel import Channel

        self.role = role
        self.log_path = Path(log_path)
        self.log_path.touch()
        self.scratch = Path(scratch)
        self._init = {"problem": problem, "device": device, "writable": [str(self.scratch), *writable],
                      "confine": confine, "role": role}
        chan_p, chan_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ctl_p, ctl_c = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = [sys.executable, str(_SUPERVISOR), "--ctl", str(ctl_c.fileno()), "--chan", str(chan_c.fileno()),
                "--log", str(self.log_path), "--cwd", str(self.scratch), "--fsize", str(WORKER_FILE_BYTES),
                "--userns", "1" if confine else "0", "--", sys.executable, "-c", _SERVE]
        with open(self.log_path, "ab") as log:
            self._sup = subprocess.Popen(args, pass_fds=(ctl_c.fileno(), chan_c.fileno()), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, close_fds=True, start_new_session=True,
                                         env=env if env is not None else dict(os.environ))
        chan_c.close()
        ctl_c.close()
        self._chan = Channel(chan_p)
        self._ctl = ctl_p
        self._ctl.setblocking(False)
        self._ctl_buf = b""
        self.worker_pid: int | None = None
        self.userns = False
        self.exit_code: int | None = None
        self.ready = False
        self.info: dict = {}
        self.started = time.monotonic()
        self._seq = 0
        self._baseline: set[int] = set()
        self._closed = False

    # -- state ----------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The worker's pid (as this process sees it), once it runs."""
        return self.worker_pid

    @property
    def supervisor_pid(self) -> int:
        return self._sup.pid

    def alive(self) -> bool:
        self._read_ctl(0.0)
        return self._sup.poll() is None and self.exit_code is None

    def _read_ctl(self, timeout: float) -> list[dict]:
        """Messages from the supervisor (waiting up to ``timeout`` seconds for the first)."""
        import select

        out = []
        try:
            ready, _, _ = select.select([self._ctl], [], [], max(timeout, 0.0))
        except (OSError, ValueError):
            return out
        if not ready:
            return out
        try:
            data = self._ctl.recv(65536)
        except (BlockingIOError, InterruptedError):
            data = None
        except OSError:
            data = b""
        if data == b"":
            if self.exit_code is None and self._sup.poll() is not None:
                self.exit_code = self._sup.returncode if self._sup.returncode < 0 else -signal.SIGKILL
            return out
        if data:
            self._ctl_buf += data
        while b"\n" in self._ctl_buf:
            line, self._ctl_buf = self._ctl_buf.split(b"\n", 1)
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if "pid" in m and self.worker_pid is None:
                self.worker_pid, self.userns = int(m["pid"]), bool(m.get("userns"))
            if "exit" in m and self.exit_code is None:
                self.exit_code = int(m["exit"])
            out.append(m)
        return out

    def _death(self) -> str:
        """Why the worker is gone, once the supervisor has said so (or the supervisor itself died)."""
        deadline = time.monotonic() + 2.0
        while self.exit_code is None and time.monotonic() < deadline:
            if self._sup.poll() is not None:
                break
            self._read_ctl(0.05)
        code = self.exit_code
        if code is None:
            if self._sup.poll() is not None:
                return f"the worker's supervisor ended ({self._sup.returncode}): the worker is gone"
            return "worker stopped answering"
        if code < 0:
            return f"worker died with {_signal_name(-code)} (exit code {code})"
        if code == FATAL_EXIT:
            return "worker left after a fatal CUDA error"
        return f"worker exited with code {code} before finishing"

    def stray_processes(self) -> list[str]:
        """Processes below the supervisor other than the worker (and what ran there at its start), as
        ``"pid (name)"``: what a candidate started and left running."""
        from .sandbox import descendants

        def scan() -> set[int]:
            return {p for p in descendants(self._sup.pid) if p != self.worker_pid} - self._baseline

        found = scan()
        deadline = time.monotonic() + PROCESS_SETTLE_S
        while found and time.monotonic() < deadline:
            time.sleep(0.01)
            found &= scan()
        out = []
        for pid in sorted(found):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    out.append(f"{pid} ({f.read().strip()})")
            except OSError:
                continue
        return out

    # -- log ------------------------------------------------------------------------------------------

    def _log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _log_since(self, offset: int) -> tuple[str, int]:
        """What the worker wrote since ``offset`` — its start and end only — and how many bytes that was."""
        size = self._log_offset()
        n = max(size - offset, 0)
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                if n <= LOG_HEAD + LOG_TAIL:
                    text = f.read(n).decode(errors="replace")
                else:
                    head = f.read(LOG_HEAD).decode(errors="replace")
                    f.seek(size - LOG_TAIL)
                    tail = f.read(LOG_TAIL).decode(errors="replace")
                    text = f"{head}\n… [{n - LOG_HEAD - LOG_TAIL} bytes of output left out] …\n{tail}"
        except OSError:
            return "", n
        if size > LOG_TRUNCATE_BYTES:
            try:
                os.truncate(self.log_path, 0)  # the worker appends (O_APPEND): it goes on at the new end
            except OSError:
                pass
        return text, n

    def _reply(self, ok: bool, status: str = "", reason: str = "", offset: int = 0, data: dict | None = None,
               dead: bool = False, prefix: str = "") -> Reply:
        log, n = self._log_since(offset)
        return Reply(ok, status, reason, data=data or {}, log=prefix + log, log_bytes=n, dead=dead)

    # -- requests -------------------------------------------------------------------------------------

    def _wait(self, deadline: float, what: str, offset: int, seq: int | None) -> Reply:
        import select

        from .channel import ChannelError

        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return self._reply(False, TIMEOUT, f"{what} did not finish within "
                                   f"{deadline - self._sent_at:.3g} s; worker killed", offset, dead=True)
            try:
                ready, _, _ = select.select([self._chan.sock, self._ctl], [], [], min(left, 0.5))
            except (OSError, ValueError):
                ready = []
            if self._ctl in ready:
                self._read_ctl(0.0)
            if self._chan.sock in ready:
                try:
                    data = self._chan.recv_json(deadline)
                except ChannelError as e:
                    if e.kind == "timeout":
                        continue
                    if e.kind == "eof":
                        reason = self._death()
                        self.kill()
                        return self._reply(False, CRASHED, reason, offset, dead=True)
                    self.kill()
                    return self._reply(False, TAMPERED, f"the worker's channel carried a malformed frame ({e}): "
                                       "a forged write on the grader's descriptor", offset, dead=True)
                if not isinstance(data, dict):
                    self.kill()
                    return self._reply(False, TAMPERED, "the worker sent a reply that is not a JSON object: "
                                       "a forged write on the grader's descriptor", offset, dead=True)
                if seq is not None and data.get("id") != seq:  # the worker's own loop answers once, in order
                    stray = self.stray_processes() if self.ready else []
                    if stray:  # a fork of the worker (its copy of the loop) answered on the shared channel
                        self.kill()
                        return self._reply(False, PROCESS_SPAWNED, (
                            f"the candidate left {len(stray)} process(es) running: {', '.join(stray[:6])}, and one "
                            "wrote on the worker's channel (a forked copy of the worker); all were killed"),
                            offset, dead=True)
                    self.kill()
                    return self._reply(False, TAMPERED, f"a reply out of step with the requests (id "
                                       f"{str(data.get('id'))[:40]!r}, expected {seq}): a forged or duplicated "
                                       "reply on the worker's channel", offset, dead=True)
                if data.get("ok") is True:
                    stray = self.stray_processes() if self.ready else []
                    if stray:
                        self.kill()
                        return self._reply(False, PROCESS_SPAWNED, (
                            f"the candidate left {len(stray)} process(es) running: {', '.join(stray[:6])} "
                            "(work done by another process escapes timing and the checks; all were killed)"),
                            offset, data=data, dead=True)
                    return self._reply(True, data=data, offset=offset)
                dead = bool(data.get("fatal"))
                if dead:
                    self.kill()
                tb = data.get("traceback")
                return self._reply(False, str(data.get("status", RUNTIME_ERROR)), str(data.get("reason", "failed")),
                                   offset, data=data, dead=dead, prefix=(str(tb) + "\n") if tb else "")
            if self.exit_code is not None or self._sup.poll() is not None:
                reason = self._death()
                self.kill()
                return self._reply(False, CRASHED, reason, offset, dead=True)

    def wait_ready(self, timeout: float) -> Reply:
        """Send the set-up and wait for the worker's ``ready`` (torch imported, device set up, confined)."""
        from .channel import ChannelError, dumps_request

        if self.ready:
            return Reply(True, data=self.info)
        deadline = time.monotonic() + timeout
        self._sent_at = time.monotonic()
        while self.worker_pid is None and time.monotonic() < deadline:
            msgs = self._read_ctl(min(0.5, max(deadline - time.monotonic(), 0.0)))
            errors = [m["error"] for m in msgs if "error" in m]
            if errors or self._sup.poll() is not None:
                self.kill()
                return self._reply(False, CRASHED, errors[0] if errors else self._death(), 0, dead=True)
        if self.worker_pid is None:
            self.kill()
            return self._reply(False, TIMEOUT, f"worker start did not finish within {timeout:g} s", 0, dead=True)
        data, fds = dumps_request(self._init)
        try:
            self._chan.send(data, fds, deadline)
        except (ChannelError, OSError):
            reason = self._death()
            self.kill()
            return self._reply(False, CRASHED, reason, 0, dead=True)
        r = self._wait(deadline, "worker start", 0, None)
        if r.ok:
            from .sandbox import descendants

            self.ready = True
            self.info = dict(r.data, userns=self.userns)
            self._baseline = {p for p in descendants(self._sup.pid) if p != self.worker_pid}
        return r

    def request(self, msg: dict, timeout: float) -> Reply:
        """Send one request and wait for its reply, the worker's death, or ``timeout`` seconds.

        On death, timeout, a guard's verdict or a forged reply the worker (with everything below its
        supervisor) is killed and the reply has ``dead`` set; a worker is never reused after that.
        """
        from .channel import ChannelError, dumps_request

        offset = self._log_offset()
        self._seq += 1
        msg = {**msg, "id": self._seq}
        self._sent_at = time.monotonic()
        deadline = self._sent_at + timeout
        try:
            data, fds = dumps_request(msg)
            self._chan.send(data, fds, deadline)
        except ChannelError:
            self.kill()
            return self._reply(False, TIMEOUT, f"the worker did not read its {msg.get('op')} request within "
                               f"{timeout:g} s; worker killed", offset, dead=True)
        except OSError:
            reason = self._death()
            self.kill()
            return self._reply(False, CRASHED, reason, offset, dead=True)
        try:
            return self._wait(deadline, f"{msg.get('op', 'request')} request", offset, self._seq)
        except BaseException:  # e.g. KeyboardInterrupt: the reply would arrive out of step; start over
            self.kill()
            raise

    # -- the end --------------------------------------------------------------------------------------

    def kill(self) -> None:
        """Stop the worker and every process below the supervisor now (SIGSTOP, then SIGKILL), and reap
        the supervisor. Returns once none of them runs."""
        from .sandbox import kill_tree

        if self._sup.poll() is None:
            try:
                self._ctl.sendall(b"kill\n")
            except OSError:
                pass
            try:
                self._sup.wait(timeout=10.0)
            except Exception:  # the supervisor does not answer (stopped, killed by a candidate…): do it here
                kill_tree(self._sup.pid, include_root=True)
                try:
                    self._sup.wait(timeout=5.0)
                except Exception:
                    pass
        kill_tree(self._sup.pid)  # anything left (only when the supervisor died before the worker)
        if self.exit_code is None:
            self.exit_code = -signal.SIGKILL

    def close(self, timeout: float = 5.0) -> None:
        """Ask the worker to exit, then stop everything below the supervisor, and release the sockets."""
        if self._closed:
            return
        self._closed = True
        if self.alive() and self.ready:
            from .channel import ChannelError, dumps_request

            try:
                data, fds = dumps_request({"op": "exit"})
                self._chan.send(data, fds, time.monotonic() + 1.0)
                deadline = time.monotonic() + timeout
                while self.exit_code is None and time.monotonic() < deadline and self._sup.poll() is None:
                    self._read_ctl(0.05)
            except (ChannelError, OSError):
                pass
        self.kill()
        self._chan.close()
        try:
            self._ctl.close()
        except OSError:
            pass


__all__ = ["Worker", "Reply", "LOG_HEAD", "LOG_TAIL", "WORKER_FILE_BYTES"]
