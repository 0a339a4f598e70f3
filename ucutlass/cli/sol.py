"""``ucutlass sol`` and ``ucutlass calibrate``: a problem's speed-of-light bound (T_SOL) per workload, and this
GPU's measured rates for it."""

from __future__ import annotations

from ..errors import UcutError
from .common import sol_timeout


def cmd_sol(args) -> int:
    """``ucutlass sol PROBLEM``: T_SOL per workload (or ``--list-gpus``: the hardware specs)."""
    from ..problem import find_problem
    from ..sol import sol_command
    from ..sol.report import hardware_command

    if args.list_gpus:
        print(hardware_command(as_json=args.json))
        return 0
    if not args.problem:
        raise UcutError("ucutlass sol needs a PROBLEM (or --list-gpus)")
    print(sol_command(find_problem(args.problem, args.problems), gpu=args.gpu, as_json=args.json,
                      timeout_s=sol_timeout(args)))
    return 0


def cmd_calibrate(args) -> int:
    """``ucutlass calibrate``: this GPU's copy bandwidth and matmul rates, stored for T_SOL."""
    from ..sol import calibrate_command

    print(calibrate_command(save=not args.no_save))
    return 0
