#!/usr/bin/env bash
# Device call on nvidia-h200-x2: two scripts side by side, each with one GPU and half the cores.
# Each writes into its own $OUT/<name>/; at the end they are packed into $OUT/<name>.tgz, and the files named
# in KEEP (paths under $OUT/<name>/, e.g. "tests/summary.txt attn/attention_bench.md") are copied beside them.
# LIMIT (540 s) bounds each side, so that the packing runs inside the device call's own limit.
# Usage: bash scripts/device_two_gpus.sh NAME0 'ENV=… bash scripts/a.sh' NAME1 'ENV=… bash scripts/b.sh'
set -uo pipefail
. scripts/device_setup.sh || exit 1
# PRE: a command run first with every core and no GPU work (e.g. scripts/device_prebuild.py for both sides)
[ -n "${PRE:-}" ] && { bash -c "$PRE" 2>&1 | tail -20; }
cores=$(nproc); half=$((cores / 2)); root=$OUT
run() {  # name gpu first_core last_core command
  mkdir -p "$root/$1"
  OUT="$root/$1" CUDA_VISIBLE_DEVICES=$2 timeout "${LIMIT:-540}" taskset -c "$3-$4" bash -c "$5" \
    > "$root/$1/console.log" 2>&1
  echo "== $1 (GPU $2, cores $3-$4) exit $?"; tail -30 "$root/$1/console.log"
}
run "$1" 0 0 $((half - 1)) "$2" &
run "$3" 1 "$half" $((cores - 1)) "$4" &
wait
for f in ${KEEP:-}; do cp "$root/$f" "$root/$(echo "$f" | tr / _)" 2>/dev/null; done
for name in "$1" "$3"; do tar czf "$root/$name.tgz" -C "$root" "$name" && rm -rf "${root:?}/$name"; done
