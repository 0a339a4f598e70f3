"""Segfaults when called: writes to a non-canonical address through ctypes."""
import ctypes


def run(A, B, bias):
    ctypes.memset(ctypes.c_void_p(0xDEAD0000DEAD0000), 0, 8)
