#!/usr/bin/env bash
# Device call 5: the grader's GPU tests after this session's grader changes (comparisons in chunks, the ground truth
# keeping the reference's precision casts, the worker freeing its float64 scratch) and the CUDA-graph pipeline test.
set -uo pipefail
t0=$(date +%s)
. scripts/device_setup.sh || exit 1
export UCUTLASS_CACHE_DIR=$REPO/.kcache
export UCUTLASS_SOL_EXECBENCH=$REPO/.device/problems
cd /tmp
timeout 420 pytest -q -m gpu -p no:cacheprovider -rfE $REPO/tests/grader/test_grader_gpu.py "$REPO/tests/test_pipeline_programs.py::test_a_compiled_pipeline_replays_as_a_cuda_graph" > $OUT/pytest_grader_gpu.log 2>&1
echo "rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $OUT/pytest_grader_gpu.log
grep -E "^(FAILED|ERROR)|^E " $OUT/pytest_grader_gpu.log | head -20
