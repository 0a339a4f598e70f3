#!/usr/bin/env bash
# Device call 5 (2026-12-04): the GPU tests of the fp32-accurate GEMMs (math = 3xtf32) and of the attention variants,
# side by side on 8 cores each (each module compiles its kernels first).
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
el() { echo $(( $(date +%s) - t0 )); }
cd /tmp
taskset -c 0-7 timeout 280 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_fp32_math_gpu.py" > "$OUT/pytest_fp32_gpu.log" 2>&1 &
a=$!
taskset -c 8-15 timeout 280 pytest -q -m gpu -p no:cacheprovider -rfE "$REPO/tests/test_attention_variants_gpu.py" > "$OUT/pytest_attention_variants_gpu.log" 2>&1
wait $a
echo "fp32: $(tail -1 "$OUT/pytest_fp32_gpu.log") / attention variants: $(tail -1 "$OUT/pytest_attention_variants_gpu.log") at $(el) s"
grep -E "^(FAILED|ERROR)|^E " "$OUT"/pytest_*.log | cut -c1-400 | head -40
