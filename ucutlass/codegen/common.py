"""What every render shares: the jinja2 environment of ``templates/`` and the check that a kernel can be
rendered."""

from __future__ import annotations

import functools
from importlib import resources

import jinja2

from .. import arch
from ..errors import CheckError, Diagnostic


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(
        lambda name: (resources.files("ucutlass.templates") / name).read_text(encoding="utf-8"))
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def require_renderable(kernel) -> None:
    """What every render (GEMM, grouped, attention) needs: a concrete kernel that breaks no rule of its target.

    Raises:
        CheckError: open choices remain (``open-choices``), or the arch rules' errors.
    """
    if not kernel.is_concrete():
        open_ = ", ".join(sorted(kernel.choices()))
        raise CheckError([Diagnostic(f"kernel {kernel.name!r} still has open choices ({open_}); pick values "
                                     "(ucutlass tune does, or ucutlass compile --pick KEY=VALUE) before compiling",
                                     kernel.pos, code="open-choices")])
    problems = [d for d in arch.check_kernel(kernel) if d.severity == "error"]
    if problems:
        raise CheckError(problems)
