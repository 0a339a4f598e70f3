"""ucutlass: a compact language for CUTLASS kernel configurations, its compiler, an SOL-guided tuner and a grader.

Stages (docs/architecture.md), one package each: ``lang`` (parse `.ucut`) → ``ir`` → ``arch`` (rules) → ``codegen``
(jinja2) → ``build`` (nvcc + cache) → ``bind`` and ``runtime`` (ctypes callable) → ``solution`` (a grader solution);
``problem`` (definition + workloads), ``sol`` (speed of light), ``ucutlass.grader`` and ``ucutlass.search``.
"""

__version__ = "0.1.0"
