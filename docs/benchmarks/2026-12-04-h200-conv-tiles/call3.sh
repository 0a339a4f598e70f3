#!/usr/bin/env bash
# Device call 3: L2_055's illegal memory access (call 1, batch 29, in the timing run) reproduced eagerly and with
# CUDA-graph replays; then L2_055 graded again with the ground truth that keeps the reference's bf16 casts in float64.
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-conv-tiles
P055=L2_055_audio_encoder_conv_positional_layer_stack
cd /tmp
timeout 300 python3 $REPO/scripts/prebuild_programs.py $REPO/examples/pipeline_conv_audio_encoder.ucut:$P055 > $OUT/prebuild_055.log 2>&1
echo "prebuild: $(tail -1 $OUT/prebuild_055.log) at $(el) s"
{ for b in 29 16; do for m in graph eager; do echo "== $m $b"; timeout 120 python3 $D/repro_055.py $m $b 2>&1 | tail -8; done; done; } > $OUT/repro.log 2>&1
cat $OUT/repro.log | cut -c1-300; echo "repro at $(el) s"
left=$(( 580 - $(el) ))
timeout -s INT $left ucutlass grade $REPO/examples/pipeline_conv_audio_encoder.ucut $P055 -o $OUT/grade_055.json > $OUT/grade_055.txt 2>&1
echo "grade 055 rc $? at $(el) s"
sed -n '/^workload/,$p' $OUT/grade_055.txt | cut -c1-300; grep -E "^error|^note" $OUT/grade_055.txt | cut -c1-400 | tail
