#!/usr/bin/env bash
# Device call 4 (2026-12-04): compiled pipelines as CUDA graphs and the pipeline tuner (their GPU tests, 4 cores) beside
# the conv programs' build (12 cores); then L2_015 and L2_055 graded on every workload with the grader's and the
# runtime's changes (tolerance against the ground truth, memory given back, CUDA-graph replays).
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-verify
cd /tmp
taskset -c 4-15 timeout 300 python3 "$D/prebuild_conv_programs.py" "$REPO" 12 > "$OUT/prebuild.log" 2>&1 &
pb=$!
taskset -c 0-3 timeout 240 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_pipeline_programs.py::test_a_compiled_pipeline_replays_as_a_cuda_graph" "$REPO/tests/test_pipeline_tune.py" > "$OUT/pytest_graphs_tune.log" 2>&1
echo "graphs+tune gpu tests: $(tail -1 "$OUT/pytest_graphs_tune.log") at $(el) s"
wait $pb; echo "prebuild: $(tail -1 "$OUT/prebuild.log") at $(el) s"
for pair in pipeline_conv_audio_downsample:L2_015_audio_sinusoidal_position_embedding_with_conv_projection pipeline_conv_audio_encoder:L2_055_audio_encoder_conv_positional_layer_stack; do
  ex=${pair%%:*}; pid=${pair##*:}
  left=$(( 440 - $(el) )); [ $left -lt 30 ] && break
  timeout $left ucutlass grade "$REPO/examples/$ex.ucut" "$pid" -o "$OUT/grade_$pid.json" > "$OUT/grade_$pid.txt" 2>&1
  echo "grade $pid rc $? at $(el) s"
done
for f in "$OUT"/grade_*.txt; do sed -n '/^workload/,$p' "$f" | cut -c1-300; grep -E "^error" "$f" | cut -c1-600; done
grep -E "^(FAILED|ERROR)|^E " "$OUT/pytest_graphs_tune.log" | head -30
