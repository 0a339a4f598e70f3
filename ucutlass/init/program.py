"""``ucutlass init PROBLEM``: capture, partition, emit, then check (issue 17, items 1-4).

:func:`init_program` writes the text; :func:`check_program` grades it as ``ucutlass grade FILE PROBLEM --emulate``
does (kernels run as torch ops from the IR, no nvcc) on the problem's smallest workload, and says PASSED or
which part failed. No step of it ends in a traceback: every failure is an :class:`InitError` message.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..errors import UcutError
from .capture import InitError, capture, other_workloads, smallest_workload
from .emit import program_text
from .partition import Partition, Translator


@dataclass
class InitResult:
    """What ``init`` made of a problem.

    Attributes:
        text: the `.ucut` program; ``partition``: its steps and kernels (FLOP shares).
    """

    text: str
    partition: Partition

    @property
    def flop_share(self) -> float:
        """Matmul FLOPs inside kernels / all matmul FLOPs of the reference (0 when it has none)."""
        p = self.partition
        return p.kernel_flops / p.total_flops if p.total_flops else 0.0

    def summary(self) -> str:
        """``2 kernels (3 calls), 4 torch steps, 1 view; 100% of matmul FLOPs in kernels``."""
        steps = self.partition.steps
        count = {k: sum(1 for s in steps if s.kind == k) for k in ("kernel", "torch", "view")}
        return (f"{len(self.partition.kernels)} kernel(s) ({count['kernel']} call(s)), {count['torch']} torch "
                f"step(s), {count['view']} view(s); {self.flop_share:.0%} of matmul FLOPs in kernels")


def init_program(problem) -> InitResult:
    """The `.ucut` program ``init`` writes for ``problem``.

    The graph is captured at the smallest workload whose var axes are all ≥ 2 (:func:`_main_workload`) and again
    at the smallest and at those :func:`~ucutlass.init.capture.other_workloads` picks, to tell constants from axes.

    Raises:
        InitError: the reference does not capture, or an op has no kernel and no allowed torch step.
    """
    small = smallest_workload(problem)
    main = _main_workload(problem, small)
    cap = capture(problem, main)
    others = []
    for w in ([small] if main is not small else []) + other_workloads(problem, main):
        try:
            others.append(capture(problem, w))
        except InitError:
            continue
    part = Translator(problem, cap, others).run()
    axes = problem.resolve_axes(main)
    captured = ", ".join(f"{n}={axes[n]}" for n, a in problem.axes.items() if a.kind == "var" and n in axes)
    return InitResult(program_text(part, problem, problem.reference_source.splitlines(), captured, axes), part)


def _main_workload(problem, small):
    """The workload the graph is written at: the smallest whose var axes are all ≥ 2, else ``small`` (an extent
    of 1 lets a reshape stay a view where other workloads copy: the graph would differ)."""
    import math

    var = [n for n, a in problem.axes.items() if a.kind == "var"]
    ok = [w for w in problem.workloads if all(problem.resolve_axes(w).get(n, 2) >= 2 for n in var)]
    if not ok or all(problem.resolve_axes(small).get(n, 2) >= 2 for n in var):
        return small
    return min(ok, key=lambda w: sum(math.prod(x) for x in problem.input_shapes(w).values() if x is not None))


def check_program(text: str, problem, file: str = "init.ucut", timeout_s: float = 120.0) -> tuple[bool, str]:
    """Grade ``text`` emulated (torch ops, no nvcc) on ``problem``'s smallest workload.

    Returns:
        (passed, what happened in words: ``PASSED``, or the part that failed and why).
    """
    from ..bind import bind, bind_pipeline
    from ..emulate.choices import emulation_picks
    from ..grader.supervised import grade_in_child
    from ..lang import parse
    from ..solution import emulated_solution

    try:
        program = parse(text, file)
    except UcutError as e:
        return False, f"the program does not parse: {e}"
    try:  # open choices: the first legal combination that binds (as grade --emulate does)
        pipeline = program.pipelines[0].name if program.pipelines else False
        kernels = None if program.pipelines else [program.kernels[0].name]
        program = program.resolve(emulation_picks(program, problem, pipeline=pipeline, kernels=kernels))
        if program.pipelines:
            bind_pipeline(program, problem, program.pipelines[0].name)
            solution = emulated_solution(program.source, file, None, f"{file} (emulated)",
                                         pipeline=program.pipelines[0].name)
        else:
            kernel = program.kernels[0]
            bind(kernel, problem)
            solution = emulated_solution(program.source, file, kernel.name, f"{file} (emulated)")
    except UcutError as e:
        return False, f"the program does not bind to {problem.id}: {e}"
    try:
        # Untimed: an emulated time says nothing of a kernel, and the timing's input copies would triple the
        # memory a large workload needs (L2_012's 14 GB of inputs ran an 80 GB GPU out of memory timed).
        results = grade_in_child(problem, solution, [smallest_workload(problem)], timeout_s=timeout_s, timed=False)
    except UcutError as e:  # the grader itself failed (out of GPU memory making 14 GB of inputs' ground truth)
        return False, str(e).splitlines()[0][:400]
    bad = [r for r in results if not r.passed]
    if not bad:
        return True, "PASSED"
    r = bad[0]
    return False, f"{getattr(r.status, 'value', r.status)}: {(r.reason or '')[:300]}"


def input_mib(problem) -> float:
    """MiB of the smallest workload's tensor inputs (what :func:`check_program` makes before it grades)."""
    import math

    import torch

    from ..problem import torch_dtype

    w = smallest_workload(problem)
    return sum(math.prod(s) * torch.empty((), dtype=torch_dtype(problem.inputs[n].dtype)).element_size()
               for n, s in problem.input_shapes(w).items() if s is not None) / 2**20


def check_too_large(problem, file: str = "FILE") -> str | None:
    """Why the emulated check cannot run on this machine (no GPU, and the smallest workload's inputs, the
    reference's float64 ground truth beside them, would take more than a quarter of its memory), or None."""
    import os

    import torch

    if torch.cuda.is_available():
        return None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return None
    mib = input_mib(problem)
    if mib <= memory / 4:
        return None
    return (f"its inputs are {mib:.0f} MiB, more than a quarter of this machine's {memory / 1024:.0f} GiB; grade "
            f"it on a GPU: ucutlass grade {file} {problem.id} --emulate --no-timing --workload smallest")


def run_init(problem, output: str | None = None, check: bool = True, out=None) -> int:
    """The ``init`` command: write the program (to ``output`` or stdout), then check it. Returns the exit code
    (0 passed, 1 not written or the check failed)."""
    out = out if out is not None else sys.stderr
    try:
        result = init_program(problem)
    except InitError as e:
        print(f"init: {e}", file=out)
        return 1
    if output:
        from pathlib import Path

        Path(output).write_text(result.text)
        print(f"wrote {output}: {result.summary()}", file=out)
    else:
        print(result.text, end="")
        print(result.summary(), file=out)
    if not check:
        return 0
    too_large = check_too_large(problem, output or "FILE")
    if too_large:
        print(f"emulated grade on the smallest workload: not run here: {too_large}", file=out)
        return 0
    passed, why = check_program(result.text, problem, output or "init.ucut")
    print(f"emulated grade on the smallest workload ({smallest_workload(problem).label()}): {why}", file=out)
    return 0 if passed else 1
