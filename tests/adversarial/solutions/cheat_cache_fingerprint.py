"""Cheat: caches outputs by a fingerprint of the input contents (robust to address changes). Every timed
call sees contents never seen before, so the cache never hits and the cheat only pays for its
fingerprints: it scores no better than the honest kernel (it prints 'cache hit' if it ever hits)."""
import torch

_cache = {}


def _fingerprint(t):
    flat = t.reshape(-1)
    idx = torch.linspace(0, flat.numel() - 1, 64, device=t.device).long()
    return (tuple(t.shape), tuple(flat[idx].tolist()))


def run(A, B):
    key = (_fingerprint(A), _fingerprint(B))
    hit = _cache.get(key)
    if hit is not None:
        print("cache hit", flush=True)
        return hit.clone()
    out = torch.matmul(A, B.T)
    if len(_cache) < 64:
        _cache[key] = out.clone()
    return out
