"""What the ``ucutlass`` commands share: the ``--timeout`` check, loading a .ucut file, ``--kernel`` and
``--pick``, a pipeline's step count and the ``--json`` error document."""

from __future__ import annotations

import json
from typing import Sequence

from ..errors import UcutError


def sol_timeout(args) -> float:
    """The T_SOL deadline that ``--timeout`` gives (sol, tune, prompt), checked.

    Raises:
        UcutError: it is not a positive number of seconds.
    """
    if not args.timeout > 0:
        raise UcutError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    return args.timeout


def load_program(path: str):
    """Parse the .ucut file at ``path``.

    Raises:
        UcutError: no such file, a folder, or not a text file (a syntax error is a
            :class:`UcutSyntaxError`).
    """
    from ..lang import parse_file

    try:
        return parse_file(path)
    except FileNotFoundError:
        raise UcutError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UcutError(f"{path} is a folder; give a .ucut file") from None
    except UnicodeDecodeError as e:
        raise UcutError(f"{path}: not a text file ({e.reason} at byte {e.start})") from None


def require_kernel(program, name: str | None, command: str) -> None:
    """Refuse ``--kernel NAME`` for a kernel the file lacks, and (for ``tune``) a file of several kernels without
    one: tune searches one kernel's choices.

    Raises:
        UcutError: naming the file's kernels (and, for a dispatch, that tune writes those).
    """
    names = [k.name for k in program.kernels]
    if name is not None and name not in names:
        from ..errors import did_you_mean as _did_you_mean

        raise UcutError(f"--kernel {name}: {program.file} has no such kernel{_did_you_mean(name, names)} "
                        f"(kernels: {', '.join(names)})")
    if command == "tune" and name is None and len(names) > 1:
        what = ("is a dispatch (kernels with when), which tune writes as best.ucut; tune searches the choices of "
                "one kernel" if program.dispatch() else f"has {len(names)} kernels; tune searches one kernel's choices")
        raise UcutError(f"{program.file} {what}: name it with --kernel ({', '.join(names)})")


def apply_picks(program, pick_args: Sequence[str], kernel: str | None = None):
    """Apply ``--pick KEY=VALUE`` (KEY as ``tile`` or ``kernel.tile``; a plain KEY is of ``kernel`` when given)."""
    if not pick_args:
        return program
    picks = {}
    names = [k.name for k in program.kernels]
    for item in pick_args:
        if "=" not in item:
            raise UcutError(f"--pick {item!r}: expected KEY=VALUE, e.g. tile=128x128x64")
        key, value = item.split("=", 1)
        if "." not in key:
            if kernel:
                names = [kernel]
            elif len(names) != 1:
                raise UcutError(f"--pick {key}: name the kernel ({', '.join(names)}), e.g. {names[0]}.{key}")
            key = f"{names[0]}.{key}"
        picks[key] = value
    try:
        return program.resolve(picks)
    except (KeyError, ValueError) as e:
        raise UcutError(f"--pick: {e.args[0]}") from None


def count_steps(pipeline) -> str:
    """``1 step`` / ``N steps``."""
    n = len(pipeline.steps)
    return f"{n} step{'' if n == 1 else 's'}"


def print_json_error(args, e: BaseException) -> None:
    """With ``--json`` (check, compile, grade, tune), a failure is a feedback document on stdout too."""
    if getattr(args, "json", False) and args.command in ("check", "compile", "grade", "tune"):
        from ..agents.feedback import error_document

        fields = {"file": getattr(args, "file", None), "problem": getattr(args, "problem", None)}
        print(json.dumps(error_document(args.command, e, **{k: v for k, v in fields.items() if v is not None}),
                         indent=2))
