"""What ``init`` writes, as data (issue 17): kernels to declare, pipeline steps, the partition they make, and the
dtype spellings. :mod:`.partition` fills them from a graph; :mod:`.experts` and :mod:`.fp8` add their own steps;
:mod:`.emit` writes them as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: torch dtype name → `.ucut` dtype spelling, and → the pipeline's constant.
UCUT_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float8_e4m3fn": "f8e4m3",
               "float8_e5m2": "f8e5m2"}
TORCH_CONSTANTS = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32",
                   "int32": "torch.int32", "int64": "torch.int64", "bool": "torch.bool",
                   "float8_e4m3fn": "torch.float8_e4m3fn", "float8_e5m2": "torch.float8_e5m2"}


@dataclass
class KernelSpec:
    """One gemm kernel the program declares.

    Attributes:
        name: its name in the file; ``batched``: operands carry a batch dim ``B`` (``bmm``).
        dtype: a and b element type (`.ucut` spelling); ``out``: d's; ``b_nk``: b declared ``[N, K]`` (a Linear
            weight), else ``[K, N]``; ``bias``: an ``[N]`` bias in the epilogue (``addmm``); ``scaled``: FP8 a and
            b with blockwise scales ``scale_a : f32[M, K/128]``, ``scale_b : f32[N/128, K/128]`` (:mod:`.fp8`).
        residual: ``+`` or ``*``: the product rounded to ``out``, then added to / multiplied by an epilogue ``c``
            of d's shape (``d = cast(acc, T) + c``); ``bias``: a vector of N added to the product rounded to
            ``out`` (``d = cast(acc, T) + bias``: a bias added after a plain ``mm``); "" for none.
        activation: an epilogue activation of the (biased) product rounded to ``out`` (:mod:`.epilogues`).
        conv: a ``conv`` kernel's (spatial rank, stride, padding, dilation) (:mod:`.convs`); () for a gemm.
        shapes: (M, N, K) at the captured workload (sizes the search space); ``flops``: 2·M·N·K·batch per call.
    """

    name: str
    batched: bool
    dtype: str
    out: str
    b_nk: bool
    bias: bool = False
    shapes: list = field(default_factory=list)
    scaled: bool = False
    grouped: bool = False
    epilogue: str = ""
    residual: str = ""
    activation: str = ""
    conv: tuple = ()

    def key(self) -> tuple:
        return (self.batched, self.dtype, self.out, self.b_nk, self.bias, self.scaled, self.grouped, self.epilogue,
                self.residual, self.activation, self.conv)


@dataclass
class Step:
    """One pipeline step: ``target = expr`` (kind ``kernel``, ``torch`` or ``view``); ``line``: the reference's
    line it comes from (None: unknown); ``note``: what the steps carrying it do together (a comment above the
    first), e.g. a loop init rewrote (:mod:`.segment_loops`)."""

    target: str
    expr: str
    kind: str
    line: int | None = None
    note: str = ""


@dataclass
class Partition:
    """The steps, the kernels, the outputs returned, and the matmul/attention FLOPs inside kernels and in all."""

    steps: list[Step]
    kernels: list[KernelSpec]
    returns: list[str]
    kernel_flops: int = 0
    total_flops: int = 0


def dtype_name(dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16``."""
    return str(dtype).replace("torch.", "")


def node_val(node):
    """The fake tensor (or value) a graph node held when captured (``meta["val"]``), or None."""
    return node.meta.get("val") if hasattr(node, "meta") else None


def ref_note(node) -> str:
    """What a node's group of steps does, where a rewrite tagged it (``node.meta["custom"]["note"]``), or ""."""
    return str((node.meta.get("custom") or {}).get("note") or "")


def ref_line(node, problem_id: str) -> int | None:
    """The reference line a node was made on (tagged by :func:`~.capture.capture`), or None."""
    line = (node.meta.get("custom") or {}).get("ref_line")
    return int(line) if line else None


def packet(node) -> str:
    """The aten op's name of a graph node (``mm`` for ``aten.mm.default``; ``getitem`` for ``operator.getitem``), or
    "" for a node that calls nothing (a placeholder, a constant)."""
    if getattr(node, "op", None) != "call_function":
        return ""
    target = node.target
    return getattr(getattr(target, "overloadpacket", None), "__name__", getattr(target, "__name__", str(target)))
