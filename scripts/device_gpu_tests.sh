#!/usr/bin/env bash
# Device call: the GPU test suite and the calibration of this GPU. Outputs under $OUT.
set -uo pipefail
. scripts/device_setup.sh || exit 1
cd /tmp  # not the repo root: `ucutlass` must come from the install (the repo's source tree lacks the
         # ucutlass.search / ucutlass.grader mapping)
timeout "${TEST_TIMEOUT:-420}" pytest -q -m gpu -p no:cacheprovider -rfEs "$REPO/tests" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
timeout 120 ucutlass calibrate 2>&1 | tee "$OUT/calibrate.txt"
cp "$UCUTLASS_CACHE_DIR/hardware-calibrated.json" "$OUT/" 2>/dev/null || true
