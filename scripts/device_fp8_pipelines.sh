#!/usr/bin/env bash
# Device call (issue 16, item 6): the FP8 pipeline examples (e4m3 quantisation as torch steps, blockwise-scaled sm90
# FP8 GEMMs) compiled and graded on every workload of SOL-ExecBench's Quant_001 and Quant_017 on the H200, then their
# compiled-grade tests. Outputs under $OUT: grade_<example>.txt and .json (the grader's records), pytest_fp8.log,
# summary.txt.
# Before the call: copy ../shared/sol-execbench/Quant_{001,017}_* into .device/problems (ignored; carry .device and
# .whl, as for the other device scripts).
# Usage: bash scripts/device_fp8_pipelines.sh
set -uo pipefail
. scripts/device_setup.sh || exit 1
cd /tmp  # not the repo root: `ucutlass` must come from the install
: > "$OUT/summary.txt"
for pair in "pipeline_fp8_o_proj Quant_001_fp8_attention_output_projection" \
            "pipeline_fp8_shared_expert Quant_017_fp8_shared_expert_mlp"; do
  set -- $pair
  timeout "${GRADE_TIMEOUT:-900}" ucutlass grade "$REPO/examples/$1.ucut" "$2" -o "$OUT/grade_$1.json" \
    > "$OUT/grade_$1.txt" 2>&1
  echo "$1 ($2): exit $? $(tail -1 "$OUT/grade_$1.txt")" | tee -a "$OUT/summary.txt"
done
UCUTLASS_SOL_EXECBENCH="$REPO/.device/problems" timeout "${TEST_TIMEOUT:-600}" pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_pipeline_programs.py" \
  -k "fp8" > "$OUT/pytest_fp8.log" 2>&1
echo "test_pipeline_programs -k fp8: $(tail -1 "$OUT/pytest_fp8.log")" | tee -a "$OUT/summary.txt"
