"""Cheat: a classic daemon — fork, setsid, fork again, the middle process exits — so the helper is
re-parented away from the worker (to init, were the supervisor not the subreaper). PROCESS_SPAWNED, and
killed before the verdict."""
import os
import time

import torch

_done = False


def run(A, B):
    global _done
    if not _done:
        _done = True
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            pid = os.fork()
            if pid:
                os.write(w, str(pid).encode())
                os._exit(0)
            time.sleep(600)
            os._exit(0)
        os.close(w)
        grandchild = os.read(r, 32).decode()
        os.close(r)
        print(f"CHILD_PID={grandchild}", flush=True)
    return torch.matmul(A, B.T)
