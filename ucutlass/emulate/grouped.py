"""A ``kernel NAME : grouped_gemm`` emulated with torch ops: one GEMM per group of consecutive rows of A.

Rows of ``a`` [M, K] and ``d`` [M, N] split into G groups by ``m_sizes`` (rows per group) or ``m_offsets``
(cumulative row ends); group g multiplies by its weight ``b[g]`` ([G, N, K] or [G, K, N]). Epilogue inputs:
``[N]`` (one row for all groups), ``[G, N]`` (one per group), ``[M]`` (one value per row), scalars
(:class:`ucutlass.ir.GroupedGemmKernel`). Each group's epilogue is the GEMM emulator's.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..ir import EpilogueInputKind
from .gemm import GemmEmulator, exact_f32, oriented


class GroupedEmulator(GemmEmulator):
    """A grouped GEMM run as torch ops, group by group (the group sizes are read to the host once per call)."""

    family = "grouped_gemm"

    def call(self, values: Sequence[Any]) -> None:
        """Run on the arguments in ABI order; ``d`` is written in place, group by group."""
        import torch

        k = self.kernel
        args = self.named(values)
        a, b, d = args["a"], args["b"], args["d"]
        counts = args[k.groups.name].long().cpu()
        ends = counts.cumsum(0) if k.groups.name == "m_sizes" else counts
        starts = torch.cat([ends.new_zeros(1), ends[:-1]])
        w = oriented(b, k.b.dims, ("N", "K"))  # [G, N, K]
        for g, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
            if hi <= lo:
                continue
            group = dict(args)
            group["a"], group["d"] = a[lo:hi], d[lo:hi]
            for inp in k.epilogue_inputs:
                if inp.kind is EpilogueInputKind.scalar:
                    continue
                if inp.dims == ("G", "N"):
                    group[inp.name] = args[inp.name][g]
                elif inp.kind is EpilogueInputKind.col_vector:
                    group[inp.name] = args[inp.name].reshape(-1)[lo:hi]
            with exact_f32():
                acc = torch.matmul(a[lo:hi].float(), w[g].float().transpose(-1, -2))
            self.epilogue(self.rounded(acc), group, False)

    def modes(self, values: Sequence[Any]) -> dict[str, int]:
        """``{"M", "N", "K"}``: all rows, the weight's N and K."""
        args = self.named(values)
        w = oriented(args["b"], self.kernel.b.dims, ("N", "K"))
        return {"M": int(args["a"].shape[0]), "N": int(w.shape[-2]), "K": int(w.shape[-1])}
