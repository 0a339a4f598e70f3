#!/usr/bin/env bash
# Device call: `ucutlass tune` on each PROBLEM[:SPEC] given, one after the other. Each problem's output
# folder comes back as $OUT/PROBLEM.tgz and its console log as $OUT/PROBLEM.log (the device tool returns
# at most 8 files).
# Knobs: JOBS, BATCH, TRIALS, TIME_LIMIT, GPU, SAMPLER (auto, tpe, random, brute), TUNE_TIMEOUT (400 s).
# Usage: bash scripts/device_tune.sh o_proj_residual_llama3_1_8b FlashInfer-Bench_007_gemm_n4096_k4096:examples/flashinfer_gemm_f16.ucut
set -uo pipefail
. scripts/device_setup.sh || exit 1
for item in "$@"; do
  problem=${item%%:*}; spec=${item#*:}
  args=(--out "/tmp/tune/$problem" --jobs "${JOBS:-24}" --batch "${BATCH:-24}")
  [ "$spec" != "$item" ] && args+=(--spec "$REPO/$spec")
  [ -n "${TRIALS:-}" ] && args+=(--trials "$TRIALS")
  [ -n "${TIME_LIMIT:-}" ] && args+=(--time-limit "$TIME_LIMIT")
  [ -n "${GPU:-}" ] && args+=(--gpu "$GPU")
  [ -n "${SAMPLER:-}" ] && args+=(--sampler "$SAMPLER")
  echo "== ucutlass tune $problem ${args[*]}"
  ( cd /tmp && PYTHONUNBUFFERED=1 timeout "${TUNE_TIMEOUT:-400}" ucutlass tune "$problem" "${args[@]}" ) \
    > "$OUT/$problem.log" 2>&1
  tr '\r' '\n' < "$OUT/$problem.log" | grep -v '%|' | tail -45
  tar czf "$OUT/$problem.tgz" -C /tmp/tune "$problem"
done
