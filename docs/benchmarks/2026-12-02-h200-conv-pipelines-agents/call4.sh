#!/usr/bin/env bash
# Device call 4: pipelines compiled and graded (issue 16), bad-input GPU tests (issue 19), the MCP grade alone (18).
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
cd /tmp
timeout 200 python3 "$REPO/docs/benchmarks/2026-12-02-h200-conv-pipelines-agents/prebuild_pipelines.py" "$REPO" 13 > "$OUT/prebuild.log" 2>&1 &
pb=$!
UCUTLASS_TEST_KERNEL_CACHE=/tmp/k taskset -c 13-15 timeout 240 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_bad_input_gpu.py" > "$OUT/pytest_badinput.log" 2>&1 &
bi=$!
wait $pb; echo "prebuild: $(tail -1 "$OUT/prebuild.log") at $(el) s" | tee "$OUT/summary.txt"
left=$(( 330 - $(el) ))
timeout $left pytest -v -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_pipeline_programs.py" -k compiled > "$OUT/pytest_pipeline.log" 2>&1
echo "pipeline compiled: $(tail -1 "$OUT/pytest_pipeline.log") at $(el) s" | tee -a "$OUT/summary.txt"
wait $bi; echo "badinput: $(tail -1 "$OUT/pytest_badinput.log") at $(el) s" | tee -a "$OUT/summary.txt"
left=$(( 380 - $(el) ))
[ $left -gt 60 ] && timeout $left pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_agents_gpu.py" > "$OUT/pytest_agents.log" 2>&1
echo "agents alone: $(tail -1 "$OUT/pytest_agents.log" 2>/dev/null) at $(el) s" | tee -a "$OUT/summary.txt"
grep -E "PASSED|FAILED|XFAIL" "$OUT/pytest_pipeline.log" | head -20
grep -E "^E " "$OUT/pytest_pipeline.log" "$OUT/pytest_badinput.log" "$OUT/pytest_agents.log" 2>/dev/null | head -30
grep FAIL "$OUT/prebuild.log" | head -5
