"""Cheat: forks the worker; the child would finish work after the timer stopped (here it just lives on).
A process the candidate left running outlives its call: PROCESS_SPAWNED, and the grader kills it (and
every other process below the worker's supervisor) before it writes the verdict."""
import os
import time

import torch

_child = None


def run(A, B):
    global _child
    if _child is None:
        _child = os.fork()
        if _child == 0:  # the child: outlive the call
            time.sleep(600)
            os._exit(0)
        print(f"CHILD_PID={_child}", flush=True)
    return torch.matmul(A, B.T)
