#!/usr/bin/env bash
# Device call (one H200, < 9 min): a SOL-budgeted campaign of tuner trials over two shipped problems, the same
# budget spread evenly (no stop rules) as the baseline, then the even spread's recorded trials replayed offline
# with three (ε, w) rules (timeouts 270 + 150 + 30 s). Campaigns rewrite their table after every grant and resume from
# their folder, so a run cut short still leaves its table.
# Comes back in $OUT: campaign.log, even.log, replay.log, campaign.tgz (both folders: state.json, results.json,
# table.txt, each problem's tune folder).
# Knobs: BUDGET (8), PROBLEMS ("o_proj_residual_llama3_1_8b qkv_proj_bias_qwen2_5_7b"), JOBS (16).
# Usage: bash scripts/device_campaign.sh
set -uo pipefail
. scripts/device_setup.sh || exit 1
read -r -a problems <<< "${PROBLEMS:-o_proj_residual_llama3_1_8b qkv_proj_bias_qwen2_5_7b}"
common=(--budget "${BUDGET:-8}" --max-workloads 2 --tune-arg=--dispatch=1 --tune-arg=--batch=4
        --tune-arg=--jobs="${JOBS:-16}")
cd /tmp || exit 1
echo "== ucutlass campaign ${problems[*]} ${common[*]} (spread by headroom, ε 0.25, w 12)"
PYTHONUNBUFFERED=1 timeout 270 ucutlass campaign "${problems[@]}" "${common[@]}" --out /tmp/camp/headroom \
  > "$OUT/campaign.log" 2>&1
echo "exit $?"; tail -12 "$OUT/campaign.log"
echo "== the same budget spread evenly (builds cached by the first campaign)"
PYTHONUNBUFFERED=1 timeout 150 ucutlass campaign "${problems[@]}" "${common[@]}" --spread even \
  --out /tmp/camp/even > "$OUT/even.log" 2>&1
echo "exit $?"; tail -12 "$OUT/even.log"
echo "== replay on the even spread's recorded trials"
timeout 30 ucutlass campaign --replay /tmp/camp/even --rule 0.25:12 --rule 1:4 --rule 2.5:16 \
  --out /tmp/camp/replay > "$OUT/replay.log" 2>&1
echo "exit $?"; head -8 "$OUT/replay.log"
tar czf "$OUT/campaign.tgz" -C /tmp camp
