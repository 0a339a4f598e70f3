"""Grading in a child process, so that a verdict is written even when the grading process is killed.

The candidate's worker cannot signal the grader where Landlock scopes signals (Linux ≥ 6.12,
:mod:`.sandbox`); elsewhere, or with the confinement off, a candidate can SIGKILL the process that grades
it. :func:`grade_in_child` runs the :class:`~ucutlass.grader.Grader` in a spawned child, receives each
workload's result as it is written, and when the child dies before it finished writes a CRASHED result
for every workload it did not finish, saying how the child ended. ``ucutlass grade`` uses it.
"""

from __future__ import annotations

import signal
from typing import Any, Callable, Mapping, Sequence

from ucutlass.problem import Problem, Workload

from .errors import GraderError
from .results import Status, WorkloadResult
from .solutions import SolutionRef


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _child(conn, problem: Problem, solution: SolutionRef, uuids: list[str], t_sol_ms, timed: bool,
           kwargs: dict) -> None:
    from .grader import Grader

    signal.signal(signal.SIGTERM, _interrupt)  # terminate(): close the grader (workers, scratch) on the way out
    try:
        with Grader(problem, t_sol_ms=t_sol_ms, **kwargs) as g:
            g.progress = lambda ev: conn.send(("result", ev["result"]))
            g.grade(solution, uuids, timed=timed)
            conn.send(("environment", g.environment()))
        conn.send(("done", None))
    except GraderError as e:
        conn.send(("error", str(e)))
    except KeyboardInterrupt:
        pass
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it as a GraderError
        conn.send(("error", f"the grader failed: {type(e).__name__}: {e}"))
    finally:
        conn.close()


def _ended(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def grade_in_child(problem: Problem, solution: SolutionRef, workloads: Sequence[Workload] | None = None, *,
                   t_sol_ms: Callable[[Workload], float | None] | None = None,
                   on_result: Callable[[WorkloadResult], Any] | None = None, timed: bool = True,
                   **grader_kwargs: Any) -> list[WorkloadResult]:
    """Grade ``solution`` on ``workloads`` (default all) in a spawned child process.

    Args:
        t_sol_ms: as :class:`~ucutlass.grader.Grader`'s; it must be picklable (a module-level function or
            an instance of a module-level class), since it is sent to the child.
        on_result: called in this process with each result as the child writes it.
        timed: also time passing workloads (:meth:`~ucutlass.grader.Grader.grade`'s ``timed``). Off, a grade
            checks correctness only and never makes the timing's input copies (up to three per input set: a
            14 GB workload needs them on top of the correctness trial's two).
        grader_kwargs: the :class:`~ucutlass.grader.Grader`'s other keyword arguments.

    Returns:
        One result per workload, in order. Workloads the child did not finish are CRASHED, with how it
        ended (e.g. "killed by SIGKILL") in the reason.

    Raises:
        GraderError: what the grader raised in the child (a broken problem, a worker that cannot start); its
            ``results`` are the workloads graded before it.
    """
    import multiprocessing

    wls = list(workloads) if workloads is not None else list(problem.workloads)
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, name="ucutlass-grade", daemon=False,
                       args=(send, problem, solution, [w.uuid for w in wls], t_sol_ms, timed, dict(grader_kwargs)))
    proc.start()
    send.close()
    got: dict[str, WorkloadResult] = {}
    error: str | None = None
    environment: Mapping[str, Any] = {}
    try:
        while True:
            try:
                kind, value = recv.recv()
            except (EOFError, OSError):
                break
            if kind == "result":
                got[value.workload_uuid] = value
                if on_result is not None:
                    on_result(value)
            elif kind == "environment":
                environment = value
            elif kind == "error":
                error = value
            elif kind == "done":
                break
        proc.join(timeout=30.0)
    except BaseException:  # Ctrl-C (the child has it too) or SIGTERM: let it close its grader, then go
        if proc.is_alive():
            proc.terminate()
        proc.join(timeout=20.0)
        if proc.is_alive():
            proc.kill()
        raise
    finally:
        recv.close()
    if proc.is_alive():
        proc.kill()
        proc.join()
    if error is not None:
        err = GraderError(error)
        err.results = [got[w.uuid] for w in wls if w.uuid in got]  # the verdicts reached before it: kept
        raise err
    out = []
    for w in wls:
        r = got.get(w.uuid)
        if r is None:
            # SIGKILL with no candidate to blame is most often the kernel's OOM killer: the workload's tensors,
            # the reference's and the ground truth's did not fit (a new user met it on the CPU with L1_003).
            why = ("the machine ran out of memory (the kernel's OOM killer: see `dmesg`; try fewer or smaller "
                   "workloads, or a GPU), or a candidate signalled the grader where the OS cannot confine it"
                   if proc.exitcode == -signal.SIGKILL else
                   "a candidate that can signal the grader, where the OS cannot confine it, or something else")
            r = WorkloadResult(definition=problem.name, workload_uuid=w.uuid, axes=dict(w.axes), label=w.label(),
                               solution=solution.name, status=Status.CRASHED, environment=dict(environment),
                               reason=f"the grading process {_ended(proc.exitcode)} before this workload's verdict "
                                      f"({why}); nothing of it was measured")
            if on_result is not None:
                on_result(r)
        out.append(r)
    return out


__all__ = ["grade_in_child"]
