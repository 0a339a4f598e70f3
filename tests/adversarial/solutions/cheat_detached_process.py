"""Cheat: starts a helper process in a session of its own (``start_new_session``), detached from the
worker, that would do work behind the timer's back. The supervisor is the subreaper of the worker's
tree, so the helper is found below it however it detaches: PROCESS_SPAWNED, and killed."""
import subprocess
import sys

import torch

_helper = None


def run(A, B):
    global _helper
    if _helper is None:
        _helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"CHILD_PID={_helper.pid}", flush=True)
    return torch.matmul(A, B.T)
