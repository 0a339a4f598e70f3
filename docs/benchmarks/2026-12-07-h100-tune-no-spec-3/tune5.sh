#!/usr/bin/env bash
# Issue 17 on the H200: `ucutlass tune PROBLEM` with no spec, several problems per call on one warm machine.
# PREBUILD="P ..." builds every legal kernel of their init programs first (cores 4-15) while, with GRADER=1, the
# grader + adversarial GPU tests run on cores 0-3. Then each problem is tuned as a user runs it until END seconds.
set -uo pipefail
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
. scripts/device_setup.sh || exit 1
END=${END:-585}
if [ -n "${PREBUILD:-}" ]; then
  pre=(); for p in $PREBUILD; do pre+=(":$p"); done
  ( nice -n 5 taskset -c 4-15 timeout ${BUILD:-300} python3 scripts/prebuild_programs.py --all --jobs 12 "${pre[@]}" \
      > $OUT/prebuild.log 2>&1; echo "prebuild rc $? at $(el) s" >> $OUT/prebuild.log ) &
  pb=$!
fi
if [ "${GRADER:-0}" = 1 ]; then
  ( cd /tmp && taskset -c 0-3 timeout ${GRADER_T:-200} pytest -q -m gpu -p no:cacheprovider -rfE \
      $REPO/tests/grader $REPO/tests/adversarial > $OUT/pytest_grader.log 2>&1 )
  echo "grader tests at $(el) s: $(tail -1 $OUT/pytest_grader.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest_grader.log | head
fi
[ -n "${pb:-}" ] && { wait $pb; tail -3 $OUT/prebuild.log; }
mkdir -p /tmp/tune
for p in "$@"; do
  left=$(( END - $(el) ))
  [ $left -lt ${MIN_LEFT:-150} ] && { echo "== skipped $p: $left s left"; continue; }
  lim=$(( left - 110 )); [ $lim -gt ${TIME_LIMIT:-80} ] && lim=${TIME_LIMIT:-80}
  [ $lim -lt 20 ] && { echo "== skipped $p: time limit $lim s"; continue; }
  echo "== $(el) s: ucutlass tune $p (timeout $left s, time-limit $lim s)"
  ( cd /tmp && PYTHONUNBUFFERED=1 timeout -s INT -k 15 $left ucutlass tune $p --out /tmp/tune/$p --jobs 16 \
      --trials ${TRIALS:-4} --time-limit $lim --max-workloads ${MAX_WORKLOADS:-3} ) > $OUT/$p.log 2>&1
  echo "exit $? at $(el) s"; grep -v "it/s\|s/it" $OUT/$p.log | tail -28
  tar czf $OUT/$p.tgz -C /tmp/tune $p
done
