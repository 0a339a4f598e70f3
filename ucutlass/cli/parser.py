"""The ``ucutlass`` argparse tree: each subcommand's arguments, and the command function it runs."""

from __future__ import annotations

import argparse
import math

from .. import __version__
from .agents import cmd_campaign, cmd_mcp, cmd_prompt
from .check import cmd_check, cmd_compile
from .grade import cmd_grade
from .problems import cmd_import_kernelbench, cmd_problems
from .sol import cmd_calibrate, cmd_sol
from .tune import cmd_init, cmd_tune


def _timeout_arg(p: argparse.ArgumentParser) -> None:
    from ..sol import DEFAULT_TIMEOUT_S

    p.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="T_SOL: the problem's reference is counted in a child process; loading it, and counting "
                        "each workload, must each finish within SECONDS or it is killed "
                        f"(default {DEFAULT_TIMEOUT_S:g})")


def _problems_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", action="append", default=[], metavar="DIR",
                   help="extra folder of problems (repeatable; also $UCUTLASS_PROBLEMS)")


def count(minimum: int = 1):
    """An argparse type: an integer of at least ``minimum`` (a count of trials, jobs, workloads, …); anything else is
    a usage error naming the argument, not a value the command quietly clamps or ignores."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    parse.__name__ = "count"  # argparse names the type in its "invalid ... value" message
    return parse


def _float(text: str, ok, wanted: str) -> float:
    """``text`` as a float for which ``ok(value)`` holds, else an argparse usage error "expected WANTED, got TEXT"."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
    if not ok(value):  # nan fails every comparison, so it is refused too
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite duration of more than 0 seconds (a time limit or a deadline)."""
    return _float(text, lambda v: 0 < v < math.inf, "a number of seconds > 0")


def share(text: str) -> float:
    """An argparse type: a finite number of at least 0 (a tolerance such as ε in (1+ε)·T_SOL)."""
    return _float(text, lambda v: 0 <= v < math.inf, "a number >= 0")


def finite(text: str) -> float:
    """An argparse type: a finite number (not nan or inf)."""
    return _float(text, math.isfinite, "a finite number")


def _off_or(kind):
    """An argparse type: ``kind`` of the text, or None for ``off``."""
    def parse(text: str):
        return None if text.lower() == "off" else kind(text)
    return parse


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error of a command that speaks JSON (``feedback_command`` set: check, compile,
    grade, tune) given ``--json`` is also a feedback document on stdout (an agent reads stdout as JSON; argparse
    writes only a usage line to stderr). The usage line and exit status 2 stay argparse's. Subparsers are of this
    class too (argparse makes them of the parent's type)."""

    feedback_command: str | None = None
    _argv: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        import sys

        self._argv = list(sys.argv[1:] if args is None else args)  # what error() looks at for --json
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        if self.feedback_command and "--json" in self._argv:
            import json

            from ..agents.feedback import error_document

            doc = error_document(self.feedback_command, ValueError(f"{self.prog}: {message}"))
            print(json.dumps(doc, indent=2))
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``ucutlass`` argparse tree: one subcommand each, its ``func`` the command to run."""
    ap = CommandParser(prog="ucutlass", description="The .ucut language for CUTLASS kernels: "
                                 "check, compile, grade and tune against SOL-ExecBench-style problems.")
    ap.add_argument("--version", action="version", version=f"ucutlass {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", help="parse a .ucut file and check it against its target's rules (sm90, sm100)")
    p.feedback_command = "check"
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="machine-readable diagnostics")
    p.add_argument("--problem", help="also bind to this problem and check alignment on its workloads")
    _problems_arg(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("compile", help="generate CUTLASS C++ and compile it with nvcc (cached)")
    p.feedback_command = "compile"
    p.add_argument("file")
    p.add_argument("--emit-only", action="store_true", help="write the .cu files, do not run nvcc")
    p.add_argument("-o", "--output", metavar="DIR", help="copy .cu/.so here (default: print cache paths)")
    p.add_argument("--pick", action="append", default=[], metavar="KEY=VALUE", help="resolve a {…} choice")
    p.add_argument("--all", action="store_true", help="build every legal combination of the choices")
    p.add_argument("--kernel", help="only this kernel of the file")
    p.add_argument("--jobs", type=count(), default=None, help="parallel nvcc processes (default: cores)")
    p.add_argument("--timeout", type=seconds, default=900.0, help="nvcc time limit per kernel, seconds")
    p.add_argument("--json", action="store_true", help="print one feedback document (ucutlass/agents/feedback-v1.json)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("sol", help="speed-of-light bound (T_SOL) per workload of a problem")
    p.add_argument("problem", nargs="?")
    p.add_argument("--list-gpus", action="store_true", help="list the hardware specs (with their sources)")
    p.add_argument("--gpu", default="h200", help="hardware spec: h200, h100, b200, b200-solar, local, …")
    p.add_argument("--json", action="store_true")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_sol)

    p = sub.add_parser("grade", help="check and time a solution (.ucut, .py, FlashInfer-Bench .json)")
    p.feedback_command = "grade"
    p.add_argument("file")
    p.add_argument("problem")
    p.add_argument("--json", action="store_true")
    p.add_argument("-o", "--output", help="write the JSON records here")
    # an int checked by grade itself (not count()): its message says what 0 would have meant; likewise tune's --dispatch
    p.add_argument("--workloads", type=int, help="grade only the first N workloads")
    p.add_argument("--workload", action="append", default=[], metavar="WHICH",
                   help="grade this workload: its index (from 0, as `ucutlass problems` lists them), its uuid (or a "
                        "unique prefix), or `smallest` (fewest input elements); repeatable")
    p.add_argument("--pick", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--kernel", help="the kernel of a .ucut file with several")
    p.add_argument("--emulate", action="store_true",
                   help="grade a .ucut program's meaning: its kernels run as torch ops from the IR, on the CPU or "
                        "a GPU, with no nvcc (times are torch's: no SOL score is meaningful)")
    p.add_argument("--no-timing", action="store_true",
                   help="check correctness only: no timed calls, so none of the timing's input copies (up to three "
                        "per input set) are made; for a workload whose inputs fill most of the memory, or an "
                        "emulated grade, whose times are torch's anyway")
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="deadline of each request: loading the solution, one call, and each run of the problem's "
                        "own code (past it: TIMEOUT for a candidate, a broken problem for the reference)")
    _problems_arg(p)
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("tune", help="search a program's choices with Optuna on the GPU")
    p.feedback_command = "tune"
    p.add_argument("problem")
    p.add_argument("--spec", help=".ucut program (default: the problem's kernel.ucut)")
    p.add_argument("--kernel", help="the kernel to tune when the spec has several")
    p.add_argument("--trials", type=count(), help="trial budget (default: decided by the SOL headroom)")
    p.add_argument("--workers", type=count(), metavar="N", help="worker processes, each pinned to one GPU "
                   "(CUDA_VISIBLE_DEVICES, round-robin), all on one Optuna study (default: one per visible GPU)")
    p.add_argument("--storage", metavar="URL", help="Optuna storage: sqlite:///FILE.db, journal:///FILE.log (or a "
                   "path ending in .log), or a database server shared by several hosts, e.g. "
                   "postgresql+psycopg://USER@HOST:5432/DB (pip install 'ucutlass[postgres]'); default: "
                   "study.db (one worker) or study.log (several) in the output folder; resumable")
    p.add_argument("--study", help="study name in the storage")
    p.add_argument("--out", help="output folder (default: ./ucutlass-tune/PROBLEM)")
    p.add_argument("--jobs", type=count(), help="parallel nvcc processes in all, shared among the workers "
                   "(default: cores)")
    p.add_argument("--batch", type=count(), default=16, help="trials compiled together per round (per worker; "
                   "a worker asks at most its share of what is left)")
    p.add_argument("--max-workloads", type=count(), default=6, help="workloads measured per trial")
    p.add_argument("--epsilon", type=finite, default=0.25, help="stop within (1+ε)·T_SOL (a negative ε: "
                   "never; campaigns pass -1 for a rule that is off)")
    p.add_argument("--patience", type=count(), default=12, help="stop after this many trials without gain")
    p.add_argument("--sampler", default="auto", choices=["auto", "tpe", "random", "brute"])
    p.add_argument("--dispatch", type=int, default=3, metavar="N",
                   help="at most N kernels in best.ucut, one per range of M, when they beat the single best by "
                        "5%% or more on the geomean (a GEMM; default 3; 1: one kernel)")
    p.add_argument("--time-limit", type=seconds, metavar="SECONDS", help="stop searching after this long "
                   "(the best found is still verified on every workload)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    p.add_argument("--dry-run", action="store_true", help="show the space and plan; no GPU needed")
    p.add_argument("--json", action="store_true", help="print one feedback document (ucutlass/agents/feedback-v1.json)"
                   " at the end instead of the table")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("init", help="write a .ucut program from a problem's reference (kernels + torch steps) and "
                       "check it with the emulated grade on the smallest workload")
    p.add_argument("problem", help="a problem id (as `ucutlass problems` lists them) or a problem folder's path")
    p.add_argument("-o", "--output", metavar="FILE", help="write the program here (default: stdout)")
    p.add_argument("--no-check", action="store_true", help="do not grade it (emulated) after writing it (a problem "
                   "whose smallest workload is too large for this machine's memory)")
    _problems_arg(p)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("prompt", help="a task prompt for an LLM agent: the card's sections for the problem, the "
                       "problem, T_SOL, a starting program, the feedback format (its token count on stderr)")
    p.add_argument("problem")
    p.add_argument("--max-tokens", type=count(), metavar="N", help="drop the least useful parts until the prompt fits "
                   "(the reference's code, then card sections, the best so far, the starting program)")
    p.add_argument("--gpu", default="h200", help="hardware spec for T_SOL (default: h200)")
    p.add_argument("--study", metavar="DIR", help="a tune's output folder: its best program and measured baseline "
                   "(default: ./ucutlass-tune/PROBLEM when it exists)")
    p.add_argument("--no-sol", action="store_true", help="leave out the T_SOL table (no counting of the reference)")
    _timeout_arg(p)
    _problems_arg(p)
    p.set_defaults(func=cmd_prompt)

    p = sub.add_parser("mcp", help="an MCP server over stdio (tools: problem, sol, prompt, card, check, compile, "
                       "grade, tune, best; the card also as a resource) for LLM agents")
    p.add_argument("--timeout", type=seconds, default=600.0, metavar="SECONDS",
                   help="limit of one tool call (its command is killed past it; default 600)")
    _problems_arg(p)
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("campaign", help="spend a budget of tuner trials or agent attempts over several problems by "
                       "SOL headroom, with stop rules; resumable; one table (or --replay recorded tunes offline)")
    p.add_argument("problems_ids", nargs="*", metavar="PROBLEM")
    p.add_argument("--budget", type=count(), help="attempts in all (tuner trials or programs graded); with --replay "
                   "default: every recorded trial")
    p.add_argument("--policy", default="tuner", choices=["tuner", "scripted"],
                   help="what makes attempts: the Optuna tuner (GPU) or the scripted agent (DiagnosticFixer)")
    p.add_argument("--epsilon", type=_off_or(share), default=0.25, metavar="E|off",
                   help="stop a problem within (1+E)·T_SOL once it beats the baseline (default 0.25)")
    p.add_argument("--window", type=_off_or(count()), default=12, metavar="W|off",
                   help="stop a problem after W attempts without a 1%% gain (default 12)")
    p.add_argument("--spread", default="headroom", choices=["headroom", "even"],
                   help="split the budget by SOL headroom, or evenly without the ε and w rules (the baseline)")
    p.add_argument("--probe", type=count(), default=2, help="attempts first given to a problem of unknown headroom")
    p.add_argument("--out", default="ucutlass-campaign", help="state, table.txt, results.json and the tuner's "
                   "studies (default ./ucutlass-campaign); rerun the same command to resume")
    p.add_argument("--replay", nargs="+", metavar="RECORDS", help="replay campaigns on recorded tunes (a tune's "
                   "folder, or a campaign's --out): the even spread and each --rule, no GPU")
    p.add_argument("--rule", action="append", metavar="EPS:W", help="a stop rule to replay (repeatable)")
    p.add_argument("--emulate", action="store_true", help="agent policies: grade as torch ops (CPU; no T_SOL)")
    p.add_argument("--workloads", type=count(), help="agent policies: grade only the first N workloads")
    p.add_argument("--max-workloads", type=count(), default=6, help="tuner: workloads measured per trial")
    p.add_argument("--tune-arg", action="append", default=[], metavar="ARG",
                   help="tuner: passed to each `ucutlass tune` (repeatable; e.g. --tune-arg=--dispatch=1)")
    p.add_argument("--gpu", default="local", help="hardware spec for T_SOL (default: this GPU)")
    _problems_arg(p)
    p.set_defaults(func=cmd_campaign)

    p = sub.add_parser("problems", help="list the problems ucutlass can find")
    _problems_arg(p)
    p.set_defaults(func=cmd_problems)

    p = sub.add_parser("import", help="turn another benchmark's problem into a problem folder")
    imp = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    p = imp.add_parser("kernelbench", help="a KernelBench file (class Model, get_inputs, get_init_inputs)")
    p.add_argument("file", help="the KernelBench .py file (it runs only in a child process, on the meta device)")
    p.add_argument("-o", "--out", metavar="DIR", help="problem folder to write (default ./kernelbench_<stem>)")
    p.add_argument("--scale", action="append", default=[], metavar="GLOBAL=F[,F…]",
                   help="scale an int global of the file; several factors make several workloads (repeatable)")
    p.add_argument("--dtype", choices=["bf16", "bfloat16", "fp16", "float16"],
                   help="make the float32 tensors this dtype")
    p.add_argument("--timeout", type=seconds, default=120.0, help="the probe's time limit, seconds (default 120)")
    p.set_defaults(func=cmd_import_kernelbench)

    p = sub.add_parser("calibrate", help="measure this GPU's copy bandwidth and matmul rates for T_SOL")
    p.add_argument("--no-save", action="store_true", help="print only; do not store the calibrated entry")
    p.set_defaults(func=cmd_calibrate)
    return ap
