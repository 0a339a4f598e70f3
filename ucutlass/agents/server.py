"""``ucutlass mcp``: a Model Context Protocol server over stdio (the official ``mcp`` SDK, 2.x ``MCPServer``).

Tools (each returns a feedback document of ``feedback-v1.json`` where the command has one):
``problem`` (definition and workloads in brief), ``sol`` (T_SOL per workload), ``prompt`` (the task
prompt), ``card`` (the language card, whole or by section), ``check``, ``compile`` (``emit_only`` for the
CUTLASS C++ alone), ``grade`` (``emulate`` on a CPU), ``tune`` and ``best`` (a finished tune's program and
table). The card (docs/DSL.md) is also the resource ``ucutlass://card``.

Isolation: every tool that reads a program or a problem's code runs the ``ucutlass`` command line in a child
process of its own session (its own process group), with the program written to a fresh folder; ``grade`` then
runs the candidate in the grader's isolated workers as the command line does. A call past its time limit has its
whole process group killed and answers a document whose ``error`` says so: a tool call never hangs the server.
Long calls report progress (seconds elapsed, out of the limit) every ``PROGRESS_EVERY_S``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from mcp.server.mcpserver import Context, MCPServer

from .. import __version__
from .feedback import error_document, validate

#: Largest program text a tool accepts (characters).
MAX_PROGRAM_CHARS = 65536
#: Seconds between progress notifications of a running call.
PROGRESS_EVERY_S = 2.0
INSTRUCTIONS = ("ucutlass: write .ucut programs (CUTLASS kernel configurations) for SOL-ExecBench problems. Read the "
                "card (resource ucutlass://card) or the prompt tool's text, check a program, fix each diagnostic "
                "from its line, column and `valid` choices, grade it (emulate=true without a GPU), and compare its "
                "times with T_SOL (sol).")


def _run_blocking(argv: list[str], cwd: str, timeout_s: float) -> tuple[int | None, str, str]:
    """Run ``argv`` in a new session; on timeout kill its process group. Returns (exit code or None, out, err)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return None, out, err


class Workbench:
    """What the tools share: the extra problem folders, the time limit of a call, a scratch folder per call.

    Args:
        problems: extra problem folders (``--problems``), as for the command line.
        timeout_s: limit of one call, seconds (the child is killed past it).
        root: where each call's folder is made (default: a fresh temporary folder).
    """

    def __init__(self, problems: Sequence[str] = (), timeout_s: float = 600.0, root: str | None = None):
        self.problems = [str(Path(p).resolve()) for p in problems]
        self.timeout_s = float(timeout_s)
        self.root = Path(root or tempfile.mkdtemp(prefix="ucutlass-mcp-"))
        self.tunes = Path.cwd() / "ucutlass-tune"  # where tune writes, as the command line does from here
        self.calls = 0

    def folder(self) -> Path:
        self.calls += 1
        path = self.root / f"call-{self.calls:05d}"
        path.mkdir(parents=True)
        return path

    def write_program(self, program: str) -> Path:
        """The program text in a fresh folder as ``program.ucut``.

        Raises:
            ValueError: not a string, or longer than MAX_PROGRAM_CHARS.
        """
        if not isinstance(program, str):
            raise ValueError("program must be the text of a .ucut file")
        if len(program) > MAX_PROGRAM_CHARS:
            raise ValueError(f"program has {len(program)} characters; at most {MAX_PROGRAM_CHARS}")
        path = self.folder() / "program.ucut"
        path.write_text(program)
        return path

    def argv(self, *args: str) -> list[str]:
        extra = [a for d in self.problems for a in ("--problems", d)]
        return [sys.executable, "-m", "ucutlass.cli", *args, *extra]

    async def run(self, args: list[str], cwd: Path, ctx: Any = None, timeout_s: float | None = None
                  ) -> tuple[int | None, str, str]:
        """Run ``ucutlass ARGS`` in a child process (a worker thread waits for it), reporting progress."""
        import anyio

        limit = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        result: dict = {}
        done = anyio.Event()

        async def wait() -> None:
            result["r"] = await anyio.to_thread.run_sync(_run_blocking, self.argv(*args), str(cwd), limit)
            done.set()

        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            while not done.is_set():
                with anyio.move_on_after(PROGRESS_EVERY_S):
                    await done.wait()
                if not done.is_set() and ctx is not None:
                    try:
                        await ctx.report_progress(time.monotonic() - start, limit, f"ucutlass {args[0]} running")
                    except Exception:  # a client that did not ask for progress: nothing to report to
                        ctx = None
        return result["r"]

    async def document(self, command: str, args: list[str], cwd: Path, ctx: Any = None,
                       **fields: Any) -> dict[str, Any]:
        """Run a ``--json`` command and return its feedback document (validated against the schema); a child that
        timed out or printed no document gives an error document saying so."""
        code, out, err = await self.run([*args, "--json"], cwd, ctx)
        if code is None:
            return error_document(command, TimeoutError(f"ucutlass {command} ran past {self.timeout_s:g} s and was "
                                                         "killed"), **fields)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError:
            tail = (err or out).strip().splitlines()[-5:]
            return error_document(command, RuntimeError(f"ucutlass {command} exited {code} without a document: "
                                                         + " | ".join(tail)), **fields)
        return validate(doc)


def create_server(problems: Sequence[str] = (), timeout_s: float = 600.0, root: str | None = None):
    """The MCP server (an ``mcp.server.mcpserver.MCPServer``) with ucutlass's tools and the card resource.

    Args:
        problems: extra problem folders (as ``--problems``).
        timeout_s: limit of one tool call in seconds.
        root: folder for the calls' scratch folders (default: a new temporary one).
    """
    bench = Workbench(problems, timeout_s, root)
    server = MCPServer("ucutlass", version=__version__, instructions=INSTRUCTIONS)

    def bad_input(command: str, e: Exception, **fields: Any) -> dict[str, Any]:
        return error_document(command, e, **fields)

    def card_text() -> str:
        return resources.files("ucutlass.docs").joinpath("DSL.md").read_text(encoding="utf-8")

    @server.resource("ucutlass://card", name="card", mime_type="text/markdown",
                     description="The .ucut language card (docs/DSL.md): syntax, settings, rules, error codes")
    def card_resource() -> str:
        return card_text()

    @server.tool(description="The .ucut language card (docs/DSL.md), whole or only the named sections (e.g. "
                             "'Attention', 'Rules (sm90)'); `sections` lists the section names.")
    def card(sections: list[str] | None = None) -> dict[str, Any]:
        from .prompt import card_sections

        parts = card_sections(card_text())
        names = [n for n in parts if n]
        if not sections:
            return {"ok": True, "sections": names, "text": card_text()}
        unknown = [n for n in sections if n not in parts]
        if unknown:
            return {"ok": False, "sections": names, "error": f"no section {', '.join(map(repr, unknown))} "
                                                              f"(valid: {', '.join(names)})"}
        return {"ok": True, "sections": names, "text": "\n\n".join(parts[n] for n in sections)}

    @server.tool(description="A problem's definition in brief: axes, inputs and outputs (shape, dtype), workloads "
                             "(axes and tolerance each), whether it ships a kernel.ucut, and that program.")
    def problem(problem: str) -> dict[str, Any]:
        from ..problem import find_problem  # definition.json and workload.jsonl only: no code of the problem runs

        try:
            p = find_problem(problem, bench.problems)
        except Exception as e:  # an unknown or broken problem: its message names the valid ones
            return {"ok": False, "error": str(e)}
        summary = p.summary()
        summary["workloads"] = [{"index": w.index, "axes": dict(w.axes), "tolerance": w.tolerance.to_json()}
                                for w in p.workloads]
        summary["kernel_ucut"] = p.spec_path.read_text() if p.spec_path else None
        summary["description"] = p.description
        return {"ok": True, **summary}

    @server.tool(description="T_SOL (speed of light) per workload of a problem on a GPU (h200, b200, …): FLOPs, "
                             "bytes, bound. JSON as `ucutlass sol --json`.")
    async def sol(problem: str, ctx: Context, gpu: str = "h200") -> dict[str, Any]:
        code, out, err = await bench.run(["sol", problem, "--gpu", gpu, "--json"], bench.folder(), ctx)
        if code == 0:
            return {"ok": True, **json.loads(out)}
        return {"ok": False, "error": (err.strip().splitlines() or ["timed out" if code is None else "failed"])[-1]}

    @server.tool(description="The task prompt for a problem (card sections, problem, T_SOL, starting program, "
                             "feedback format), within max_tokens when given.")
    async def prompt(problem: str, ctx: Context, max_tokens: int | None = None) -> dict[str, Any]:
        args = ["prompt", problem] + (["--max-tokens", str(max_tokens)] if max_tokens else [])
        study = bench.tunes / Path(problem).name
        if (study / "results.json").is_file():  # a tune of this server's: its best program and measured baseline
            args += ["--study", str(study)]
        code, out, err = await bench.run(args, bench.folder(), ctx)
        if code == 0:
            return {"ok": True, "text": out, "tokens_line": err.strip().splitlines()[-1]}
        return {"ok": False, "error": (err.strip().splitlines() or ["timed out" if code is None else "failed"])[-1]}

    @server.tool(description="Check a .ucut program (its text): language errors with line, column and valid "
                             "choices, the target's rules, and with `problem` the binding to its tensors.")
    async def check(program: str, ctx: Context, problem: str | None = None) -> dict[str, Any]:
        try:
            path = bench.write_program(program)
        except ValueError as e:
            return bad_input("check", e, file="program.ucut")
        args = ["check", path.name] + (["--problem", problem] if problem else [])
        return await bench.document("check", args, path.parent, ctx, file=path.name)

    @server.tool(description="Compile a concrete .ucut program: CUTLASS C++ (emit_only) or nvcc to a shared "
                             "object; `pick` resolves open choices (KEY=VALUE).")
    async def compile(program: str, ctx: Context, emit_only: bool = False,
                      pick: list[str] | None = None) -> dict[str, Any]:
        try:
            path = bench.write_program(program)
        except ValueError as e:
            return bad_input("compile", e, file="program.ucut")
        args = ["compile", path.name] + [a for p in pick or [] for a in ("--pick", p)]
        if emit_only:
            args += ["--emit-only", "-o", str(path.parent / "cu")]
        return await bench.document("compile", args, path.parent, ctx, file=path.name)

    @server.tool(description="Grade a .ucut program on a problem: correctness and time per workload against the "
                             "PyTorch reference, speedup and SOL score. emulate=true runs its meaning as torch ops "
                             "(no GPU, no nvcc); `workloads` grades the first N.")
    async def grade(program: str, problem: str, ctx: Context, emulate: bool = False,
                    workloads: int | None = None) -> dict[str, Any]:
        try:
            path = bench.write_program(program)
        except ValueError as e:
            return bad_input("grade", e, file="program.ucut", problem=problem)
        args = ["grade", path.name, problem] + (["--emulate"] if emulate else []) + \
            (["--workloads", str(workloads)] if workloads else [])
        return await bench.document("grade", args, path.parent, ctx, file=path.name, problem=problem)

    @server.tool(description="Tune a program's open choices on the GPU (Optuna, SOL-budgeted); returns the best "
                             "program and per-workload table. Needs a CUDA GPU.")
    async def tune(problem: str, ctx: Context, program: str | None = None,
                   trials: int | None = None) -> dict[str, Any]:
        folder = bench.folder()
        args = ["tune", problem, "--out", str(bench.tunes / Path(problem).name)]
        if program is not None:
            try:
                path = bench.write_program(program)
            except ValueError as e:
                return bad_input("tune", e, problem=problem)
            args += ["--spec", str(path)]
        if trials:
            args += ["--trials", str(trials)]
        return await bench.document("tune", args, folder, ctx, problem=problem)

    @server.tool(description="The best program of a finished tune (its output folder, default "
                             "ucutlass-tune/PROBLEM where the server runs) and its results.")
    def best(problem: str, folder: str | None = None) -> dict[str, Any]:
        out = Path(folder) if folder else bench.tunes / Path(problem).name
        results, program = out / "results.json", out / "best.ucut"
        if not results.is_file():
            return {"ok": False, "error": f"no tune results at {results} (run the tune tool or `ucutlass tune`)"}
        doc = json.loads(results.read_text())
        return {"ok": program.is_file(), "program": program.read_text() if program.is_file() else None,
                "best": doc.get("best"), "stop_reason": doc.get("stop_reason"), "workloads": doc.get("workloads")}

    server.bench = bench  # type: ignore[attr-defined]  (tests look at the scratch folders)
    return server


def serve(problems: Sequence[str] = (), timeout_s: float = 600.0) -> None:
    """Serve over stdio until the client closes (``ucutlass mcp``); the calls' scratch folders are removed then
    (a tune's output stays in ``ucutlass-tune/``)."""
    import shutil

    server = create_server(problems, timeout_s)
    try:
        server.run("stdio")
    finally:
        shutil.rmtree(server.bench.root, ignore_errors=True)


__all__ = ["MAX_PROGRAM_CHARS", "PROGRESS_EVERY_S", "Workbench", "create_server", "serve"]
