#!/bin/bash
# Runs the GPU test programs and worker_start_bench --gpu 0 from stripped binaries carried
# to a GPU machine (the device tool's `carry`): tests/gpu/device_quick.sh BIN_DIR OUT_DIR.
# Each program's whole log goes to OUT_DIR; the summary lines to stdout.
set -u
bin=$(cd "$1" && pwd)
out=${2:-/tmp/hsring-gpu-run}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 HSRING_BIN_DIR="$bin"
{ date -u; nvidia-smi -L; nproc; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
status=0
for t in gpu_host_test gpu_preflight_test gpu_kernels_test cuda_model_test cuda_trainer_test \
         cuda_dflash_test \
         gpu_pipeline_test gpu_launcher_test gpu_training_test gpu_multi_node_test; do
  [ -x "$bin/$t" ] || continue
  "$bin/$t" > "$out/$t.log" 2>&1
  code=$?
  echo "== $t exit $code: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.log" | head -5
  status=$((status | code))
done
"$bin/worker_start_bench" --reps 20 --gpu 0 2>&1 | tee "$out/worker_start_bench.log"
exit $status
