#!/usr/bin/env bash
# Device call 2 (right after call 1, on the warm machine with its .kcache): the conv bench timed (kernels cached),
# then L2_078 graded on every workload with the 3x3 tile that ran its rows fastest (l2_078_variants.py --pick), then
# L2_055 once more if call 1 did not finish it.
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
export UCUTLASS_DEVICE_SETUP=${UCUTLASS_DEVICE_SETUP:-}
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
D=$REPO/docs/benchmarks/2026-12-04-h200-conv-tiles
P055=L2_055_audio_encoder_conv_positional_layer_stack
P078=L2_078_fused_final_layer_upsample_with_adaptive_norm
cd /tmp
timeout 240 python3 $REPO/scripts/conv_bench.py --rows "L2_055 conv2,L2_078" --variants 128x128_c1,128x128_c2,128x192,128x128x128,64x256_c2 --im2col --out $OUT/conv_bench.md > $OUT/conv_bench.log 2>&1
echo "conv bench rc $? at $(el) s"; cat $OUT/conv_bench.md
python3 $D/l2_078_variants.py /tmp/l78 > /dev/null
F078=$(python3 $D/l2_078_variants.py /tmp/l78 --pick $OUT/conv_bench.json); echo "L2_078 program: $F078"
left=$(( 570 - $(el) ))
timeout -s INT $left ucutlass grade $F078 $P078 -o $OUT/grade_078.json > $OUT/grade_078.txt 2>&1
echo "grade 078 rc $? at $(el) s"
sed -n '/^workload/,$p' $OUT/grade_078.txt | cut -c1-300; grep -E "^error|^note" $OUT/grade_078.txt | cut -c1-400 | tail
