#!/usr/bin/env bash
# Device call 1 (2026-12-04, conv tiles): one nvcc round on 16 cores (L2_055's program on 0-7; the conv bench's
# variants and L2_078's program with its tile variants on 8-15) into a kernel cache kept in the repository's ignored
# .kcache (the next call, on the still-warm machine, reuses it); L2_055 graded on every workload once its kernels
# are built.
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-conv-tiles
P055=L2_055_audio_encoder_conv_positional_layer_stack
P078=L2_078_fused_final_layer_upsample_with_adaptive_norm
cd /tmp
taskset -c 0-7 timeout 420 python3 $REPO/scripts/prebuild_programs.py $REPO/examples/pipeline_conv_audio_encoder.ucut:$P055 > $OUT/prebuild_055.log 2>&1 &
pa=$!
( taskset -c 8-15 timeout 400 python3 $REPO/scripts/conv_bench.py --rows "L2_055 conv2,L2_078" --variants 128x128_c1,128x128_c2,128x192,128x128x128,64x256_c2 --im2col --build-only --out /tmp/unused.md
  python3 $D/l2_078_variants.py /tmp/l78 > /tmp/l78.list
  taskset -c 8-15 timeout 300 python3 $REPO/scripts/prebuild_programs.py $REPO/examples/pipeline_conv_resblock_final.ucut:$P078 $(sed "s|\$|:$P078|" /tmp/l78.list) ) > $OUT/prebuild_conv.log 2>&1 &
pb=$!
wait $pa; echo "prebuild 055: $(tail -1 $OUT/prebuild_055.log) at $(el) s"
left=$(( 570 - $(el) ))
timeout -s INT $left ucutlass grade $REPO/examples/pipeline_conv_audio_encoder.ucut $P055 -o $OUT/grade_055.json > $OUT/grade_055.txt 2>&1
echo "grade 055 rc $? at $(el) s"
kill $pb 2>/dev/null; wait $pb 2>/dev/null
grep -E "kernels in|FAIL" $OUT/prebuild_conv.log | cut -c1-400
sed -n '/^workload/,$p' $OUT/grade_055.txt | cut -c1-300; grep -E "^error|^note|^graded" $OUT/grade_055.txt | cut -c1-400 | tail -20
