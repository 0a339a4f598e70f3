"""Every C++ spelling the renders use, beside the IR's identities (STYLE.md: identity apart from rendering):
element types, layouts, kernel and epilogue schedules, tile schedulers, EVT functors, the grouped kernels' policies."""

from __future__ import annotations

from .. import ir
from ..ir import DType, IndexType, Schedule, Target, TileScheduler

# C++ spellings beside the IR's identities (STYLE.md: identity apart from rendering).
CPP_ELEMENT = {DType.bf16: "cutlass::bfloat16_t", DType.f16: "cutlass::half_t", DType.f32: "float",
               DType.f8e4m3: "cutlass::float_e4m3_t", DType.f8e5m2: "cutlass::float_e5m2_t",
               DType.e2m1: "cutlass::float_e2m1_t", DType.ue8m0: "cutlass::float_ue8m0_t",
               DType.ue4m3: "cutlass::float_ue4m3_t"}
CPP_LAYOUT = {"row": "cutlass::layout::RowMajor", "col": "cutlass::layout::ColumnMajor"}
CPP_KERNEL_SCHEDULE = {
    Schedule.cooperative: "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
    Schedule.warpspecialized: "cutlass::gemm::KernelTmaWarpSpecialized",
    Schedule.warpspecialized_1sm: "cutlass::gemm::KernelTmaWarpSpecialized1SmSm100",
    Schedule.warpspecialized_2sm: "cutlass::gemm::KernelTmaWarpSpecialized2SmSm100",
    Schedule.cooperative_fp8_fastaccum: "cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum",
    Schedule.pingpong_fp8_fastaccum: "cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum",
    Schedule.warpspecialized_fp8_fastaccum: "cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccum",
}
# On SM90, EpilogueScheduleAuto picks NoSmemWarpSpecialized, which rejects any EVT: name a TMA one. On SM100
# the TMA epilogue must match the MMA's 1SM/2SM (sm100_builder.inl:1145-1147 "unsupported schedule").
CPP_EPILOGUE_SCHEDULE = {
    Schedule.cooperative: "cutlass::epilogue::TmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::epilogue::TmaWarpSpecialized",
    Schedule.warpspecialized: "cutlass::epilogue::TmaWarpSpecialized",
    Schedule.warpspecialized_1sm: "cutlass::epilogue::TmaWarpSpecialized1Sm",
    Schedule.warpspecialized_2sm: "cutlass::epilogue::TmaWarpSpecialized2Sm",
}
# a or b aligned below 16 bytes: TMA cannot load them; CUTLASS's cp.async mainloops take the same schedules.
CPP_CP_ASYNC_KERNEL_SCHEDULE = {
    Schedule.cooperative: "cutlass::gemm::KernelCpAsyncWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::gemm::KernelCpAsyncWarpSpecializedPingpong",
    Schedule.warpspecialized: "cutlass::gemm::KernelCpAsyncWarpSpecialized",
}
# c or d aligned below 16 bytes: TMA cannot store them; the no-smem epilogue runs fusion::LinearCombination.
CPP_NO_SMEM_EPILOGUE_SCHEDULE = "cutlass::epilogue::NoSmemWarpSpecialized"
CPP_EPILOGUE_SCHEDULE.update({s: CPP_EPILOGUE_SCHEDULE[s.base] for s in Schedule if s.fp8_fastaccum})
# Blockwise-scaled FP8 on sm90 (CUTLASS example 67; the builder's blockwise path, sm90_gmma_builder.inl:1066-1170).
CPP_BLOCKWISE_KERNEL_SCHEDULE = {
    Schedule.cooperative: "cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum",
    Schedule.pingpong: "cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum",
}
# Block-scaled tcgen05 on sm100 (CUTLASS example 72): the input pair type of each format.
# The tensor-core op class of the mainloop, and the block-scaled tcgen05 kernel schedule of sm100 (1Sm/2Sm, the
# format's suffix: sm100_blockscaled_umma_builder.inl).
CPP_OP_CLASS = {"tensor": "cutlass::arch::OpClassTensorOp", "block_scaled": "cutlass::arch::OpClassBlockScaledTensorOp"}
CPP_BLOCK_SCALED_KERNEL_SCHEDULE = "cutlass::gemm::KernelTmaWarpSpecialized{sms}{suffix}Sm100"
# A batched kernel's b without batch dims (one b for every batch): a stride whose batch mode is a static 0 (cute leaves
# it out of the TMA descriptor), by b's contiguous mode.
CPP_SHARED_B_STRIDE = {"K": "cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>",
                       "N": "cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>"}
# Attention's softmax scale when none is written: 1/sqrt(D).
CPP_DEFAULT_SOFTMAX_SCALE = "(1.0f / std::sqrt(float({head_dim})))"
CPP_BLOCK_SCALED_PAIR = {"nvfp4": "cutlass::nv_float4_t", "mxfp8": "cutlass::mx_float8_t"}
CPP_TILE_SCHEDULER = {
    TileScheduler.persistent: "cutlass::gemm::PersistentScheduler",
    TileScheduler.stream_k: "cutlass::gemm::StreamKScheduler",
}
CPP_UNARY = {
    "relu": "cutlass::epilogue::thread::ReLu",
    "gelu": "cutlass::epilogue::thread::GELU",  # erf form, = torch gelu(approximate="none")
    "gelu_tanh": "cutlass::epilogue::thread::GELU_taylor",  # tanh form, = torch gelu(approximate="tanh")
    "silu": "cutlass::epilogue::thread::SiLu",
    "sigmoid": "cutlass::epilogue::thread::Sigmoid",
    "tanh": "cutlass::epilogue::thread::Tanh",
}
CPP_BINARY = {"+": "cutlass::plus", "-": "cutlass::minus", "*": "cutlass::multiplies"}
IDENTITY = "cutlass::epilogue::thread::Identity"
# Reductions (Sm90ColReduction / Sm90RowReduction): the functor used in registers, across lanes and across CTAs
# (non-atomic, FinalReduction: the last CTA of a row of tiles reduces the others' partials from the workspace,
# so the output needs no initialisation), and the identity each starts from. UcutMaximum is declared in the
# template: cutlass::maximum has a second (NaN) parameter, and the nodes take a one-parameter template.
CPP_REDUCE = {"sum": ("cutlass::plus", "ElementCompute(0)"),
              "max": ("UcutMaximum", "-cutlass::platform::numeric_limits<ElementCompute>::infinity()")}

#: CUTLASS's ptr-array kernel and epilogue schedules (``cutlass/gemm/dispatch_policy.hpp``,
#: ``cutlass/epilogue/dispatch_policy.hpp``), by resolved schedule.
CPP_GROUPED_KERNEL_SCHEDULE = {
    Schedule.cooperative: "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong",
    Schedule.warpspecialized_1sm: "cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmSm100",
    Schedule.warpspecialized_2sm: "cutlass::gemm::KernelPtrArrayTmaWarpSpecialized2SmSm100",
}
CPP_GROUPED_EPILOGUE_SCHEDULE = {
    Schedule.cooperative: "cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative",
    Schedule.pingpong: "cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong",
    Schedule.warpspecialized_1sm: "cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm",
    Schedule.warpspecialized_2sm: "cutlass::epilogue::PtrArrayTmaWarpSpecialized2Sm",
}
#: Per target: the CUTLASS arch tag, a name for comments and the CUTLASS example the template follows.
CPP_GROUPED_ARCH = {
    ir.Target.sm90: ("cutlass::arch::Sm90", "SM90", "examples/57_hopper_grouped_gemm"),
    ir.Target.sm100: ("cutlass::arch::Sm100", "SM100", "examples/75_blackwell_grouped_gemm"),
}
CPP_INDEX = {IndexType.i32: "int32_t", IndexType.i64: "int64_t"}

#: Conv activation/output layout tags by number of spatial dims (channels last; CUTLASS's conv layouts).
CPP_CONV_LAYOUT = {1: "cutlass::layout::TensorNWC", 2: "cutlass::layout::TensorNHWC", 3: "cutlass::layout::TensorNDHWC"}
#: The conv kernel schedules (cutlass/conv/dispatch_policy.hpp; SM90: non-persistent only); the epilogue's are the
#: GEMM's (:data:`CPP_EPILOGUE_SCHEDULE`).
CPP_CONV_KERNEL_SCHEDULE = {Schedule.warpspecialized: "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90",
                            Schedule.warpspecialized_1sm: "cutlass::conv::KernelImplicitTmaWarpSpecialized1SmSm100",
                            Schedule.warpspecialized_2sm: "cutlass::conv::KernelImplicitTmaWarpSpecialized2SmSm100"}
#: The ArchTag of each target.
CPP_ARCH = {Target.sm90: "cutlass::arch::Sm90", Target.sm100: "cutlass::arch::Sm100"}
