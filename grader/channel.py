"""The grader's channel to a worker: one UNIX stream socket the parent owns, framed messages, deadlines.

Why not ``multiprocessing``'s pipe and spawn: a spawned child inherits the resource tracker's pipe and reads
shared CPU tensors through ``resource_sharer`` (a thread and a listening socket in the parent); a candidate
that forks keeps the tracker — and the grader's stdout — alive, and forged text on the tracker's pipe
hangs the grader. Here the worker inherits exactly one descriptor (its end of this socket), and file
descriptors of shared CPU tensors travel with the request itself (``SCM_RIGHTS``).

A frame is a 16-byte header — magic ``UCG1``, payload length (u64), descriptor count (u32) — then the
payload. Descriptors ride on the header's bytes (and on 1-byte chunks when there are more than
:data:`MAX_FDS_PER_MSG`). Requests (parent → worker) are pickled with torch's tensor reductions: CUDA tensors
as IPC handles, shared CPU tensors as passed descriptors. Replies (worker → parent) are JSON; the parent
never unpickles what a candidate's process sends, reads replies with a size cap, and receives no
descriptors (it gives no ancillary buffer, so the kernel closes any that a candidate sends).
"""

from __future__ import annotations

import array
import io
import json
import os
import pickle
import select
import socket
import struct
import time
from typing import Any

MAGIC = b"UCG1"
HEADER = struct.Struct("=4sQI")
#: The kernel's SCM_MAX_FD is 253 descriptors per message.
MAX_FDS_PER_MSG = 250
#: Largest reply the parent reads (timing replies of 10 000 calls are ~300 KB of JSON).
MAX_REPLY_BYTES = 64 << 20
#: Largest request a worker reads.
MAX_REQUEST_BYTES = 1 << 30


class ChannelError(Exception):
    """The other end broke the protocol (a bad header, a frame over the cap) or the deadline passed.

    Attributes:
        kind: ``"eof"`` (the other end closed), ``"timeout"``, ``"protocol"``.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# --- pickling with passed descriptors ------------------------------------------------------------------

#: The descriptors that came with the request being unpickled (changed in place: the worker's integrity
#: guard watches this module's names).
_RECEIVED: list[int] = []


class PassedFd:
    """A descriptor passed with the message, by its index (what :class:`_FdCollector` hands to torch's
    ``rebuild_storage_fd``, which calls :meth:`detach` and closes the descriptor after mapping it)."""

    def __init__(self, index: int):
        self.index = index

    def detach(self) -> int:
        fds = _RECEIVED
        fd, fds[self.index] = fds[self.index], -1
        if fd < 0:
            raise ValueError("a passed descriptor was used twice")
        return fd


class _FdCollector:
    """Stands in for ``multiprocessing``'s spawning Popen while a request is pickled: torch's reduction of
    a shared CPU storage (``multiprocessing.reduction.DupFd``) then asks it to pass the storage's
    descriptor instead of registering it with ``resource_sharer``."""

    def __init__(self):
        self.fds: list[int] = []

    def duplicate_for_child(self, fd: int) -> int:
        self.fds.append(fd)
        return len(self.fds) - 1

    def DupFd(self, index: int) -> PassedFd:  # noqa: N802 - the name multiprocessing calls
        return PassedFd(index)


def dumps_request(obj: Any) -> tuple[bytes, list[int]]:
    """Pickle a request with torch's tensor reductions; returns the bytes and the descriptors to pass."""
    import multiprocessing.context as mpctx
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers the tensor and storage reductions)

    collector = _FdCollector()
    prev = mpctx.get_spawning_popen()
    mpctx.set_spawning_popen(collector)
    try:
        buf = io.BytesIO()
        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
    finally:
        mpctx.set_spawning_popen(prev)
    return buf.getvalue(), collector.fds


def loads_request(data: bytes, fds: list[int]) -> Any:
    """Unpickle a request (worker side); descriptors the request did not use are closed."""
    _RECEIVED[:] = fds
    try:
        return pickle.loads(data)
    finally:
        for fd in _RECEIVED:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        _RECEIVED.clear()


# --- framing -------------------------------------------------------------------------------------------

class Channel:
    """One end of the socket, with framed sends and deadline-bounded receives.

    Args:
        sock: a connected ``AF_UNIX``/``SOCK_STREAM`` socket (made non-blocking here).
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending

    def _wait(self, write: bool, deadline: float | None) -> None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise ChannelError("timeout", "the deadline passed")
        r, w, _ = select.select([] if write else [self.sock], [self.sock] if write else [], [], left)
        if not (r or w):
            raise ChannelError("timeout", "the deadline passed")

    def _sendmsg(self, data: bytes, fds: list[int], deadline: float | None) -> int:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        while True:
            try:
                return self.sock.sendmsg([data], anc)
            except BlockingIOError:
                self._wait(True, deadline)
            except InterruptedError:
                continue

    def _sendall(self, data: memoryview, deadline: float | None) -> None:
        while data:
            try:
                n = self.sock.send(data)
                data = data[n:]
            except BlockingIOError:
                self._wait(True, deadline)
            except InterruptedError:
                continue

    def send(self, payload: bytes, fds: list[int] = (), deadline: float | None = None) -> None:
        """Send one frame; ``fds`` travel with it.

        Raises:
            ChannelError: the deadline passed; OSError (BrokenPipeError…) when the other end is gone.
        """
        fds = list(fds)
        header = HEADER.pack(MAGIC, len(payload), len(fds))
        first, rest = fds[:MAX_FDS_PER_MSG], fds[MAX_FDS_PER_MSG:]
        n = self._sendmsg(header, first, deadline)
        self._sendall(memoryview(header)[n:], deadline)
        while rest:  # more descriptors than one message carries: one byte each chunk
            chunk, rest = rest[:MAX_FDS_PER_MSG], rest[MAX_FDS_PER_MSG:]
            while self._sendmsg(b"\0", chunk, deadline) == 0:
                pass
        self._sendall(memoryview(payload), deadline)

    def send_json(self, obj: Any, deadline: float | None = None) -> None:
        self.send(json.dumps(obj, default=str).encode(), deadline=deadline)

    # -- receiving

    def _recv_into(self, want: int, fds: list[int] | None, deadline: float | None) -> bytes:
        """Exactly ``want`` bytes; with ``fds`` (a list) also collect passed descriptors into it."""
        chunks, got = [], 0
        anc_size = socket.CMSG_SPACE(MAX_FDS_PER_MSG * 4)
        while got < want:
            try:
                if fds is None:
                    data = self.sock.recv(min(want - got, 1 << 20))
                else:
                    data, anc, _flags, _ = self.sock.recvmsg(min(want - got, 1 << 20), anc_size)
                    for level, kind, blob in anc:
                        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                            a = array.array("i")
                            a.frombytes(blob[:len(blob) - len(blob) % a.itemsize])
                            fds.extend(a)
            except BlockingIOError:
                self._wait(False, deadline)
                continue
            except InterruptedError:
                continue
            if not data:
                raise ChannelError("eof", "the other end closed the channel")
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def recv(self, deadline: float | None = None, max_bytes: int = MAX_REPLY_BYTES,
             accept_fds: bool = False) -> tuple[bytes, list[int]]:
        """Receive one frame: ``(payload, descriptors)``.

        Raises:
            ChannelError: ``eof``, ``timeout``, or ``protocol`` (bad magic, a frame over ``max_bytes``,
                descriptors where none are accepted).
        """
        fds: list[int] | None = [] if accept_fds else None
        header = self._recv_into(HEADER.size, fds, deadline)
        magic, length, nfds = HEADER.unpack(header)
        if magic != MAGIC:
            raise ChannelError("protocol", f"a frame that does not start with {MAGIC!r} ({header[:8]!r}…)")
        if length > max_bytes:
            raise ChannelError("protocol", f"a frame of {length} bytes (at most {max_bytes})")
        if nfds and not accept_fds:
            raise ChannelError("protocol", f"a frame that claims {nfds} passed descriptors")
        if accept_fds:
            while len(fds) < nfds:  # type: ignore[arg-type]
                self._recv_into(1, fds, deadline)
        payload = self._recv_into(length, fds, deadline) if length else b""
        return payload, fds or []

    def recv_json(self, deadline: float | None = None, max_bytes: int = MAX_REPLY_BYTES) -> Any:
        """Receive one JSON frame (no descriptors accepted).

        Raises:
            ChannelError: as :meth:`recv`, and ``protocol`` when the payload is not JSON.
        """
        payload, _ = self.recv(deadline, max_bytes)
        try:
            return json.loads(payload)
        except ValueError:
            raise ChannelError("protocol", f"a reply that is not JSON ({payload[:40]!r}…)") from None


__all__ = ["Channel", "ChannelError", "PassedFd", "dumps_request", "loads_request", "MAX_REPLY_BYTES"]
