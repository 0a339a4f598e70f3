"""Cheat: during the timing run, finds the worker's pipe to the grader (through the garbage collector and
the caller's frames) and sends a reply of its own saying every timed call took 1 ns, before the real
timing loop ends. The parent reads outputs from its own buffers and the real reply then arrives out of
step with the requests: TAMPERED."""
import gc
import json
import multiprocessing.connection
import sys

import torch

_calls = 0
_sent = False


def _request():
    """The bench request being served and the pipe it came on, from the worker loop's frame."""
    f = sys._getframe(1)
    while f is not None:
        msg, conn = f.f_locals.get("msg"), f.f_locals.get("conn")
        if isinstance(msg, dict) and msg.get("op") == "bench":
            return msg, conn
        f = f.f_back
    return None, None


def run(A, B):
    global _calls, _sent
    _calls += 1
    if not _sent and _calls > 8:
        msg, conn = _request()
        if msg is not None:
            if not isinstance(conn, multiprocessing.connection.Connection):  # else: look for it
                conn = next((o for o in gc.get_objects()
                             if isinstance(o, multiprocessing.connection.Connection) and not o.closed), None)
            fake = {"ok": True, "id": msg.get("id"), "times_ms": [1e-6] * 10, "warmup_calls": 2,
                    "estimate_ms": 1000.0, "snapshots": [[k, k] for k in range(len(msg.get("sets") or []))]}
            if conn is not None:
                conn.send_bytes(json.dumps(fake).encode())
                _sent = True
    return torch.matmul(A, B.T)
