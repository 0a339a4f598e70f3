#!/usr/bin/env bash
# Device call 2 (2026-12-04, a new session: call 1's outputs were lost): the grader's GPU tests (cores 0-3) while the
# conv programs' kernels build (cores 4-15); each conv stage of L2_015 / L2_055 alone against cuDNN and fp64; then
# L2_015 / L2_055 / L2_078 graded on every workload with the compiled pipelines (issue 21), by full problem id.
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-verify
cd /tmp
taskset -c 4-15 timeout 330 python3 "$D/prebuild_conv_programs.py" "$REPO" 12 > "$OUT/prebuild.log" 2>&1 &
pb=$!
taskset -c 0-3 timeout 220 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/grader" "$REPO/tests/adversarial" > "$OUT/pytest_grader.log" 2>&1
echo "grader: $(tail -1 "$OUT/pytest_grader.log") at $(el) s" | tee "$OUT/summary.txt"
wait $pb; echo "prebuild: $(tail -1 "$OUT/prebuild.log") at $(el) s" | tee -a "$OUT/summary.txt"
timeout 60 python3 "$D/diag_conv_stages.py" "$REPO" L2_015_audio_sinusoidal_position_embedding_with_conv_projection pipeline_conv_audio_downsample.ucut 2 > "$OUT/diag.txt" 2>&1
timeout 40 python3 "$D/diag_conv_stages.py" "$REPO" L2_055_audio_encoder_conv_positional_layer_stack pipeline_conv_audio_encoder.ucut 1 >> "$OUT/diag.txt" 2>&1
echo "diag at $(el) s" | tee -a "$OUT/summary.txt"
for pair in pipeline_conv_audio_downsample:L2_015_audio_sinusoidal_position_embedding_with_conv_projection pipeline_conv_audio_encoder:L2_055_audio_encoder_conv_positional_layer_stack pipeline_conv_resblock_final:L2_078_fused_final_layer_upsample_with_adaptive_norm; do
  ex=${pair%%:*}; pid=${pair##*:}
  left=$(( 590 - $(el) )); [ $left -lt 30 ] && break
  timeout $left ucutlass grade "$REPO/examples/$ex.ucut" "$pid" -o "$OUT/grade_$pid.json" > "$OUT/grade_$pid.txt" 2>&1
  echo "grade $pid rc $? at $(el) s" | tee -a "$OUT/summary.txt"
done
cat "$OUT/diag.txt" | cut -c1-400 | head -60
for f in "$OUT"/grade_*.txt; do tail -22 "$f"; done
grep -E "^(FAILED|ERROR)|^E " "$OUT/pytest_grader.log" | head -30
grep FAIL "$OUT/prebuild.log" | head -5
