#!/usr/bin/env bash
# Device call: trials per hour of `ucutlass tune PROBLEM` with one worker and with one worker per GPU, the
# same study settings (sampler, seed, trial count). Each run starts from a cold kernel cache of its own so
# neither gets the other's builds; with WARM=1 every legal configuration is built first (`ucutlass compile
# --all`) into one cache that all runs share, so the runs measure the search without the compiles.
# Writes $OUT/workers-W.log, $OUT/results-wW.json and $OUT/worker-logs-wW.tgz per run, and
# $OUT/trials_per_hour.md (trials measured / seconds searching, and the ratio against one worker).
# Usage (on a machine with 2 GPUs):
#   TRIALS=24 bash scripts/device_tune_workers.sh o_proj_residual_llama3_1_8b
# Knobs: WORKER_COUNTS (default "1 <GPUs>"), TRIALS (24), SAMPLER (random), JOBS (cores), BATCH (8),
# TIME_LIMIT (none), TUNE_TIMEOUT per run (270 s), GPU spec for T_SOL (h200).
set -uo pipefail
. scripts/device_setup.sh || exit 1
problem=${1:-o_proj_residual_llama3_1_8b}
gpus=$(nvidia-smi -L | wc -l)
if [ -n "${WARM:-}" ]; then
  echo "== ucutlass compile --all (shared warm cache)"
  ( cd /tmp && UCUTLASS_CACHE_DIR=/tmp/ucutlass-cache-warm timeout "${BUILD_TIMEOUT:-300}" ucutlass compile \
      "$REPO/problems/$problem/kernel.ucut" --all --jobs "$(nproc)" ) > "$OUT/compile-all.log" 2>&1
  tail -3 "$OUT/compile-all.log"
fi
for w in ${WORKER_COUNTS:-1 $gpus}; do
  args=(--workers "$w" --out "/tmp/tune-w$w" --trials "${TRIALS:-24}" --sampler "${SAMPLER:-random}"
        --epsilon 0 --patience 100000 --jobs "${JOBS:-$(nproc)}" --batch "${BATCH:-8}" --gpu "${GPU:-h200}")
  [ -n "${TIME_LIMIT:-}" ] && args+=(--time-limit "$TIME_LIMIT")
  echo "== ucutlass tune $problem ${args[*]}"
  cache="/tmp/ucutlass-cache-w$w"; [ -n "${WARM:-}" ] && cache=/tmp/ucutlass-cache-warm
  ( cd /tmp && UCUTLASS_CACHE_DIR="$cache" PYTHONUNBUFFERED=1 \
      timeout "${TUNE_TIMEOUT:-270}" ucutlass tune "$problem" "${args[@]}" ) > "$OUT/workers-$w.log" 2>&1
  tr '\r' '\n' < "$OUT/workers-$w.log" | grep -v '%|' | tail -25
  cp "/tmp/tune-w$w/results.json" "$OUT/results-w$w.json" 2>/dev/null || echo "no results.json for $w workers"
  [ -d "/tmp/tune-w$w/workers" ] && tar czf "$OUT/worker-logs-w$w.tgz" -C "/tmp/tune-w$w" workers
done
python3 - "$OUT" "$problem" <<'PY' | tee "$OUT/trials_per_hour.md"
import json, pathlib, sys
out, problem = pathlib.Path(sys.argv[1]), sys.argv[2]
runs = sorted((json.loads(p.read_text()) for p in out.glob("results-w*.json")), key=lambda d: d["workers"])
print(f"| workers | measured trials | seconds searching | trials per hour | vs one worker | best (T/T_SOL) |")
print("|---|---|---|---|---|---|")
base = None
for d in runs:
    rate = d["measured_trials"] / d["search_seconds"] * 3600 if d.get("search_seconds") else float("nan")
    base = rate if d["workers"] == 1 else base
    ratio = f"{rate / base:.2f}×" if base else "-"
    best = d["best"]["objective_t_over_sol"] if d.get("best") else None
    print(f"| {d['workers']} | {d['measured_trials']} | {d['search_seconds']} | {rate:.0f} | {ratio} | {best} |")
PY
