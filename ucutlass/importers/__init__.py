"""Importers: problems from other benchmarks as SOL-ExecBench problem folders (issue 17).

- :mod:`.kernelbench`: ``ucutlass import kernelbench FILE.py`` (KernelBench's ``Model``/``get_inputs`` files);
- :mod:`.probe`: the child process that runs an untrusted file on the meta device;
- :mod:`.functional`: a traced ``nn.Module`` as functional torch code (the reference ``run()``).
"""

from __future__ import annotations

from .kernelbench import ImportProblemError, import_kernelbench, parse_scale

__all__ = ["ImportProblemError", "import_kernelbench", "parse_scale"]
