#!/usr/bin/env bash
# Device call 6: L1_047 (mask + soft-capping) and L2_027 (GQA, `scores = eager` now) compiled and graded on every
# workload, with the grader judging a missed tolerance against the ground truth (slack: the tolerance's own share).
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
P047=L1_047_attention_with_qk_norm_and_rope
P027=L2_027_grouped_query_attention_with_yarn_rope_and_qk_norm
cd /tmp
timeout 150 python3 $REPO/scripts/prebuild_programs.py $REPO/examples/pipeline_attention_softcap_mask.ucut:$P047 $REPO/examples/pipeline_gqa_rope_qk_norm.ucut:$P027 > $OUT/prebuild.log 2>&1
echo "prebuild: $(tail -1 $OUT/prebuild.log) at $(el) s"
for pair in pipeline_attention_softcap_mask:$P047 pipeline_gqa_rope_qk_norm:$P027; do
  ex=${pair%%:*}; pid=${pair##*:}
  left=$(( 320 - $(el) )); [ $left -lt 20 ] && break
  [ $pid = $P047 ] && left=$(( left / 2 ))
  timeout -s INT $left ucutlass grade $REPO/examples/$ex.ucut $pid -o $OUT/grade_${pid%%_*}.json > $OUT/grade_${pid%%_*}.txt 2>&1
  echo "grade $pid rc $? at $(el) s"
done
for f in $OUT/grade_*.txt; do sed -n '/^workload/,$p' $f | cut -c1-300; grep -E "^error|^note" $f | cut -c1-300 | tail -3; done
