"""What a pipeline's tune leaves behind, and each step's share of the time (issue 16 item 4).

Step timing runs the pipeline's callable (:meth:`ucutlass.bind.PipelineBinding.callable`: compiled kernels, or
emulated ones on the CPU) with its ``on_step`` hook set: on a CUDA device a pair of CUDA events around each step
(every step runs on the current stream, so the events bracket its kernels and torch ops), on the CPU the wall clock.
A step's ``share`` is its time over the sum of the steps' times (the shares of a workload sum to 1); its ``of_t_sol``
is its time over the whole problem's T_SOL (their sum is the pipeline's T / T_SOL, as timed step by step).

Files in the output folder (beside ``study.db``):

- ``best.ucut``: the program with every tuned kernel's choices written out (comments kept);
- ``results.json``: the studies (one per kernel), each kernel's pick and stop reason, the graded program on every
  workload (time, reference, T_SOL, speedup), the step table, and every trial of every study;
- ``table.txt``: the per-workload table and the per-step table as printed.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ucutlass.problem import Workload

from .budget import geomean
from .pipeline_tune import PipelineTuneResult


def time_steps(fn: Callable[..., None], args: Sequence[Any], *, reps: int = 10, warmup: int = 2) -> list[float]:
    """Milliseconds per step of one pipeline call, the mean of ``reps`` calls after ``warmup`` calls.

    Args:
        fn: a pipeline callable (``fn.on_step``, ``fn.pipeline``: :meth:`ucutlass.bind.PipelineBinding.callable`).
        args: its inputs then its outputs, in the problem's order (tensors on one device).

    Returns:
        One time per step of ``fn.pipeline.pipeline.steps`` (a view's time is what launching nothing costs).
    """
    import torch

    steps = len(fn.pipeline.pipeline.steps)
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    cuda = device.type == "cuda"
    totals = [0.0] * steps
    for _ in range(max(0, warmup)):
        fn(*args)
    if cuda:
        # The events bracket host work too: a step whose host path (argument checks, a torch op's dispatch) is
        # longer than the GPU work queued before it leaves the GPU idle between its marks, and that idle time was
        # counted as the step's (on an H100, L1_030's one GEMM: 0.12 ms as a step, 0.026 ms graded). A GPU spin
        # longer than one call's host path before each call lets the host run ahead, so the marks see GPU time.
        # The host path is measured as the timed calls run it: with the hook set, which runs the pipeline eagerly.
        # Measured without it, a pipeline replayed as a CUDA graph (ucutlass/runtime/graphs.py) took a few µs, the
        # spin stayed at its floor, and at small workloads every step read as host time (an H100, L1_064 at
        # batch 2 × 293: the steps summed to 0.787 ms, the graded pipeline took 0.153 ms).
        starts = [[torch.cuda.Event(enable_timing=True) for _ in range(steps)] for _ in range(reps + 1)]
        ends = [[torch.cuda.Event(enable_timing=True) for _ in range(steps)] for _ in range(reps + 1)]
        rep = [reps]  # the last set: the host-time call's marks, not counted

        def on_step(i: int, phase: str) -> None:
            (starts if phase == "start" else ends)[rep[0]][i].record()

        fn.on_step = on_step
        try:
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn(*args)
            host_ms = (time.perf_counter() - t0) * 1e3
            torch.cuda.synchronize(device)
            cycles = step_spin_cycles(host_ms)
            for r in range(reps):
                rep[0] = r
                torch.cuda._sleep(cycles)
                fn(*args)
            torch.cuda.synchronize(device)
        finally:
            fn.on_step = None
        for r in range(reps):
            for i in range(steps):
                totals[i] += starts[r][i].elapsed_time(ends[r][i])
    else:
        began: dict[int, float] = {}

        def on_step(i: int, phase: str) -> None:
            if phase == "start":
                began[i] = time.perf_counter()
            else:
                totals[i] += (time.perf_counter() - began[i]) * 1e3

        fn.on_step = on_step
        try:
            for _ in range(reps):
                fn(*args)
        finally:
            fn.on_step = None
    return [t / max(1, reps) for t in totals]


def step_spin_cycles(host_ms: float) -> int:
    """GPU clock cycles of the spin before each timed pipeline call: twice the call's host time (``host_ms``,
    measured once), at least the grader's :data:`~ucutlass.grader.timing.SPIN_CYCLES` (~50 µs at the H200's
    1.98 GHz boost clock), at most 100 times it (~5 ms: a longer host path is the pipeline's cost, not noise)."""
    from ucutlass.grader.timing import spin_cycles

    return spin_cycles(host_ms, 2.0, 100)


def step_report(fn: Callable[..., None], problem: Any, workloads: Sequence[Workload],
                t_sol_ms: Callable[[Workload], float | None] | None = None, *, device: str = "cpu",
                reps: int = 10, warmup: int = 2) -> list[dict[str, Any]]:
    """Each step's time, its share of the pipeline's time and of T_SOL, per workload.

    Args:
        fn: the pipeline callable (compiled: :func:`ucutlass.runtime.load_solution`; emulated:
            :func:`ucutlass.emulate.emulate_pipeline`).
        workloads: the workloads to time (inputs made by the problem on ``device``).
        t_sol_ms: T_SOL of a workload (ms), or None.

    Returns:
        Per workload ``{"workload", "uuid", "total_ms", "t_sol_ms", "steps": [{"step", "targets", "text",
        "kinds", "ms", "share", "of_t_sol"}]}``; ``share`` sums to 1 over a workload's steps.
    """
    binding = fn.pipeline
    described = binding.steps()
    out = []
    for w in workloads:
        inputs = problem.make_inputs(w, device=device)
        args = [*inputs.values(), *empty_outputs(problem, w, device)]
        ms = time_steps(fn, args, reps=reps, warmup=warmup)
        total = sum(ms)
        sol = t_sol_ms(w) if t_sol_ms else None
        rows = []
        for i, (t, d) in enumerate(zip(ms, described)):
            rows.append({"step": i + 1, "targets": d["targets"], "text": d["text"],
                         "kinds": [r["kind"] + " " + r["name"] for r in d["runs"]], "ms": t,
                         "share": t / total if total > 0 else 1.0 / len(ms),
                         "of_t_sol": t / sol if sol else None})
        out.append({"workload": w.label(), "uuid": w.uuid, "total_ms": total, "t_sol_ms": sol, "steps": rows})
    return out


def empty_outputs(problem: Any, w: Workload, device: str) -> list[Any]:
    """Uninitialized tensors for the problem's outputs on workload ``w`` (the callable's destinations)."""
    import torch

    from ucutlass.problem import torch_dtype

    axes = problem.resolve_axes(w)
    return [torch.empty(tuple(problem.shape(s, axes) or ()), dtype=torch_dtype(s.dtype), device=device)
            for s in problem.outputs.values()]


def format_steps(report: Sequence[Mapping[str, Any]], width: int = 60) -> str:
    """The step table: per workload, one line per step (time, share of the pipeline, share of T_SOL)."""
    lines = []
    for w in report:
        sol = f", T_SOL {w['t_sol_ms']:.4f} ms" if w.get("t_sol_ms") else ""
        lines.append(f"{w['workload']}: {w['total_ms']:.4f} ms in steps{sol}")
        lines.append(f"  {'step':<{width}} {'ms':>9} {'share':>7} {'×T_SOL':>8}")
        for s in w["steps"]:
            text = f"{s['step']}. {', '.join(s['targets'])} = {s['text']}"
            text = text if len(text) <= width else text[:width - 1] + "…"
            sol_share = f"{s['of_t_sol']:8.3f}" if s["of_t_sol"] is not None else f"{'-':>8}"
            lines.append(f"  {text:<{width}} {s['ms']:9.4f} {s['share']:7.1%} {sol_share}")
    return "\n".join(lines)


def workload_table(result: PipelineTuneResult) -> str:
    """The graded program on every workload: time, reference, T_SOL, speedup over the reference."""
    lines = [f"{'workload':<44} {'status':<10} {'ms':>9} {'ref ms':>9} {'T_SOL ms':>9} {'speedup':>8} {'×T_SOL':>7}"]
    speedups = []
    for o in result.outcomes:
        sp = o.reference_ms / o.latency_ms if o.latency_ms and o.reference_ms else None
        if sp:
            speedups.append(sp)
        cells = [f"{v:9.4f}" if v else f"{'-':>9}" for v in (o.latency_ms, o.reference_ms, o.t_sol_ms)]
        ratio = f"{o.latency_ms / o.t_sol_ms:7.2f}" if o.latency_ms and o.t_sol_ms else f"{'-':>7}"
        speed = f"{sp:8.2f}" if sp else f"{'-':>8}"
        lines.append(f"{o.workload.label()[:44]:<44} {o.status:<10} {' '.join(cells)} {speed} {ratio}")
    if speedups:
        lines.append(f"geomean speedup over the reference: {geomean(speedups):.3f}×")
    return "\n".join(lines)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def write_pipeline_outputs(result: PipelineTuneResult, out_dir: Path, steps: Sequence[Mapping[str, Any]] = (),
                           extra: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write best.ucut (when a combination passed), results.json and table.txt into ``out_dir``.

    Returns:
        ``{"best": …, "json": …, "table": …}`` (``best`` absent when nothing passed).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if result.source is not None:
        paths["best"] = out_dir / "best.ucut"
        paths["best"].write_text(result.source)
    table = workload_table(result) + ("\n\nper step (share of the pipeline's time, and of T_SOL):\n"
                                      + format_steps(steps) if steps else "")
    paths["table"] = out_dir / "table.txt"
    paths["table"].write_text(table + "\n")
    doc = {"problem": result.problem_id, "pipeline": result.pipeline, "studies": result.studies,
           "picks": result.picks, "how": result.how, "best_value": result.best_value,
           "stop_reason": result.stop_reason, "stop_reasons": result.stop_reasons, "budgets": result.budgets,
           "headroom": result.headroom, "seconds": result.seconds,
           "tuned_workloads": [w.uuid for w in result.tuned_workloads],
           "workloads": [{"workload": o.workload.label(), "uuid": o.workload.uuid, "status": o.status,
                          "time_ms": o.latency_ms, "reference_ms": o.reference_ms, "t_sol_ms": o.t_sol_ms,
                          "speedup": o.reference_ms / o.latency_ms if o.latency_ms and o.reference_ms else None}
                         for o in result.outcomes],
           "steps": list(steps), "verify_failures": result.verify_failures, "trials": result.trials,
           **(extra or {})}
    paths["json"] = out_dir / "results.json"
    paths["json"].write_text(json.dumps(_jsonable(doc), indent=2) + "\n")
    return paths
