"""Write a partition as readable `.ucut` text (issue 17, item 3): the kernels, each with a default search space
sized to its shapes, then the pipeline wiring them to the problem's tensors, each step commented with the
reference line it comes from.

A problem that is exactly one matmul whose operands and output are the problem's own tensors is written as one
kernel bound with ``<-`` / ``->`` (no pipeline): ``ucutlass tune`` searches such a program directly.
"""

from __future__ import annotations

from .convs import conv_kernel_text
from .partition import KernelSpec, Partition

#: tile K per element type: 64·… bytes along K (docs/DSL.md, sm90.tile-k: K × element bytes is 64, 128 or 256).
TILE_K = {"bf16": 64, "f16": 64, "f32": 32, "f8e4m3": 128, "f8e5m2": 128}


#: Rows (M) at or below which a GEMM is decode-shaped: the weight's N goes on the MMA's M side (swap AB) with
#: 16- or 32-wide tiles for the tokens (issue 13; examples/flashinfer_gemm_f16.ucut, docs/DSL.md's swap_ab).
DECODE_ROWS = 64


def m_span(spec: KernelSpec, problem, axes: dict[str, int]) -> tuple[int, int] | None:
    """The least and largest M of ``spec`` over the problem's workloads, or None when unknown.

    M at the captured workload (``axes``, var axes by name) is matched with a product of one to three var axes times
    a whole number (a flattened batch x sequence, tokens x experts per token); M at every workload is then that
    product there. Where several products match, the span covers them all: it only sizes the search space.
    """
    import itertools
    import math

    var = [n for n, a in problem.axes.items() if a.kind == "var" and n in axes]
    spans = []
    for m in {s[0] for s in spec.shapes}:
        for r in range(1, min(3, len(var)) + 1):
            for names in itertools.combinations(var, r):
                here = math.prod(axes[n] for n in names)
                if here and m % here == 0:
                    ms = [m // here * math.prod(problem.resolve_axes(w)[n] for n in names) for w in problem.workloads]
                    spans.append((min(ms), max(ms)))
    if not spans:
        return None
    return min(lo for lo, _ in spans), max(hi for _, hi in spans)


def search_space(spec: KernelSpec, span: tuple[int, int] | None = None) -> list[str]:
    """Settings lines of a kernel's default search space: tiles whose M and N fit the largest M (over ``span``, the
    least and largest M over the workloads, else the captured shapes) and N (no 256-wide tile for N ≤ 128; a 64-row
    pingpong tile for small M), both sm90 schedules, clusters 1 and 2 along M when there are enough row tiles,
    stream-K where the output has few tiles; swap AB with 16/32-wide tiles and split-K where M can be decode-sized
    (≤ DECODE_ROWS); for f32 operands 3xTF32 tiles."""
    if spec.dtype == "f32":
        # An fp32 reference: TF32 (the sm90 default) is ~2000x its error and fails the grader's accuracy check;
        # 3xTF32 (SM80 mma.sync) is as accurate as fp32 and takes only its own tiles (arch/sm90_3xtf32.py: M, N in
        # 64/128/256 over 4 or 8 warps, K 16 or 32) and no sm90 schedule, cluster or scheduler.
        return ["math = 3xtf32", "tile = {128x128x32, 128x64x32, 64x128x32, 64x64x32}"]
    k = TILE_K[spec.dtype]
    m = max(s[0] for s in spec.shapes)
    if spec.grouped:  # one group per expert: the persistent group scheduler (sm90.grouped-scheduler), no split-K
        tiles = [f"128x128x{k}", f"64x128x{k}"] + ([f"128x256x{k}"] if max(s[1] for s in spec.shapes) > 128 else [])
        return [f"tile = {{{', '.join(tiles)}}}", "schedule = {cooperative, pingpong}"]
    if spec.scaled:  # blockwise FP8: tile K = the 128 K block, cooperative or pingpong (sm90.blockwise-*)
        tiles = [f"128x128x{k}", f"64x128x{k}"] + ([f"128x256x{k}"] if max(s[1] for s in spec.shapes) > 128 else [])
        return [f"tile = {{{', '.join(tiles)}}}", "schedule = {cooperative, pingpong}"]
    n = max(s[1] for s in spec.shapes)
    lo, hi = span if span is not None else (m, m)  # no span: sized by the captured M alone (no decode tiles)
    tiles = [f"128x128x{k}"]
    if n > 128 and spec.dtype != "f32":
        tiles.append(f"128x256x{k}")
    tiles.append(f"64x128x{k}")
    if n <= 64:
        tiles.append(f"128x64x{k}")
    # decode: 64-row tiles give N/64 CTAs, each streaming all of K; swapped, N fills 128-row tiles and the few
    # tokens a 16/32-wide side, split-K (stream-K scheduler, cooperative) cuts K over the SMs (issue 13, item 1)
    decode = span is not None and lo <= DECODE_ROWS and not spec.batched and spec.dtype in ("bf16", "f16") and n >= 128
    if decode:
        tiles += [f"128x16x{2 * k}", f"128x32x{2 * k}"]
    lines = [f"tile = {{{', '.join(tiles)}}}", "schedule = {cooperative, pingpong}"]
    if max(hi, m) >= 256 and not spec.batched:
        lines.append("cluster = {1x1x1, 2x1x1}")
    tiles_out = ((lo + 127) // 128) * ((n + 127) // 128)
    if tiles_out < 132:  # fewer output tiles than an H200 has SMs: split the K loop too
        lines.append("scheduler = {persistent, stream_k}")
    if decode:
        lines += ["split_k = {1, 2, 4, 8}", "swap_ab = {false, true}"]
    return lines


def kernel_text(spec: KernelSpec, bindings: dict[str, str] | None = None,
                span: tuple[int, int] | None = None) -> str:
    """One ``kernel NAME : gemm { … }`` block; ``bindings`` (operand → ``<- x`` / ``-> y``) binds it directly;
    ``span``: M's least and largest over the workloads (:func:`m_span`)."""
    bindings = bindings or {}
    if spec.grouped:
        return grouped_kernel_text(spec)
    if spec.conv:
        return conv_kernel_text(spec)
    lead = "B, " if spec.batched else ""
    bdims = "N, K" if spec.b_nk else "K, N"
    body = [f"a : {spec.dtype}[{lead}M, K] row{bindings.get('a', '')}",
            f"b : {spec.dtype}[{lead}{bdims}] row{bindings.get('b', '')}",
            f"d : {spec.out}[{lead}M, N] row{bindings.get('d', '')}"]
    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k in dict.fromkeys(spec.shapes))
    lines = [f"# M x N x K at the captured workload: {shapes}", f"kernel {spec.name} : gemm {{",
             "  " + "   ".join(body)]
    if spec.scaled:  # a 1x128 block scale per row of a, a 128x128 block scale of b (docs/DSL.md, FP8)
        lines.append("  scale_a : f32[M, K/128] row   scale_b : f32[N/128, K/128] row")
    lines += ["  " + line for line in search_space(spec, span)]
    if spec.residual == "bias":  # the reference's mm + b, b : [N]: the product rounded to d's type, then the add
        lines.append(f"  epilogue {{ bias : {spec.out}[N]   d = cast(acc, {spec.out}) + bias }}")
    elif spec.residual:  # the reference's (mm [+ bias]) + r (or * r): rounded to d's type first, as the reference
        acc = "acc + bias" if spec.bias else "acc"
        lines.insert(3, f"  c : {spec.out}[{lead}M, N] row")
        lines.append(f"  epilogue {{ {f'bias : {spec.out}[N]   ' if spec.bias else ''}d = cast({acc}, {spec.out}) "
                     f"{spec.residual} c }}")
    elif spec.activation:  # the reference's act(mm [+ bias]), the product rounded to d's type first
        acc = "acc + bias" if spec.bias else "acc"
        lines.append(f"  epilogue {{ {f'bias : {spec.out}[N]   ' if spec.bias else ''}"
                     f"d = cast({spec.activation}(cast({acc}, {spec.out})), {spec.out}) }}")
    elif spec.bias:
        dt = spec.out
        lines.append(f"  epilogue {{ bias : {dt}[{lead}N]   d = acc + bias }}" if not spec.batched else
                     f"  epilogue {{ bias : {dt}[N]   d = acc + bias }}")
    lines.append("}")
    return "\n".join(lines)


def grouped_kernel_text(spec: KernelSpec) -> str:
    """One ``kernel NAME : grouped_gemm { … }`` block: an expert loop's matmul over the pairs sorted by expert."""
    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k in dict.fromkeys(spec.shapes))
    lines = [f"# pairs x N x K at the captured workload: {shapes} (rows sorted by expert, one group per expert)",
             f"kernel {spec.name} : grouped_gemm {{",
             f"  a : {spec.dtype}[M, K] row   b : {spec.dtype}[G, N, K] row   d : {spec.out}[M, N] row"
             "   m_sizes : i32[G]"]
    lines += ["  " + line for line in search_space(spec)]
    if spec.epilogue:
        lines.append(f"  epilogue {{ {spec.epilogue} }}")
    lines.append("}")
    return "\n".join(lines)


def direct_program(part: Partition, problem, axes: dict[str, int] | None = None) -> str | None:
    """The one-kernel program with bindings, when the partition is one kernel call on the problem's tensors that
    returns the problem's only output (else None). Its space spans M over the workloads (``axes``: the captured
    workload's, for :func:`m_span`): ``tune`` serves ranges of M with a dispatch of several kernels, so decode
    tiles join where M can be small (a pipeline's kernel serves every M with one configuration: not there)."""
    calls = [s for s in part.steps if s.kind == "kernel"]
    if len(part.steps) != 1 or len(calls) != 1 or len(part.returns) != 1 or len(problem.outputs) != 1:
        return None
    step = calls[0]
    if part.returns[0] != step.target or part.kernels[0].bias:
        return None
    args = step.expr[step.expr.index("(") + 1:-1].split(", ")
    if len(args) != 2 or not all(a in problem.inputs for a in args):
        return None
    out = next(iter(problem.outputs))
    spec = part.kernels[0]
    span = m_span(spec, problem, axes) if axes else None
    text = kernel_text(spec, {"a": f" <- {args[0]}", "b": f" <- {args[1]}", "d": f" -> {out}"}, span) + "\n"
    if span and "swap_ab" in text:  # say why the decode choices are there (a new user asked)
        text = (f"# M runs from {span[0]} to {span[1]} over the workloads. For M <= {DECODE_ROWS} (decode), "
                "swap_ab = true puts N on the tile's 128 rows\n# and the tokens on its 16/32-wide side, and split_k (stream_k only) "
                "cuts K over the SMs; `ucutlass tune` keeps one\n# kernel per range of M (a dispatch). The rules set "
                "aside the combinations CUTLASS cannot build.\n") + text
    return text


def program_text(part: Partition, problem, reference_lines: list[str], captured: str = "",
                 axes: dict[str, int] | None = None) -> str:
    """The `.ucut` text of a partition: a header, the kernels, the pipeline (or one directly bound kernel).
    ``captured``: the workload the graph was captured at (its var axes, ``"batch=2, seq=128"``), named in the header
    so that the shapes in the kernels' comments can be read; ``axes``: that workload's axes by name."""
    n_kernel = sum(1 for s in part.steps if s.kind == "kernel")
    n_torch = sum(1 for s in part.steps if s.kind == "torch")
    share = part.kernel_flops / part.total_flops if part.total_flops else 0.0
    head = [f"# Written by `ucutlass init {problem.id}` from the reference's aten graph (make_fx, fake tensors).",
            f"# {n_kernel} kernel call(s), {n_torch} torch step(s); "
            f"{share:.0%} of the reference's matmul FLOPs run in kernels."]
    if captured:
        head.append(f"# Captured at the workload {captured} (the smallest whose var axes are all >= 2; init's check "
                    "grades the smallest): the shapes in the comments are that workload's.")
    direct = direct_program(part, problem, axes)
    if direct is not None:
        return "\n".join(head) + "\n" + direct
    body = [kernel_text(k) for k in part.kernels]
    pipe = [f"pipeline {_ident(problem.id)} {{"]
    last, note = None, ""
    for step in part.steps:
        if step.note and step.note != note:
            pipe += [f"  # {text}" for text in _wrapped(step.note, 110)]
        note = step.note
        line = f"  {step.target} = {step.expr}"
        if step.line is not None and step.line != last and 0 < step.line <= len(reference_lines):
            line += f"   # line {step.line}: {_clip(reference_lines[step.line - 1].strip(), 80)}"
        last = step.line
        pipe.append(line)
    pipe.append(f"  return {', '.join(part.returns)}")
    pipe.append("}")
    return "\n".join(head + body + pipe) + "\n"


def _ident(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text)
    return out if not out[0].isdigit() else "p_" + out


def _clip(text: str, width: int) -> str:
    """``text`` cut at a word boundary within ``width`` characters, with "…" when cut."""
    if len(text) <= width:
        return text
    cut = text[:width].rsplit(" ", 1)[0]
    return (cut if len(cut) > width // 2 else text[:width]) + " …"


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]
