#!/usr/bin/env bash
# Device call 2 (issue 20 item 3, issue 16): the attention variants after their speed-ups (fast tanh, bias loaded
# first in pairs, batched bias from the grid) against SDPA, the attention GPU tests (template changed), and the
# grader's GPU tests with the wall check's spin set from the call's host path (tests/adversarial: slow host).
# Builds and correctness first, in parallel (grader tests alone on cores 0-3); then the variant timings alone.
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
cd /tmp
PT="pytest -q -p no:cacheprovider -rfE -m gpu"
taskset -c 4-15 timeout 330 python3 $REPO/scripts/attention_bench.py --out /tmp/vb --variants --build-only > /tmp/variants_build.log 2>&1 &
taskset -c 4-15 timeout 380 $PT $REPO/tests/test_attention_variants_gpu.py > /tmp/pytest_variants.log 2>&1 &
taskset -c 4-15 timeout 380 $PT $REPO/tests/test_attention_gpu.py > /tmp/pytest_attention.log 2>&1 &
taskset -c 0-3 timeout 380 $PT $REPO/tests/adversarial/test_adversarial_gpu.py $REPO/tests/grader/test_grader_gpu.py > /tmp/pytest_grader.log 2>&1 &
wait
echo "builds and tests done at $(el) s"
for f in variants_build pytest_variants pytest_attention pytest_grader; do echo "$f: $(tail -1 /tmp/$f.log)"; done
grep -E "^(FAILED|ERROR)" /tmp/pytest_*.log | cut -c1-400
left=$(( 580 - $(el) ))
timeout $left python3 $REPO/scripts/attention_bench.py --out $OUT --variants > /tmp/variants.log 2>&1
echo "variants rc $? at $(el) s"
tar czf $OUT/logs.tgz -C /tmp variants_build.log variants.log pytest_variants.log pytest_attention.log pytest_grader.log 2>/dev/null
cat $OUT/attention_variants_bench.md 2>/dev/null | cut -c1-600
