#!/usr/bin/env bash
# Device call: attention (FMHA) on the H200 — ucutlass kernels against PyTorch SDPA (default, flash, cuDNN backends).
# Rows: B·S in {4x4096, 1x16384, 16x1024, 4x4000}, Hq/Hkv 32/8 and 32/32, d = 128, causal, plus one non-causal row.
# ucutlass side: a few fixed sm90 configs (compiled in parallel), and the tuned one when TUNE=1 (runs
# `ucutlass tune gqa_attention_llama3_1_8b` first, TRIALS/TUNE_TIMEOUT bound it) or TUNED_UCUT=path/to/best.ucut.
# Writes $OUT/attention_bench.md (the table) and $OUT/attention_bench.json.
# Usage: bash scripts/device_attention_bench.sh            TUNE=1 TRIALS=12 bash scripts/device_attention_bench.sh
set -uo pipefail
. scripts/device_setup.sh || exit 1
args=()
if [ "${TUNE:-0}" = 1 ]; then
  ( cd /tmp && PYTHONUNBUFFERED=1 timeout "${TUNE_TIMEOUT:-300}" ucutlass tune gqa_attention_llama3_1_8b \
      --out /tmp/tune/attn --jobs "${JOBS:-16}" --batch "${BATCH:-16}" --trials "${TRIALS:-12}" ) \
    > "$OUT/attention_tune.log" 2>&1
  tr '\r' '\n' < "$OUT/attention_tune.log" | grep -v '%|' | tail -25
  mkdir -p "$OUT/tune" && cp /tmp/tune/attn/*.ucut /tmp/tune/attn/*.txt /tmp/tune/attn/*.json /tmp/tune/attn/*.csv \
    "$OUT/tune/" 2>/dev/null
  best=$(ls /tmp/tune/attn/*.ucut 2>/dev/null | head -1)
  [ -n "$best" ] && args+=(--tuned "$best")
elif [ -n "${TUNED_UCUT:-}" ]; then
  args+=(--tuned "$REPO/$TUNED_UCUT")
fi
PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-500}" python3 "$REPO/scripts/attention_bench.py" --out "$OUT" "${args[@]}"
