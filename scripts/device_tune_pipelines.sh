#!/usr/bin/env bash
# Device call: `ucutlass tune` on pipeline examples (issue 16 item 4: one Optuna study per kernel, in one study.db,
# round-robin, the whole pipeline graded per trial; best.ucut, results.json and table.txt with the per-step table).
# The shipped examples are concrete, so each is copied with its kernels' tile (and schedule) left open first.
# Each problem's output folder comes back as $OUT/PROBLEM.tgz and its console log as $OUT/PROBLEM.log.
# Needs the problems in .device/problems (copied from ../shared/sol-execbench, carried) or $UCUTLASS_PROBLEMS.
# Knobs: TRIALS (per kernel, default 4), TIME_LIMIT (default 240 s), MAX_WORKLOADS (default 3), JOBS,
# TUNE_TIMEOUT (default 540 s per problem), PREBUILD="PROBLEM ..." (no-spec problems whose init programs' every legal
# kernel is built first in one parallel nvcc round, scripts/prebuild_programs.py --all: several problems share a round
# instead of one round each; the machine keeps the cache while it stays warm, so a next call may list them too),
# SKIP_AFTER (seconds: no tune starts once the call has run this long; default: none).
# A trial builds the pipeline's kernels (nvcc, 1-3 min each when not cached) and grades the whole pipeline, so one
# problem can take up to TUNE_TIMEOUT: on the device tool (10 minutes a call) give one problem per call.
# A PROBLEM with no :SPEC is tuned as a user with no spec runs it: `ucutlass tune PROBLEM` on the program `init` writes
# from the reference (issue 17's "tune with no spec"; the MoE problems' grouped GEMMs: ucutlass/init/experts.py).
# Usage: bash scripts/device_tune_pipelines.sh            (the three below, one after the other)
#        bash scripts/device_tune_pipelines.sh L1_050_attention_qkv_projection_with_bias_and_reshape:examples/pipeline_qkv_heads.ucut
#        bash scripts/device_tune_pipelines.sh L2_024_moe_expert_parallel_execution            (no spec: init's program)
set -uo pipefail
. scripts/device_setup.sh || exit 1
items=("$@")
[ ${#items[@]} -eq 0 ] && items=(
  L1_050_attention_qkv_projection_with_bias_and_reshape:examples/pipeline_qkv_heads.ucut
  L1_048_fused_gate_up_projection_with_swiglu:examples/pipeline_gate_up_gelu.ucut
  L1_030_attention_output_projection_with_residual:examples/pipeline_o_proj_residual.ucut
)
mkdir -p /tmp/tune /tmp/specs
start=$(date +%s)
if [ -n "${PREBUILD:-}" ]; then
  pre=(); for p in $PREBUILD; do pre+=(":$p"); done
  timeout "${BUILD:-300}" python3 "$REPO/scripts/prebuild_programs.py" --all --jobs "${JOBS:-$(nproc)}" "${pre[@]}" \
    > "$OUT/prebuild.log" 2>&1
  echo "prebuild rc $? at $(( $(date +%s) - start )) s: $(tail -1 "$OUT/prebuild.log")"
fi
for item in "${items[@]}"; do
  if [ -n "${SKIP_AFTER:-}" ] && [ $(( $(date +%s) - start )) -ge "$SKIP_AFTER" ]; then
    echo "== skipped $item: the call has run $(( $(date +%s) - start )) s (SKIP_AFTER=$SKIP_AFTER)"; continue
  fi
  problem=${item%%:*}; spec=${item#*:}
  args=(--out "/tmp/tune/$problem" --jobs "${JOBS:-16}" --trials "${TRIALS:-4}"
        --time-limit "${TIME_LIMIT:-240}" --max-workloads "${MAX_WORKLOADS:-3}")
  if [ "$spec" != "$item" ]; then
    open=/tmp/specs/$(basename "$spec")
    sed -e 's/tile = 128x128x64   schedule = cooperative/tile = {128x128x64, 128x256x64, 256x128x64}   schedule = cooperative/' \
        -e 's/tile = 128x256x64   cluster = 2x1x1/tile = {128x128x64, 128x256x64}   cluster = {1x1x1, 2x1x1}/' \
        "$REPO/$spec" > "$open"
    args=(--spec "$open" "${args[@]}")
    grep -n '{' "$open" | grep -v epilogue
  fi
  echo "== ucutlass tune $problem ${args[*]}"
  ( cd /tmp && PYTHONUNBUFFERED=1 timeout "${TUNE_TIMEOUT:-540}" ucutlass tune "$problem" "${args[@]}" ) \
    > "$OUT/$problem.log" 2>&1
  echo "exit $?"
  tail -40 "$OUT/$problem.log"
  tar czf "$OUT/$problem.tgz" -C /tmp/tune "$problem"
done
