"""Cheat: returns a lazily evaluated tensor subclass whose values are computed only when someone reads
them (after the timer stopped). Caught by the exact type check: INCORRECT_DTYPE."""
import torch


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, A, B):
        t = torch.Tensor._make_subclass(cls, torch.empty(A.shape[0], B.shape[0], dtype=A.dtype, device=A.device))
        t._args = (A, B)
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in args:
            if isinstance(a, Lazy) and getattr(a, "_args", None) is not None:
                A, B = a._args
                a._args = None
                torch.Tensor.copy_(a, torch.matmul(A, B.T))
        return super().__torch_function__(func, types, args, kwargs or {})


def run(A, B):
    return Lazy(A, B)
