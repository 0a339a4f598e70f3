"""The one bridge from a compiled `.ucut` program to a grader solution (:class:`ucutlass.grader.SolutionRef`).

A compiled kernel is graded in the grader's worker process, which never imports candidate code into the grading
process: the recipe names a loader and a JSON-able payload, and the worker calls ``loader(payload, problem)``.
This module writes the two recipes of a compiled program, and the payload they carry is read by
:func:`ucutlass.runtime.load_solution` (re-exported here), the loader every recipe names (:data:`LOADER`)::

    one kernel   {"so_path": …, "source": <concrete .ucut text>, "file": …, "kernel": name or None}
    a dispatch   {"so_paths": {kernel name: path, …}, "source": …, "file": …}
    a pipeline   {"pipeline": name or None, "so_paths": {build digest: path, …}, "source": …, "file": …}

:func:`program_op` loads a program the same way and registers it as a torch custom op (for models under
``torch.compile``). ``ucutlass grade``, the tuner's measurer (``ucutlass.search.measure``) and the scripts build their recipes here.
The loader's name and the payloads are part of :meth:`SolutionRef.key` (the worker's cache key) and of the records:
they stay as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .grader import SolutionRef
from .runtime import load_solution

__all__ = ["LOADER", "EMULATOR_LOADER", "solution_for", "dispatch_solution", "pipeline_solution", "emulated_solution",
           "load_solution", "program_op"]

#: The grader loader of compiled `.ucut` solutions (a single kernel or a dispatch).
LOADER = "ucutlass.runtime:load_solution"
#: The grader loader of emulated `.ucut` solutions (torch ops from the IR: :mod:`ucutlass.emulate`).
EMULATOR_LOADER = "ucutlass.emulate:load_solution"


def solution_for(so_path: Path | str, source: str, file: str, kernel: str | None, name: str) -> SolutionRef:
    """A grader recipe for one compiled `.ucut` kernel (built into a callable in the grader's worker).

    Args:
        so_path: the kernel's shared object, built from the kernel as bound to the problem
            (:attr:`ucutlass.bind.Binding.kernel`).
        source: the concrete `.ucut` text of its program; ``file``: its name in messages.
        kernel: the kernel's name in ``source``, or None when the program has one kernel.
        name: the solution's name in records and tables.

    Returns:
        A destination-passing :class:`SolutionRef` with loader :data:`LOADER`.
    """
    return SolutionRef(name=name, loader=LOADER,
                       payload={"so_path": str(so_path), "source": source, "file": file, "kernel": kernel},
                       destination_passing=True)


def dispatch_solution(so_paths: Mapping[str, str | Path], source: str, file: str, name: str) -> SolutionRef:
    """A grader recipe for a compiled dispatch: every kernel's shared object, graded as one solution.

    Args:
        so_paths: ``{kernel name: path of its .so}`` for every kernel of :meth:`~ucutlass.ir.Program.dispatch`,
            each built from the kernel as bound to the problem (:attr:`ucutlass.bind.Binding.kernel`).
        source: the concrete `.ucut` text of the dispatch program; ``file``: its name in messages.
        name: the solution's name in records and tables.

    Returns:
        A :class:`ucutlass.grader.SolutionRef` with loader ``ucutlass.runtime:load_solution`` and payload
        ``{"so_paths": {name: path, …}, "source": …, "file": …}`` (destination passing).
    """
    return SolutionRef(name=name, loader=LOADER, destination_passing=True,
                       payload={"so_paths": {k: str(p) for k, p in so_paths.items()}, "source": source, "file": file})


def pipeline_solution(so_paths: Mapping[str, str | Path], source: str, file: str, name: str,
                      pipeline: str | None = None) -> SolutionRef:
    """A grader recipe for a compiled pipeline: the .so of every bound kernel its calls use, graded as one solution.

    Args:
        so_paths: ``{build digest: path of its .so}`` for each bound kernel of the pipeline's calls
            (:attr:`ucutlass.bind.KernelCall.bound_kernel`).
        source: the concrete `.ucut` text; ``file``: its name in messages; ``name``: the solution's name.
        pipeline: the pipeline's name (None: the program's only one).

    Returns:
        A destination-passing :class:`SolutionRef` with loader :data:`LOADER` (:func:`ucutlass.runtime.load_pipeline`).
    """
    return SolutionRef(name=name, loader=LOADER, destination_passing=True,
                       payload={"pipeline": pipeline, "so_paths": {k: str(p) for k, p in so_paths.items()},
                                "source": source, "file": file})


def emulated_solution(source: str, file: str, kernel: str | None, name: str, dispatch: bool = False,
                      pipeline: str | None | bool = False) -> SolutionRef:
    """A grader recipe for a `.ucut` program run as torch ops (:mod:`ucutlass.emulate`): nothing is compiled.

    Args:
        source: the concrete `.ucut` text; ``file``: its name in messages.
        kernel: the kernel's name in ``source`` (None when the program has one kernel); ignored with ``dispatch``.
        name: the solution's name in records and tables.
        dispatch: grade the program's dispatch (:meth:`~ucutlass.ir.Program.dispatch`) as one solution.
        pipeline: grade the program's pipeline of this name (None: its only one) as one solution (False: none).

    Returns:
        A destination-passing :class:`SolutionRef` with loader :data:`EMULATOR_LOADER` and payload
        ``{"source": …, "file": …, "kernel": …}`` (``"dispatch": true`` for a dispatch).
    """
    payload = {"source": source, "file": file, "kernel": None if dispatch else kernel}
    if dispatch:
        payload["dispatch"] = True
    if pipeline is not False:
        payload = {"source": source, "file": file, "pipeline": pipeline}
    return SolutionRef(name=name, loader=EMULATOR_LOADER, payload=payload, destination_passing=True)


def program_op(path: str, problem: Any, name: str, *, emulate: bool = False, pipeline: str | None = None,
               namespace: str = "ucutlass", jobs: int | None = None):
    """A `.ucut` program bound to ``problem`` as the custom op ``namespace::name`` (:func:`ucutlass.runtime.register_custom_op`).

    Args:
        path: the `.ucut` file: a concrete program (no open choices), a pipeline or one kernel.
        problem: the :class:`ucutlass.problem.Problem`.
        emulate: run it as torch ops (:mod:`ucutlass.emulate`: any device, no nvcc); else its kernels are built
            (nvcc, the kernel cache) and loaded (a GPU of the kernels' target).
        pipeline: which pipeline (None: the program's only one, if it has pipelines).
        jobs: parallel nvcc processes for the build (default: the machine's cores).

    Raises:
        CheckError: the program does not bind to the problem. CompileError: a kernel does not build.
    """
    from .build import build_kernels
    from .errors import CompileError
    from .lang import parse_file
    from .runtime.custom_op import register_custom_op

    program = parse_file(path)
    source, file = program.source, str(path)
    if emulate:
        from .emulate import load_solution as load_emulated

        payload: dict = {"source": source, "file": file, "kernel": None}
        if program.pipelines:
            payload = {"source": source, "file": file, "pipeline": pipeline}
        return register_custom_op(load_emulated(payload, problem), problem, name, namespace)
    from .bind import bind, bind_pipeline

    if program.pipelines:
        kernels = [kc.bound_kernel for kc in bind_pipeline(program, problem, pipeline).kernel_calls()]
    else:
        kernels = [bind(program.kernel(), problem).kernel]
    built = {}
    for kernel, r in zip(kernels, build_kernels(kernels, jobs=jobs)):
        if not r.ok:
            raise CompileError(f"{r.name}: {r.error}", log=r.log, source_path=str(r.source_path))
        built[kernel.build_digest()] = str(r.so_path)
    if program.pipelines:
        payload = {"pipeline": pipeline, "so_paths": built, "source": source, "file": file}
    else:
        payload = {"so_path": str(Path(next(iter(built.values())))), "source": source, "file": file, "kernel": None}
    return register_custom_op(load_solution(payload, problem), problem, name, namespace)
