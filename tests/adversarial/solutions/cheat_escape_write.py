"""Cheat: writes outside its scratch folder — next to its own file, and into /tmp — the way a candidate
would plant a file for a later run or overwrite the problem. The worker may write only beneath its scratch
folder, /dev and the C++ build cache (Landlock): the write fails with EACCES and the candidate's exception
is its verdict (RUNTIME_ERROR)."""
import os

import torch

TARGETS = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "escaped.txt"), "/tmp/ucutlass-escaped.txt")


def run(A, B):
    for path in TARGETS:
        with open(path, "w") as f:
            f.write("written by a candidate\n")
    return torch.matmul(A, B.T)
