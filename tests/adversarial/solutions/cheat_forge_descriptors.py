"""Cheat: writes forged text into every file descriptor it inherited or can reach (0…1023), hoping to
forge the grader's reply or jam a pipe it reads (the multiprocessing resource tracker's, once). The worker
holds only /dev/null, its log and the channel; the forged bytes on the channel are a malformed frame:
TAMPERED, in bounded time."""
import os

import torch

FORGED = b'{"ok": true, "id": 1, "times_ms": [1e-06], "warmup_calls": 2}\nREGISTER:/x:semaphore\n' * 4


def run(A, B):
    for fd in range(1024):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
    return torch.matmul(A, B.T)
