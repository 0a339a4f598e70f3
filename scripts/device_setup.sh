# Source this on the GPU machine (the `device` tool's copy of the repo): installs the carried wheels
# (.whl/, from ../shared/tools/device-wheels.sh) and the project itself, non-editable, into /tmp/site.
# Two scripts started side by side (one per GPU) install once: the caller sources this first, they skip it.
if [ -z "${UCUTLASS_DEVICE_SETUP:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl . || return 1
  export UCUTLASS_DEVICE_SETUP=1
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
export UCUTLASS_CACHE_DIR=/tmp/ucutlass-cache
# Problems copied from ../shared/sol-execbench into the ignored, carried .device/problems.
[ -d .device/problems ] && export UCUTLASS_PROBLEMS=$PWD/.device/problems
export REPO=$PWD  # the scripts run side by side (device_two_gpus.sh) read it
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  nvcc --version | tail -1; g++ --version | head -1
  python3 -c "import torch, optuna, lark, cutlass_library; print('torch', torch.__version__, 'optuna', optuna.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
