"""The ``ucutlass`` command line: check, compile, sol, grade, tune, problems, calibrate.

Each subcommand is a thin shell over a library function; errors of ucutlass (:class:`UcutError`) are
printed without a traceback and give exit status 1 (2 for a missing GPU or toolchain).

The package: ``parser.py`` holds the argparse tree, one module per group of commands holds their functions
(``check.py``: check and compile; ``grade.py``; ``tune.py``: tune and init; ``sol.py``: sol and calibrate;
``problems.py``: problems and import; ``agents.py``: prompt, mcp and campaign), ``common.py`` what they share;
here, :func:`main` runs a command and turns its errors into exit statuses.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from ..errors import ToolchainError, UcutError, UcutSyntaxError
from .common import print_json_error
from .parser import build_parser

__all__ = ["main", "build_parser"]


def _terminate(signum, frame) -> None:
    """SIGTERM (``timeout``, a job scheduler) as an interrupt: graders close their workers and remove their
    scratch folders on the way out."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ucutlass`` command line on ``argv`` (default: ``sys.argv``); the exit status."""
    args = build_parser().parse_args(argv)
    import signal

    previous = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        try:
            previous = signal.signal(signal.SIGTERM, _terminate)
        except ValueError:  # not the main thread (main() called from a thread): leave it
            pass
    try:
        return _run(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    try:
        return args.func(args)
    except UcutSyntaxError as e:
        print_json_error(args, e)
        print(e.format(), file=sys.stderr)
        return 1
    except ToolchainError as e:
        print_json_error(args, e)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except UcutError as e:
        print_json_error(args, e)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ucutlass check --json | head`
        sys.stderr.close()
        return 0
    except FileNotFoundError as e:  # a path given on the command line (a solution, a spec, a workload file)
        missing = _missing(e)
        print_json_error(args, UcutError(missing))
        print(f"error: {missing}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.command == "tune":
            print("interrupted; finished trials are saved in the study storage, run the same command to resume",
                  file=sys.stderr)
        else:
            print("interrupted", file=sys.stderr)
        return 130


def _missing(e: FileNotFoundError) -> str:
    """``PATH: no such file``, or, where the file's folder is what is missing (``-o /no/dir/x.ucut``), which
    folder."""
    name = e.filename or str(e)
    parent = Path(str(name)).parent if e.filename else None
    if parent is not None and str(parent) not in ("", ".") and not parent.exists():
        return f"{name}: no such folder {parent} (create it first, or write elsewhere)"
    return f"{name}: no such file"
