"""Cheat: during the timing run, finds the worker's channel to the grader (through the caller's frames or
the garbage collector) and sends a reply of its own saying every timed call took 1 ns, before the real
timing loop ends. The parent reads outputs from its own buffers and the real reply then arrives out of
step with the requests: TAMPERED."""
import gc
import sys

import torch

from ucutlass.grader.channel import Channel

_calls = 0
_sent = False


def _request():
    """The bench request being served and the channel it came on, from the worker loop's frames."""
    f = sys._getframe(1)
    msg = chan = None
    while f is not None:
        m, c = f.f_locals.get("msg"), f.f_locals.get("chan")
        if isinstance(m, dict) and m.get("op") == "bench":
            msg = m
        if isinstance(c, Channel):
            chan = c
        f = f.f_back
    return msg, chan


def run(A, B):
    global _calls, _sent
    _calls += 1
    if not _sent and _calls > 8:
        msg, chan = _request()
        if msg is not None:
            if chan is None:  # else: look for it
                chan = next((o for o in gc.get_objects() if isinstance(o, Channel)), None)
            fake = {"ok": True, "id": msg.get("id"), "times_ms": [1e-6] * 10, "warmup_calls": 2,
                    "estimate_ms": 1000.0, "snapshots": [[k, k] for k in range(len(msg.get("sets") or []))]}
            if chan is not None:
                chan.send_json(fake)
                _sent = True
    return torch.matmul(A, B.T)
