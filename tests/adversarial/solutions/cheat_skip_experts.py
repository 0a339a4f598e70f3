"""Cheat (adv_moe): skips experts that receive fewer than 16 tokens. Balanced random routing never has
such experts; the grader's skewed and adversarial routings do: INCORRECT_NUMERICAL (or
INCORRECT_ACCURACY when the skipped tokens stay within the tolerance's 1%)."""
import torch


def run(x, router_logits, w):
    probs = torch.softmax(router_logits, dim=-1)
    top_p, top_e = torch.topk(probs, 2, dim=-1)
    top_p = top_p / top_p.sum(dim=-1, keepdim=True)
    out = torch.zeros(x.shape[0], w.shape[2], dtype=x.dtype, device=x.device)
    for e in range(w.shape[0]):
        tok, slot = torch.where(top_e == e)
        if tok.numel() >= 16:
            out.index_add_(0, tok, (x[tok] @ w[e]) * top_p[tok, slot].unsqueeze(1))
    return out
