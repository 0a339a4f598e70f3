"""Rendering of an attention (FMHA forward) kernel: the values of ``templates/sm*_fmha.cu.j2``.

The kernels are CUTLASS's FMHA collectives, used from the installed ``nvidia-cutlass`` wheel and never copied:
sm90 builds ``cutlass::fmha::kernel::FmhaBuilder`` of ``examples/88_hopper_fmha``, sm100 the
``Sm100FmhaFwdKernelTmaWarpspecialized`` of ``examples/77_blackwell_fmha``; the two sets of headers never meet in one
translation unit.
"""

from __future__ import annotations

import json

from .. import __version__, arch
from ..ir import EXTENTS, AttentionKernel, Schedule
from .abi import ABI_VERSION, abi_of
from .common import require_renderable
from .cpp import CPP_DEFAULT_SOFTMAX_SCALE, CPP_ELEMENT


def template_values(kernel: AttentionKernel, source_file: str = "<string>") -> dict:
    """The values one render of ``sm90_fmha.cu.j2`` / ``sm100_fmha.cu.j2`` takes.

    Raises:
        CheckError: open choices remain, or an arch rule is broken.
    """
    require_renderable(kernel)
    rules = arch.rules_for(kernel)
    schedule = rules.resolve_schedule(kernel)
    persistent = rules.resolve_persistent(kernel)
    stages = kernel.stages
    abi = abi_of(kernel)
    info = {"abi": ABI_VERSION, "name": kernel.name, "config": kernel.config_name(), "family": "attention",
            "target": kernel.target.value, "ptrs": list(abi.ptr_names), "scalars": list(abi.scalar_names),
            "extents": list(EXTENTS), "digest": kernel.digest(), "knobs": []}
    scale_expr = ((repr(float(kernel.scale)) + "f") if kernel.scale is not None
                  else CPP_DEFAULT_SOFTMAX_SCALE.format(head_dim=kernel.head_dim))
    if kernel.scalar("scale") is not None:
        scale_expr = f"static_cast<float>(scalars[{abi.scalar_names.index('scale')}])"
    softcap_expr = ""
    if kernel.scalar("softcap") is not None:
        softcap_expr = f"static_cast<float>(scalars[{abi.scalar_names.index('softcap')}])"
    elif kernel.softcap is not None:
        softcap_expr = repr(float(kernel.softcap)) + "f"
    bias = kernel.bias
    desc = [part for part, on in (("softcap c*tanh(s/c)", bool(softcap_expr)),
                                  ("+ bias" + (" (per batch)" if bias is not None and bias.dims[0] == "B" else ""),
                                   bias is not None),
                                  (f"window {kernel.window}", kernel.window is not None)) if on]
    return {
        "ucutlass_version": __version__,
        "source_file": source_file,
        "name": kernel.name,
        "config_name": kernel.config_name(),
        "operands_desc": "   ".join(f"{op.name.upper()}: {op.dtype.value}[{', '.join(op.dims)}]"
                                    for op in kernel.operands),
        "element": CPP_ELEMENT[kernel.dtype],
        "head_dim": kernel.head_dim,
        "tile_head_dim": kernel.tile_head_dim,
        "variant": kernel.is_variant,
        "modifier_desc": "; ".join(desc + (["eager scores (each step rounded)"] if kernel.scores == "eager" else [])),
        "eager": kernel.scores == "eager",
        "scalars_used": bool(abi.scalar_names),
        "softcap_expr": softcap_expr,
        "window": kernel.window or 0,
        "has_bias": bias is not None,
        "bias_batched": bias is not None and bias.dims[0] == "B",
        # a non-persistent kernel reads a CTA's batch from blockIdx: one bias pointer, launches may overlap
        # the soft cap's tanh (templates/sm90_fmha.cu.j2 fast_tanh): "approx", "exp" or "libm"
        "tanh_impl": "libm",
        "batch_from_grid": bias is not None and bias.dims[0] == "B" and not persistent,
        "bias_element": CPP_ELEMENT[bias.dtype] if bias is not None else "",
        "ptr_bias": abi.ptr_names.index("bias") if bias is not None else -1,
        "block_q": kernel.tile[0],
        "block_kv": kernel.tile[1],
        # 88's Tag::kNumMmaWarpGroups: each MMA warpgroup owns 64 query rows of the tile (wgmma M = 64)
        "mma_warpgroups": kernel.tile[0] // 64,
        "wg_order": False,
        "longest_first": False,
        "causal": kernel.mask == "causal",
        "bshd": kernel.layout == "bshd",
        "has_lse": kernel.lse is not None,
        "scale_expr": scale_expr,
        "cooperative": schedule is Schedule.cooperative,
        "persistent": persistent,
        "stages": stages or 0,
        "ptr_q": 0, "ptr_k": 1, "ptr_v": 2, "ptr_o": 3,
        "ptr_lse": abi.ptr_names.index("lse") if kernel.lse is not None else -1,
        "abi_version": ABI_VERSION,
        "info_json": json.dumps(info, sort_keys=True),
    }
