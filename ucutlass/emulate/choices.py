"""Open choices under emulation: one combination stands for all of them.

How a kernel computes (tile, schedule, cluster, split-K, swap AB…) does not change what it computes, so a program
with open choices (``tile = {128x128x64, 128x256x64}``) is emulated at the first combination that the rules accept
and that binds to the problem (a dtype or layout choice must still match its tensor). ``grade --emulate``, ``init``'s
check and the emulated loader (a library caller's :func:`ucutlass.solution.emulated_solution`) all resolve them here,
so what ``check`` accepts, emulation runs.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import CheckError, UcutError


def emulation_picks(program: Any, problem: Any, *, pipeline: str | None | bool = False,
                    kernels: Sequence[str] | None = None) -> dict[str, Any]:
    """``{"kernel.setting": option}`` for every open choice of the kernels the solution runs.

    Args:
        program: a parsed :class:`ucutlass.ir.Program` (open choices allowed).
        problem: the :class:`ucutlass.problem.Problem` it binds to.
        pipeline: a pipeline's name (None: the program's only one); ``False``: no pipeline: the kernels named in
            ``kernels`` are the solution (one, or a dispatch's; None: the program's only kernel).

    Raises:
        CheckError: every combination fails to bind with the same diagnostics (a misspelt input name): those.
        UcutError: no combination of some kernel's choices passes the rules and binds, for different reasons (the
            message gives the first's and says to run ``check`` for all).
    """
    from ..arch.legality import legal_combinations
    from ..bind import bind, bind_pipeline

    if pipeline is not False:
        name = pipeline if pipeline is not None else program.pipeline().name
        called = program.pipeline(name).kernel_names()
        runs = [k for k in program.kernels if k.name in called]
    else:
        runs = [program.kernel(n) for n in kernels] if kernels else [program.kernel()]
    picks: dict[str, Any] = {}
    for k in runs:
        if not k.choices():
            continue
        legal, _ = legal_combinations(k)
        failures: list[CheckError] = []
        for combo in legal:
            trial = {**picks, **{f"{k.name}.{key}": value for key, value in combo.items()}}
            try:
                if pipeline is not False:  # the other kernels as picked so far (or still open)
                    bind_pipeline(program.resolve(trial), problem, name)
                else:
                    bind(k.resolve(combo), problem)
            except CheckError as e:
                failures.append(e)
                continue
            picks = trial
            break
        else:
            if failures and len({str(e) for e in failures}) == 1:
                raise failures[0]  # every combination fails alike (a misspelt input): that error, positioned
            where = f"in pipeline {name}" if pipeline is not False else f"to {problem.id}"
            first = f"; the first legal one: {str(failures[0]).splitlines()[0]}" if failures else ""
            raise UcutError(f"{program.file}: no combination of kernel {k.name}'s choices passes the rules and binds "
                            f"{where}{first} (`ucutlass check {program.file} --problem {problem.id}` says why)")
    return picks


def describe_picks(program: Any, picks: Mapping[str, Any]) -> str:
    """``o_proj.tile = 128x128x64, o_proj.schedule = cooperative``: the picks as the program spells them."""
    choices = program.choices()
    return ", ".join(f"{key} = {choices[key].spellings[choices[key].options.index(v)]}" for key, v in picks.items())
