#!/usr/bin/env bash
# Device call (issue 20 item 2; grader isolation): the fp32 examples (math = 3xtf32) built on cores 4-15 while the
# grader's GPU tests run alone on cores 0-3, verbose (call 2 of 2026-12-05-h200-fmha cut them short with 4 failures it
# could not name); then the three problems graded on every workload (16 each), then tests/test_fp32_math_gpu.py.
# A session had about 240 s of device time left: every step has a timeout and a grade cut by its SIGINT keeps the
# workloads it graded. Usage (carry .whl and .device): bash docs/benchmarks/2026-12-05-h200-fp32/call1.sh
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache UCUTLASS_TEST_KERNEL_CACHE=$REPO/.kcache/tests
cd /tmp  # `ucutlass` from the install, not the checkout
mkdir -p /tmp/res
EX=$REPO/examples
JOBS="pipeline_fp32_flux_ffn:L1_037_flux_feedforward_gelu_approximate
pipeline_fp32_qkv_norm:L1_054_audio_attention_qkv_projection_with_normalization
pipeline_fp32_concat_split:L2_030_flux_concatenated_sequence_processing_with_split"
taskset -c 0-3 timeout 130 pytest -v -p no:cacheprovider -rfE -m gpu $REPO/tests/grader/test_grader_gpu.py \
  $REPO/tests/adversarial/test_adversarial_gpu.py > /tmp/res/pytest_grader.log 2>&1 &
grader=$!
taskset -c 4-15 timeout 120 python3 $REPO/scripts/prebuild_programs.py --jobs 12 \
  $(for j in $JOBS; do echo $EX/${j%%:*}.ucut:${j##*:}; done) > /tmp/res/prebuild.log 2>&1
echo "prebuild rc $? at $(el) s: $(tail -1 /tmp/res/prebuild.log)"
wait $grader
echo "grader tests rc $? at $(el) s"
grep -E "(FAILED|ERROR)" /tmp/res/pytest_grader.log | cut -c1-300 | head -20
tail -1 /tmp/res/pytest_grader.log
n=3
for j in $JOBS; do
  ex=${j%%:*}; pid=${j##*:}
  left=$(( 195 - $(el) )); [ $left -lt 10 ] && { echo "no time left for $pid"; n=$((n - 1)); continue; }
  share=$(( left / n )); n=$((n - 1))
  timeout -s INT $share ucutlass grade $EX/$ex.ucut $pid -o /tmp/res/grade_${ex}.json > /tmp/res/grade_${ex}.txt 2>&1
  echo "grade $pid rc $? (budget $share s) at $(el) s: $(tail -1 /tmp/res/grade_${ex}.txt | cut -c1-200)"
done
left=$(( 215 - $(el) ))
[ $left -gt 10 ] && timeout $left pytest -q -m gpu -p no:cacheprovider -rfE $REPO/tests/test_fp32_math_gpu.py \
  > /tmp/res/pytest_fp32.log 2>&1; echo "fp32 gpu tests: $(tail -1 /tmp/res/pytest_fp32.log 2>/dev/null)"
cp /tmp/res/*.json /tmp/res/*.txt /tmp/res/*.log $OUT/ 2>/dev/null
for f in /tmp/res/grade_*.txt; do echo "== $f"; sed -n '/^workload/,$p' $f | cut -c1-200 | head -20; done
