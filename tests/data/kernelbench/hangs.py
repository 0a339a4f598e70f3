# A file whose top level never ends: the probe's timeout must stop it.
import torch  # noqa: F401

while True:
    pass
