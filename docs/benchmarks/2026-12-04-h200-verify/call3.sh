#!/usr/bin/env bash
# Device call 3 (2026-12-04): after the grader's changes (a tolerance the reference itself misses judged against the
# ground truth; cached GPU memory given back between workloads and before a reference that ran out of memory runs
# again; one set of pipeline buffers per kernel call): the conv programs' kernels built (12 cores) beside the grader's
# GPU module, then L2_015 and L2_055 graded on every workload.
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-verify
cd /tmp
taskset -c 4-15 timeout 300 python3 "$D/prebuild_conv_programs.py" "$REPO" 12 > "$OUT/prebuild.log" 2>&1 &
pb=$!
taskset -c 0-3 timeout 200 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/grader/test_grader_gpu.py" > "$OUT/pytest_grader_gpu.log" 2>&1
echo "grader gpu: $(tail -1 "$OUT/pytest_grader_gpu.log") at $(el) s"
wait $pb; echo "prebuild: $(tail -1 "$OUT/prebuild.log") at $(el) s"
for pair in pipeline_conv_audio_downsample:L2_015_audio_sinusoidal_position_embedding_with_conv_projection pipeline_conv_audio_encoder:L2_055_audio_encoder_conv_positional_layer_stack; do
  ex=${pair%%:*}; pid=${pair##*:}
  left=$(( 590 - $(el) )); [ $left -lt 30 ] && break
  timeout $left ucutlass grade "$REPO/examples/$ex.ucut" "$pid" -o "$OUT/grade_$pid.json" > "$OUT/grade_$pid.txt" 2>&1
  echo "grade $pid rc $? at $(el) s"
done
for f in "$OUT"/grade_*.txt; do sed -n '/^workload/,$p' "$f" | cut -c1-300; tail -3 "$f" | cut -c1-600; done
grep -E "^(FAILED|ERROR)|^E " "$OUT/pytest_grader_gpu.log" | head -30
grep FAIL "$OUT/prebuild.log" | head -5
