"""Honest: adv_moe, a different algorithm from the reference (every expert on every token, then the
routing weights select), return style."""
import torch


def run(x, router_logits, w):
    probs = torch.softmax(router_logits, dim=-1)
    top_p, top_e = torch.topk(probs, 2, dim=-1)
    top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    gate = torch.zeros_like(probs).scatter_(1, top_e, top_p)          # [T, E]
    every = torch.einsum("th,ehd->ted", x, w)                           # [T, E, D]
    return torch.einsum("te,ted->td", gate, every)
