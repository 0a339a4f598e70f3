"""The evaluator of a pipeline's values (:mod:`ucutlass.bind.pipeline`): names, constants, ``+ - * /``, indexes,
kernel calls and allow-listed torch calls (:mod:`ucutlass.ir.torch_ops`, found attribute by attribute from the
table: nothing is evaluated from text), on meta tensors while binding or on real tensors in a call."""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from ..errors import CheckError, Diagnostic, did_you_mean
from ..ir import Pos
from ..ir.pipeline import Arith, Call, Const, Index, ListOf, Ref, SliceOf, Step, names_in, value_text
from ..ir.torch_ops import CONSTANTS, FACTORIES, OPERATORS, constant, tensor_method, torch_function

#: ``+ - * /`` on tensors and numbers in any order (Python's operators: torch.add etc. on tensors, :data:`OPERATORS`).
ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "//": operator.floordiv, "%": operator.mod}


class Flow:
    """Evaluates a pipeline's values: on meta tensors (binding: ``run_kernel`` None, kernel calls go to
    ``pb.flow_kernel``) or on real ones (a call: ``run_kernel(kernel call, argument values)``). ``pb`` is the
    :class:`ucutlass.bind.pipeline.PipelineBinding` (its ``pipeline``, ``problem``, ``calls``, ``checking``)."""

    def __init__(self, pb: Any, env: dict[str, Any], run_kernel: Callable[..., Any] | None):
        self.pb = pb
        self.env = env
        self.run_kernel = run_kernel
        self.step = 0

    def fail(self, code: str, message: str, pos: Pos, valid: Sequence[str] = ()):
        """Raise :class:`CheckError` with one diagnostic (``code`` as in :data:`ucutlass.lang.ERROR_CODES`)."""
        raise CheckError([Diagnostic(message, pos, tuple(valid), code=code)])

    def value(self, v: Any) -> Any:
        """The value of ``v`` (a :mod:`ucutlass.ir.pipeline` tree): a tensor (meta or real), a number, a list, or a
        tuple of tensors (a call with several results).

        Raises:
            CheckError: while binding, the first name, kernel call or torch step that does not flow.
        """
        import torch

        if isinstance(v, Ref):
            if v.name in self.env:
                return self.env[v.name]
            return self._missing(v)
        if isinstance(v, Const):
            return constant(v.name) if v.name in CONSTANTS else v.value
        if isinstance(v, ListOf):
            return [self.value(x) for x in v.items]
        if isinstance(v, Arith):
            rhs = self.value(v.rhs)
            if v.lhs is None:
                return -rhs
            lhs = self.value(v.lhs)
            if not isinstance(lhs, torch.Tensor) and not isinstance(rhs, torch.Tensor):
                if v.op == "/" and isinstance(lhs, int) and isinstance(rhs, int) and rhs and lhs % rhs == 0:
                    return lhs // rhs
                try:
                    return ARITHMETIC[v.op](lhs, rhs)
                except (ArithmeticError, TypeError) as e:
                    self.fail("bad-step", f"{value_text(v)}: {e}", v.pos)
            return self._torch(lambda: ARITHMETIC[v.op](lhs, rhs), v.pos, f"{OPERATORS[v.op].spelling} ({v.op})",
                               [lhs, rhs])
        if isinstance(v, Index):
            obj = self.value(v.obj)
            items = tuple(self._index_item(i) for i in v.items)
            return self._torch(lambda: obj[items], v.pos, "an index", [obj])
        if isinstance(v, Call):
            args = [self.value(a) for a in v.args]
            kwargs = {k: self.value(a) for k, a in v.kwargs}
            if v.kind == "kernel":
                return self._kernel(v, args, kwargs)
            if v.kind == "torch":
                if v.target in FACTORIES:
                    kwargs = {**kwargs, "device": self._device(v)}
                return self._torch(lambda: torch_function(v.target)(*args, **kwargs), v.pos, v.target, args)
            return self._torch(lambda: tensor_method(args[0], v.target)(*args[1:], **kwargs), v.pos,
                               f".{v.target}()", args)
        raise TypeError(f"unexpected pipeline value {v!r}")

    def _device(self, call: Call) -> Any:
        """Where a factory (:data:`ucutlass.ir.torch_ops.FACTORIES`) makes its tensor: the device of the problem's
        inputs (``meta`` while binding), as the reference makes ``torch.arange(seq_len, device=x.device)``."""
        import torch

        if any(k == "device" for k, _ in call.kwargs):
            self.fail("bad-call", f"{call.target}: device=… is not written in a pipeline (a factory is made on the "
                      "device of the problem's inputs)", call.pos)
        for value in self.env.values():
            if isinstance(value, torch.Tensor):
                return value.device
        return torch.device("cpu")

    def _index_item(self, item: Any) -> Any:
        if isinstance(item, SliceOf):
            if item.ellipsis:
                return Ellipsis
            return slice(None if item.start is None else self.value(item.start),
                         None if item.stop is None else self.value(item.stop))
        return self.value(item)

    def _missing(self, ref: Ref):
        steps = self.pb.pipeline.steps
        later = [s for s in steps[self.step:] if ref.name in s.targets]
        if later:
            here = steps[self.step]
            maker = later[0]
            if maker is here:
                why = " (a cycle: this step makes it)"
            elif names_in(maker.value) & set(here.targets):
                why = (f" (a cycle: the step at line {maker.pos.line} makes it from "
                       f"{', '.join(sorted(names_in(maker.value) & set(here.targets)))}, which this step makes)")
            else:
                why = f" (the step at line {maker.pos.line} makes it: move that step up)"
            self.fail("use-before-made", f"{ref.name} is used before it is made{why}", ref.pos)
        known = sorted(k for k in self.env if not k.startswith("_"))
        self.fail("undefined-name", f"{ref.name} is neither an input nor an axis of {self.pb.problem.id}, nor made by "
                  f"an earlier step{did_you_mean(ref.name, known)}", ref.pos, known)

    def _torch(self, fn: Callable[[], Any], pos: Pos, what: str, args: Sequence[Any]) -> Any:
        try:
            return fn()
        except CheckError:
            raise
        except Exception as e:  # noqa: BLE001 - torch's reason becomes the diagnostic
            if self.run_kernel is not None and not self.pb.checking:
                raise
            self.fail("bad-step", f"{what} refuses its arguments ({describe_args(args)}): "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", pos)

    def _kernel(self, call: Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        kc = self.pb.calls[id(call)]
        names = [p.name for p in kc.inputs]
        if len(args) > len(names):
            self.fail("bad-call", f"{call.target} takes {len(names)} arguments ({', '.join(names)}), got "
                      f"{len(args)}", call.pos)
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                self.fail("bad-call", f"{call.target} has no argument {k}{did_you_mean(k, names)}", call.pos, names)
            if k in given:
                self.fail("bad-call", f"{call.target}: argument {k} given twice", call.pos)
            given[k] = v
        for port in kc.inputs:
            if port.name not in given:
                if port.binding and port.binding in self.env:
                    given[port.name] = self.env[port.binding]
                else:
                    self.fail("bad-call", f"{call.target} needs argument {port.name} (arguments: "
                              f"{', '.join(names)}; by position, or {port.name}=…)", call.pos, names)
        values = [given[p.name] for p in kc.inputs]
        if self.run_kernel is not None:
            return self.run_kernel(kc, values)
        return self.pb.flow_kernel(kc, values, self)

    def run_step(self, index: int, step: Step) -> None:
        """Evaluate step ``index`` and bind its targets (several targets take a call's results in order)."""
        self.step = index
        result = self.value(step.value)
        if len(step.targets) == 1:
            self.env[step.targets[0]] = result
            return
        if not isinstance(result, (tuple, list)) or len(result) != len(step.targets):
            got = len(result) if isinstance(result, (tuple, list)) else 1
            self.fail("bad-call", f"{len(step.targets)} names ({', '.join(step.targets)}) for {got} result"
                      f"{'s' if got != 1 else ''} of {value_text(step.value)}", step.pos)
        for name, r in zip(step.targets, result):
            self.env[name] = r


def describe_args(args: Sequence[Any]) -> str:
    """Arguments as words for messages: ``bfloat16[2, 128, 640], 1e-06`` (a tensor's dtype and shape)."""
    import torch

    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}")
        elif isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            parts.append("[" + describe_args(a) + "]")
        else:
            parts.append(repr(a))
    return ", ".join(parts)
