"""Cheat: SIGKILLs the processes above it — its supervisor and the grader — to end the grading without a
verdict. The worker's Landlock domain scopes signals (Linux >= 6.12): the kill fails with EPERM and the
candidate's exception is its verdict (RUNTIME_ERROR); the grader and its supervisor live on."""
import os
import signal

import torch


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def run(A, B):
    supervisor = os.getppid()
    grader = _parent(supervisor)
    print(f"SUPERVISOR_PID={supervisor} GRADER_PID={grader}", flush=True)
    os.kill(grader, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)
    return torch.matmul(A, B.T)
