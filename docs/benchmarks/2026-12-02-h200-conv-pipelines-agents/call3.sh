#!/usr/bin/env bash
# Device call 3: conv GPU tests, the agents' MCP grade on the GPU, host overhead per call, the conv benchmark.
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
cd /tmp
timeout 280 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_conv_gpu.py" > "$OUT/pytest_conv.log" 2>&1 &
p1=$!
timeout 280 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_agents_gpu.py" > "$OUT/pytest_agents.log" 2>&1 &
p2=$!
timeout 280 python3 "$REPO/scripts/host_overhead.py" /tmp/host_overhead_warmup.json > /tmp/host_warm.txt 2>&1 &
p3=$!
wait $p1; echo "conv: $(tail -1 "$OUT/pytest_conv.log") at $(el) s" | tee "$OUT/summary.txt"
wait $p2; echo "agents: $(tail -1 "$OUT/pytest_agents.log") at $(el) s" | tee -a "$OUT/summary.txt"
wait $p3; tail -3 /tmp/host_warm.txt
timeout 60 python3 "$REPO/scripts/host_overhead.py" "$OUT/host_overhead.json" > "$OUT/host_overhead.txt" 2>&1
echo "host overhead rc $? at $(el) s" | tee -a "$OUT/summary.txt"; cat "$OUT/host_overhead.txt"
left=$(( 575 - $(el) ))
timeout $left python3 "$REPO/scripts/conv_bench.py" --out "$OUT/conv_bench.md" > "$OUT/conv_bench.log" 2>&1
echo "conv bench rc $? at $(el) s" | tee -a "$OUT/summary.txt"
tail -30 "$OUT/conv_bench.log"; cat "$OUT/conv_bench.md" 2>/dev/null | tail -30
grep -E "^E |FAILED" "$OUT/pytest_conv.log" "$OUT/pytest_agents.log" | head -30
