"""The protocol every kernel family's IR class follows (:class:`~ucutlass.ir.GemmKernel`,
:class:`~ucutlass.ir.GroupedGemmKernel`, :class:`~ucutlass.ir.AttentionKernel`): what the later stages
(rules, rendering, build, tuner) may ask of any kernel without knowing its family."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from .values import Choice, Target


class Kernel(Protocol):
    """One kernel of a program. ``family`` names the row of each stage's table (``"gemm"``,
    ``"grouped_gemm"``, ``"attention"``)."""

    name: str
    target: Target | Choice
    family: str

    def choices(self) -> dict[str, Choice]:
        """Open choices keyed by setting name."""

    def is_concrete(self) -> bool:
        """True when no setting holds a :class:`Choice`."""

    def resolve(self, picks: Mapping[str, Any]) -> "Kernel":
        """The kernel with ``picks`` (typed values) in place of its choices."""

    def config_name(self) -> str:
        """The procedural name a build is cached under."""

    def build_config(self) -> "Kernel":
        """What the compiled code depends on (run-time settings dropped)."""

    def build_digest(self) -> str:
        """Equal for kernels that share one compiled binary."""
