#!/usr/bin/env bash
# Device call (issue 16 item 6): examples/pipeline_moe_experts.ucut (L1_044, DeepSeek-V3 MoE experts: three grouped
# GEMMs and the routing as torch steps) graded on the H200: emulated (kernels as torch ops on the GPU: its smallest
# workload needs about 23 GB of inputs, too much for a CPU runner), then compiled (three grouped kernels, nvcc 1-3 min
# each). Outputs under $OUT: check.txt, grade_emulated.txt/.json, grade.txt/.json, summary.txt. Its pytest cases:
# pytest -m gpu -k moe tests/test_pipeline_programs.py (the same two grades; a call of its own).
# Before the call: copy ../shared/sol-execbench/L1_044_* into .device/problems (ignored; carry .device and .whl, as
# for the other device scripts). Knobs: WORKLOADS (default 3; each workload's inputs are about 23 GB, the expert weights),
# GRADE_TIMEOUT (default 540 s each); TUNE=1 instead tunes the three kernels' tiles (64-row tiles too: a DeepSeek-V3
# expert sees about 64 of 2048·8 sorted rows; schedule auto: pingpong for 64, cooperative for 128) with `ucutlass
# tune` (TRIALS per kernel, default 3; MAX_WORKLOADS, default 2; TUNE_TIMEOUT, default 540 s) into $OUT/tune.tgz.
# Usage: bash scripts/device_moe.sh          (or TUNE=1 bash scripts/device_moe.sh, as a call of its own)
set -uo pipefail
. scripts/device_setup.sh || exit 1
cd /tmp  # not the repo root: `ucutlass` must come from the install
P=L1_044_moe_expert_computation
F="$REPO/examples/pipeline_moe_experts.ucut"
: > "$OUT/summary.txt"
if [ -n "${TUNE:-}" ]; then
  sed -e 's/tile = 128x128x64   schedule = cooperative/tile = {64x128x64, 128x128x64, 128x256x64}   schedule = auto/' \
    "$F" > /tmp/pipeline_moe_experts.ucut
  PYTHONUNBUFFERED=1 timeout "${TUNE_TIMEOUT:-540}" ucutlass tune "$P" --spec /tmp/pipeline_moe_experts.ucut \
    --out /tmp/tune/$P --jobs 16 --trials "${TRIALS:-3}" --max-workloads "${MAX_WORKLOADS:-2}" > "$OUT/tune.log" 2>&1
  echo "tune: exit $?" | tee -a "$OUT/summary.txt"; tail -40 "$OUT/tune.log"
  tar czf "$OUT/tune.tgz" -C /tmp/tune "$P"
  exit 0
fi
ucutlass check "$F" --problem "$P" > "$OUT/check.txt" 2>&1
echo "check: exit $? $(tail -1 "$OUT/check.txt")" | tee -a "$OUT/summary.txt"
timeout "${GRADE_TIMEOUT:-540}" ucutlass grade "$F" "$P" --emulate --workloads 1 -o "$OUT/grade_emulated.json" \
  > "$OUT/grade_emulated.txt" 2>&1
echo "grade --emulate: exit $? $(tail -1 "$OUT/grade_emulated.txt")" | tee -a "$OUT/summary.txt"
timeout "${GRADE_TIMEOUT:-540}" ucutlass grade "$F" "$P" --workloads "${WORKLOADS:-3}" -o "$OUT/grade.json" \
  > "$OUT/grade.txt" 2>&1
echo "grade: exit $? $(tail -1 "$OUT/grade.txt")" | tee -a "$OUT/summary.txt"
