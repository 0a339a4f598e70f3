"""Kills its own process when called."""
import os


def run(A, B, bias):
    os._exit(3)
