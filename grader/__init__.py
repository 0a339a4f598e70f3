"""ucutlass.grader: checks and times candidates against a problem's reference and scores them by SOL.

The grader grades a *solution* (:class:`SolutionRef`: a loader name and a JSON payload, built into a
callable inside a spawned worker process), never the compiler's output directly, so hand-written CUDA,
Triton or torch code is graded the same way as a compiled `.ucut` kernel.

    >>> from ucutlass.problem import find_problem                              # doctest: +SKIP
    >>> from ucutlass.grader import Grader, solution_from_file, format_table, summarize
    >>> with Grader(find_problem("qkv_proj_bias_qwen2_5_7b")) as g:
    ...     results = g.grade(solution_from_file("mine.py"))
    >>> print(format_table(results)); print(summarize(results))

Each guard that fires gives a named status (INCORRECT_ACCURACY, INPUT_MODIFIED, OUTPUT_ALIASED,
UNTIMED_WORK, THREAD_SPAWNED, TAMPERED, FASTER_THAN_SOL). See docs/grader.md for the process design,
statuses, guards and timing, and tests/adversarial/ for the cheating candidates they stop.
"""

from .accuracy import Accuracy, check_accuracy, ground_truth
from .check import Comparison, compare, poison_value
from .errors import GraderError
from .grader import Grader
from .inputs import BASE_VARIANTS, ROUTED_VARIANTS, apply_variant, routing_inputs, unlisted_workload
from .results import (
    GUARD_STATUSES,
    Correctness,
    Performance,
    Status,
    WorkloadResult,
    collect_environment,
    format_table,
    summarize,
)
from .solutions import (
    PYTHON_FILE_LOADER,
    REFERENCE_LOADER,
    SOURCES_LOADER,
    SolutionRef,
    build_cache_dir,
    load_python_file,
    load_reference,
    load_sources,
    reference_solution,
    solution_from_file,
)
from .timing import BenchParams, LatencyStats, Primitives, latency_stats

__all__ = [
    "Grader", "GraderError", "SolutionRef", "solution_from_file", "reference_solution", "load_python_file",
    "load_reference", "load_sources", "PYTHON_FILE_LOADER", "REFERENCE_LOADER", "SOURCES_LOADER",
    "Status", "WorkloadResult", "Correctness", "Performance", "summarize", "format_table",
    "collect_environment", "compare", "Comparison", "poison_value", "BenchParams", "LatencyStats",
    "latency_stats", "Primitives", "Accuracy", "check_accuracy", "ground_truth", "GUARD_STATUSES",
    "BASE_VARIANTS", "ROUTED_VARIANTS", "apply_variant", "routing_inputs", "unlisted_workload",
    "build_cache_dir",
]
