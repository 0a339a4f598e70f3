#!/usr/bin/env bash
# Device call (issue 20, item 2): the fp32 examples (math = 3xtf32) compiled and graded on every workload of their
# SOL-ExecBench problems on the H200, then tests/test_fp32_math_gpu.py. Outputs under $OUT: grade_<example>.txt and
# .json (the grader's records, T_SOL and SOL scores), pytest_fp32.log, summary.txt.
# Before the call: copy ../shared/sol-execbench/{L1_037,L1_054,L2_030}_* into .device/problems (ignored; carry
# .device and .whl, as for the other device scripts).
# Usage: bash scripts/device_fp32.sh
set -uo pipefail
. scripts/device_setup.sh || exit 1
cd /tmp  # not the repo root: `ucutlass` must come from the install
: > "$OUT/summary.txt"
for pair in "pipeline_fp32_concat_split L2_030_flux_concatenated_sequence_processing_with_split" \
            "pipeline_fp32_qkv_norm L1_054_audio_attention_qkv_projection_with_normalization" \
            "pipeline_fp32_flux_ffn L1_037_flux_feedforward_gelu_approximate"; do
  set -- $pair
  timeout "${GRADE_TIMEOUT:-900}" ucutlass grade "$REPO/examples/$1.ucut" "$2" -o "$OUT/grade_$1.json" \
    > "$OUT/grade_$1.txt" 2>&1
  echo "$1 ($2): exit $? $(tail -1 "$OUT/grade_$1.txt")" | tee -a "$OUT/summary.txt"
done
timeout "${TEST_TIMEOUT:-600}" pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_fp32_math_gpu.py" \
  > "$OUT/pytest_fp32.log" 2>&1
echo "test_fp32_math_gpu: $(tail -1 "$OUT/pytest_fp32.log")" | tee -a "$OUT/summary.txt"
