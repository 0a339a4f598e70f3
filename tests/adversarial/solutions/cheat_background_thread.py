"""Cheat: hands the work to a background executor and returns at once; the result lands in the output a
little later, after the timer stopped. Caught by the thread guard: THREAD_SPAWNED."""
import queue
import threading

import torch

DESTINATION_PASSING = True
_jobs: "queue.Queue" = queue.Queue()


def _serve():
    while True:
        A, B, C = _jobs.get()
        torch.matmul(A, B.T, out=C)
        if C.is_cuda:
            torch.cuda.synchronize()
        _jobs.task_done()


threading.Thread(target=_serve, daemon=True).start()


def run(A, B, C):
    _jobs.put((A, B, C))
