#!/usr/bin/env bash
# Device call 1 (issue 20 item 3, issue 16): FMHA options against SDPA (scripts/fmha_explore.py), the attention
# variants against SDPA with its own mask / scale arguments (attention_bench.py --variants), and the wall-clock
# check's fixed costs (scripts/wall_probe.py). Builds first, all in parallel on the 16 cores; then timing alone.
set -uo pipefail
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
cd /tmp
timeout 330 python3 $REPO/scripts/fmha_explore.py --out /tmp/xb --build-only > /tmp/explore_build.log 2>&1 &
timeout 330 python3 $REPO/scripts/attention_bench.py --out /tmp/vb --variants --build-only > /tmp/variants_build.log 2>&1 &
wait
echo "builds done at $(el) s: $(tail -1 /tmp/explore_build.log); $(tail -1 /tmp/variants_build.log)"
grep "build failed" /tmp/explore_build.log | cut -c1-400
timeout 200 python3 $REPO/scripts/fmha_explore.py --out $OUT > /tmp/explore.log 2>&1
echo "explore rc $? at $(el) s"
timeout 120 python3 $REPO/scripts/attention_bench.py --out $OUT --variants > /tmp/variants.log 2>&1
echo "variants rc $? at $(el) s"
timeout 60 python3 $REPO/scripts/wall_probe.py --out $OUT > /tmp/wall.log 2>&1
echo "wall probe rc $? at $(el) s"
tar czf $OUT/logs.tgz -C /tmp explore_build.log variants_build.log explore.log variants.log wall.log 2>/dev/null
cat $OUT/fmha_explore.md $OUT/attention_variants_bench.md $OUT/wall_probe.md 2>/dev/null | cut -c1-600
