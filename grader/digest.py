"""Keyed checksums of input tensors: how the grader sees a candidate change inputs it keeps no copy of.

The grader normally keeps a private copy of every input set and compares the candidate's shared copy with it
bit for bit after the call. Where one more copy does not fit beside the candidate's work (L2_047: 24.6 GB of
fp16 expert weights, and the emulated candidate's 33 GB of work, on an 80 GB H100), it hands the candidate its
own inputs and compares checksums taken before and after instead.

A checksum is ``sum(word_i * w_i) mod 2**64`` over the tensor's bits read as 32-bit (else 8-bit) words, with
odd weights ``w_i`` drawn from a generator seeded by a secret key that lives only in the grader's process. One
changed word always changes the sum (an odd weight times a non-zero difference under 2**33 is never 0 mod
2**64); changes that cancel need the weights, which the candidate's process never sees.
"""

from __future__ import annotations

import secrets
from typing import Any, Mapping

#: Words checksummed per step: bounds the scratch memory (three int64 buffers of this length: 768 MiB).
CHUNK_WORDS = 1 << 25


class InputDigest:
    """Keyed checksums of tensors; one key per instance (a fresh grader, a fresh key). The weights are drawn on
    each tensor's own device."""

    def __init__(self):
        self._key = secrets.randbits(62)

    def of(self, t) -> int:
        """The checksum of one tensor's bits (any dtype and layout; shape and dtype are the caller's to compare)."""
        import torch

        flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
        words = flat.view(torch.int32) if flat.numel() % 4 == 0 else flat
        g = torch.Generator(device=words.device)
        g.manual_seed(self._key)
        total = torch.zeros((), dtype=torch.int64, device=words.device)
        for start in range(0, words.numel(), CHUNK_WORDS):
            part = words[start:start + CHUNK_WORDS].to(torch.int64)
            w = torch.randint(-(1 << 62), 1 << 62, part.shape, generator=g, device=words.device,
                              dtype=torch.int64) | 1
            total += (part * w).sum()  # int64 products and sums wrap: arithmetic mod 2**64
        return int(total)

    def of_all(self, named: Mapping[str, Any]) -> dict[str, int]:
        """Checksums of the tensors of ``named`` (other values are skipped), by name."""
        import torch

        return {n: self.of(v) for n, v in named.items() if isinstance(v, torch.Tensor)}


def changed(before: Mapping[str, int], after: Mapping[str, int]) -> list[str]:
    """Names whose checksum differs (in ``before``'s order)."""
    return [n for n, d in before.items() if after.get(n) != d]


__all__ = ["InputDigest", "changed", "CHUNK_WORDS"]
