"""Speed of light: the fastest any kernel could run a problem's workload on a GPU, and the SOL score.

``analyze(problem, workload, hardware)`` counts the problem's PyTorch reference on meta tensors (tensor-core
FLOPs per precision, minimum DRAM bytes), in a child process with a deadline, and prices it on a hardware
entry (datasheet, NVIDIA's SOLAR constants, or calibrated on the local GPU). See docs/sol.md.
"""

from ._errors import BrokenReferenceError, CalibrationError, HardwareError, SolError
from .analysis import SolReport, analyze, clear_cache, counts_for, prefetch_counts
from .calibrate import calibrate, calibrate_command
from .counting import Counts, OpCount, count_workload, workload_seed
from .hardware import Hardware, cache_dir, list_hardware, load_hardware
from .isolation import DEFAULT_TIMEOUT_S, count_in_child, shared_counting_process
from .published import Comparison, compare_published
from .report import format_table, hardware_command, sol_command
from .score import is_impossible, sol_score

__all__ = [
    "analyze", "SolReport", "OpCount", "Counts", "count_workload", "workload_seed", "clear_cache",
    "counts_for", "prefetch_counts", "count_in_child", "shared_counting_process", "DEFAULT_TIMEOUT_S",
    "Hardware", "load_hardware", "list_hardware", "cache_dir", "calibrate", "calibrate_command",
    "sol_score", "is_impossible", "format_table", "sol_command", "hardware_command", "compare_published", "Comparison",
    "SolError", "BrokenReferenceError", "HardwareError", "CalibrationError",
]
