#!/usr/bin/env bash
# Device call 4: the FMHA's score-modifier values now written by a one-thread kernel (a graph captures its
# arguments) instead of cudaMemcpyToSymbolAsync from the stack; the attention variants' GPU tests (cores 0-7) beside
# L2_055's build (8-15); then L2_055 graded on every workload (graph replays, the float64 truth freed after use).
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-conv-tiles
P055=L2_055_audio_encoder_conv_positional_layer_stack
cd /tmp
taskset -c 8-15 timeout 300 python3 $REPO/scripts/prebuild_programs.py $REPO/examples/pipeline_conv_audio_encoder.ucut:$P055 > $OUT/prebuild_055.log 2>&1 &
pb=$!
taskset -c 0-7 timeout 280 pytest -q -m gpu -p no:cacheprovider -rfE $REPO/tests/test_attention_variants_gpu.py > $OUT/pytest_attn_variants.log 2>&1
echo "attention variants: $(tail -1 $OUT/pytest_attn_variants.log) at $(el) s"
wait $pb; echo "prebuild: $(tail -1 $OUT/prebuild_055.log) at $(el) s"
left=$(( 575 - $(el) ))
timeout -s INT $left ucutlass grade $REPO/examples/pipeline_conv_audio_encoder.ucut $P055 -o $OUT/grade_055.json > $OUT/grade_055.txt 2>&1
echo "grade 055 rc $? at $(el) s"
sed -n '/^workload/,$p' $OUT/grade_055.txt | cut -c1-300; grep -E "^error|^note" $OUT/grade_055.txt | cut -c1-400 | tail
grep -E "^(FAILED|ERROR)|^E " $OUT/pytest_attn_variants.log | head -20
