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
# The quick ones first; then every other cuda_* / gpu_* test program carried, so that a new
# GPU test cannot be left out of this list unnoticed.
listed="gpu_host_test gpu_preflight_test gpu_kernels_test cuda_model_test cuda_moe_test
        cuda_trainer_test cuda_step_kernels_test cuda_bf16_gradients_test cuda_qk_norm_rope_test
        cuda_dflash_test cuda_block_attention_test gpu_eval_test capi_test gpu_pipeline_test
        gpu_launcher_test gpu_training_test gpu_multi_node_test"
others=$(cd "$bin" && ls cuda_*_test gpu_*_test 2>/dev/null | grep -vxF -f <(tr -s ' \n' '\n' <<< "$listed"))
for t in $listed $others; do
  [ -x "$bin/$t" ] || continue
  "$bin/$t" > "$out/$t.log" 2>&1
  code=$?
  echo "== $t exit $code: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.log" | head -5
  status=$((status | code))
done
# The Python sides, where this machine's python3 has torch and transformers (the GPU machine
# does, with no network; HSRING_WHEELS names a folder of carried pytest wheels).
if python3 -c "import torch, transformers" 2>/dev/null; then
  HSRING_REFERENCE_PYTHON=python3 bash tests/reference/run_hf_parity_test.sh \
    "$bin/hf_forward_dump" "$out/hf_parity" --cuda > "$out/hf_parity_cuda.log" 2>&1
  code=$?
  echo "== hf_parity_cuda exit $code: $(tail -n 2 "$out/hf_parity_cuda.log" | tr '\n' ' ')"
  status=$((status | code))
  # examples/hf_target.py on cuda:0 (a random bf16 Qwen3 built by transformers) into a
  # checking consumer (every layer bit for bit against hidden_states[i + 1]), the C++ GPU
  # drafter and examples/torch_drafter.py; it prints SKIPPED without a CUDA device.
  python3 tests/gpu/hf_target_check.py --bin "$bin" --out "$out/hf_target_check" \
    --device cuda:0 > "$out/hf_target_check.log" 2>&1
  code=$?
  echo "== hf_target_check exit $code: $(grep -E '^(==|hf_target_check)' "$out/hf_target_check.log" | tr '\n' ' ')"
  status=$((status | code))
  pylib=$(mktemp -d)
  if python3 -c "import pytest" 2>/dev/null ||
     { [ -n "${HSRING_WHEELS:-}" ] && python3 -m pip install -q --no-index \
         --find-links "$HSRING_WHEELS" --target "$pylib" pytest > /dev/null 2>&1; }; then
    (export HSRING_LIB="$bin/libhsring.so" PATH="$bin:$PATH" HSRING_TEST_PYTHON=python3
     export PYTHONPATH="$PWD/python:$pylib${PYTHONPATH:+:$PYTHONPATH}"
     mkdir -p "$out/capi" && cd "$out/capi" &&
       python3 -m pytest -q -p no:cacheprovider "$OLDPWD/tests/capi/python") \
      > "$out/capi_python.log" 2>&1
    code=$?
    echo "== capi_python exit $code: $(tail -n 1 "$out/capi_python.log")"
    status=$((status | code))
  else
    echo "== capi_python skipped: no pytest (set HSRING_WHEELS to a folder of its wheels)"
  fi
fi
"$bin/worker_start_bench" --reps 20 --gpu 0 2>&1 | tee "$out/worker_start_bench.log"
exit $status
