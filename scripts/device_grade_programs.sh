#!/usr/bin/env bash
# Device call: compiled `.ucut` programs graded on every workload of their problems against torch, in one call.
# All kernels are built first in one parallel nvcc round (scripts/prebuild_programs.py), then each program is graded
# with an equal share of the time left (a grade cut by its SIGINT keeps the workloads it graded). Issue 16 item 6 and
# issue 20 item 2 (the fp32 examples) by default; or give FILE:PROBLEM pairs (FILE:PROBLEM@I,J: those workloads only).
# Outputs under $OUT: grades.tgz (grades/grade_<file stem>.json, the grader's records, and .txt, its table: one archive,
# since the device tool returns at most 8 files), prebuild.log, summary.md (per program: workloads passed, geomean
# speedup over torch, the grade's exit status).
# Knobs: BUDGET (seconds for the whole call after set-up, default 540), BUILD (of which for nvcc, default 240),
# JOBS (nvcc processes, default the cores), BUILD_ALL=1 (build the default list, grade the programs given: a first call
# of two on one warm machine), GRADES_ONLY=1 (skip the build: the kernel cache is carried in .kcache).
# Before the call: the problems in .device/problems (copied from ../shared/sol-execbench); carry .whl, .device and,
# from an earlier call on the same warm machine, .kcache stays there when /.kcache/ is in .git/info/exclude.  Usage: bash scripts/device_grade_programs.sh [FILE:PROBLEM ...]
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache UCUTLASS_TEST_KERNEL_CACHE=$REPO/.kcache/tests
cd /tmp  # `ucutlass` from the install, not the checkout
EX=$REPO/examples
defaults=(
  $EX/pipeline_o_proj_residual.ucut:L1_030_attention_output_projection_with_residual
  $EX/pipeline_gate_up_gelu.ucut:L1_048_fused_gate_up_projection_with_swiglu
  $EX/pipeline_qkv_heads.ucut:L1_050_attention_qkv_projection_with_bias_and_reshape
  $EX/pipeline_score_value.ucut:L1_083_attention_score_value_matmul
  $EX/pipeline_residual_rms_mlp.ucut:L2_004_fused_residual_rms_mlp
  $EX/pipeline_swiglu_backward.ucut:L2_005_swiglu_mlp_backward
  $EX/pipeline_gqa_rope_qk_norm.ucut:L2_027_grouped_query_attention_with_yarn_rope_and_qk_norm
  $EX/pipeline_decoder_layer.ucut:L2_062_decoder_complete_layer
  $EX/pipeline_fp8_o_proj.ucut:Quant_001_fp8_attention_output_projection
  $EX/pipeline_fp8_shared_expert.ucut:Quant_017_fp8_shared_expert_mlp
  $EX/pipeline_moe_experts.ucut:L1_044_moe_expert_computation
  $EX/pipeline_fp32_flux_ffn.ucut:L1_037_flux_feedforward_gelu_approximate
  $EX/pipeline_fp32_qkv_norm.ucut:L1_054_audio_attention_qkv_projection_with_normalization
  $EX/pipeline_fp32_concat_split.ucut:L2_030_flux_concatenated_sequence_processing_with_split
)
items=("$@")
[ ${#items[@]} -eq 0 ] && items=("${defaults[@]}")
items=("${items[@]/#examples\//$EX/}")  # examples/X.ucut given from the repo root: the grades run from /tmp
build=("${items[@]%@*}")  # FILE:PROBLEM@0,3 grades only workloads 0 and 3 (as `ucutlass problems` numbers them)
[ -n "${BUILD_ALL:-}" ] && build=("${defaults[@]}")  # build every default program, grade only those given
BUDGET=${BUDGET:-540}
if [ -z "${GRADES_ONLY:-}" ]; then
  timeout "${BUILD:-240}" python3 "$REPO/scripts/prebuild_programs.py" --jobs "${JOBS:-$(nproc)}" "${build[@]}" \
    > "$OUT/prebuild.log" 2>&1
  echo "prebuild rc $? at $(el) s: $(tail -1 "$OUT/prebuild.log")"
fi
G=/tmp/grades; mkdir -p $G
printf '| program | problem | passed | geomean speedup vs torch | exit |\n|---|---|---|---|---|\n' > "$OUT/summary.md"
n=${#items[@]}
for item in "${items[@]}"; do
  spec=${item%@*}; file=${spec%:*}; pid=${spec##*:}; stem=$(basename "$file" .ucut)
  pick=(); if [[ $item == *@* ]]; then IFS=, read -ra ws <<< "${item##*@}"; for w in "${ws[@]}"; do pick+=(--workload "$w"); done; fi
  left=$(( BUDGET - $(el) )); share=$(( left / n )); n=$(( n - 1 ))
  if [ "$share" -lt 15 ]; then echo "| $stem | $pid | not graded (no time left) | | |" >> "$OUT/summary.md"; continue; fi
  timeout -k 15 -s INT "$share" ucutlass grade "$file" "$pid" "${pick[@]}" -o "$G/grade_$stem.json" > "$G/grade_$stem.txt" 2>&1
  rc=$?
  python3 - "$G/grade_$stem.json" "$stem" "$pid" "$rc" >> "$OUT/summary.md" <<'PY'
import json, math, sys
path, stem, pid, rc = sys.argv[1:]
try:
    recs = json.load(open(path))
except (OSError, ValueError):
    recs = []
ev = [r.get("evaluation") or {} for r in recs]
ok = [e for e in ev if e.get("status") == "PASSED"]
sp = [e["performance"]["speedup_factor"] for e in ok if (e.get("performance") or {}).get("speedup_factor")]
geo = f"{math.exp(sum(map(math.log, sp)) / len(sp)):.3f}x" if sp else "-"
print(f"| {stem} | {pid} | {len(ok)} / {len(recs)} | {geo} | {rc} |")
PY
  echo "grade $pid rc $rc (budget $share s) at $(el) s"
  tar czf "$OUT/grades.tgz" -C /tmp grades  # after each grade: a call cut by its limit keeps what was graded
done
cat "$OUT/summary.md"
