#!/usr/bin/env bash
# Device call 3 (issue 16 item 6, issue 20 item 2): the pipelines built on the CPU so far, compiled and graded on the
# H200 in one call: L2_062 (decoder layer), L1_044 (MoE experts), Quant_001 / Quant_017 (FP8), and the fp32 (3xtf32)
# examples for L1_037 / L1_054 / L2_030. Every kernel is built first in one nvcc round on the 16 cores
# (scripts/prebuild_programs.py), then the grades run one by one, each with what is left of the call's time
# (SIGINT: the grader writes what it measured so far). WORKLOADS caps each grade (default 6 of the 16).
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
cd /tmp
mkdir -p /tmp/res
EX=$REPO/examples
JOBS="pipeline_decoder_layer:L2_062_decoder_complete_layer
pipeline_moe_experts:L1_044_moe_expert_computation
pipeline_fp8_o_proj:Quant_001_fp8_attention_output_projection
pipeline_fp8_shared_expert:Quant_017_fp8_shared_expert_mlp
pipeline_fp32_concat_split:L2_030_flux_concatenated_sequence_processing_with_split
pipeline_fp32_qkv_norm:L1_054_audio_attention_qkv_projection_with_normalization
pipeline_fp32_flux_ffn:L1_037_flux_feedforward_gelu_approximate"
timeout 270 python3 $REPO/scripts/prebuild_programs.py $(for j in $JOBS; do echo $EX/${j%%:*}.ucut:${j##*:}; done) \
  > $OUT/prebuild.log 2>&1
echo "prebuild rc $?: $(tail -1 $OUT/prebuild.log) at $(el) s"
grep -iE "fail|error" $OUT/prebuild.log | cut -c1-300 | head -10
n=7
for j in $JOBS; do
  ex=${j%%:*}; pid=${j##*:}
  left=$(( 585 - $(el) )); [ $left -lt 15 ] && { echo "no time left for $pid"; n=$((n - 1)); continue; }
  share=$(( left / n )); n=$((n - 1))
  timeout -s INT $share ucutlass grade $EX/$ex.ucut $pid --workloads ${WORKLOADS:-6} -o /tmp/res/grade_${ex}.json \
    > /tmp/res/grade_${ex}.txt 2>&1
  echo "grade $pid rc $? (budget $share s) at $(el) s: $(tail -1 /tmp/res/grade_${ex}.txt | cut -c1-200)"
done
tar czf $OUT/grades.tgz -C /tmp res 2>/dev/null
for f in /tmp/res/grade_*.txt; do echo "== $f"; sed -n '/^workload/,$p' $f | cut -c1-260 | head -24; done
