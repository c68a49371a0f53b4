#!/bin/bash
# End-to-end GPU runs of the real target: `hsring run` with a CUDA target forward (random
# weights; MODEL, qwen3-8b by default, qwen3.6-27b for the seeds' hybrid) at 16384 tokens per
# batch, a GPU drafter training the drafter of that target's shape on its captured layers,
# for SECONDS each; then `hsring status` of the kept ring for the stage timings
# (target.forward, drafter.step), and the run's last curve records (metrics.jsonl: the
# targets' and drafters' busy fractions, tokens/s). One GPU (target and drafter share it),
# and two (target 0, drafter 1) when present. Checkpoints go to /tmp, written once at the end.
#   [MODEL=qwen3.6-27b] bench/gpu_model_run.sh BUILD_DIR OUT_DIR [SECONDS]
set -u
build=$(cd "$1" && pwd)
out=$2
seconds=${3:-45}
model=${MODEL:-qwen3-8b}
mkdir -p "$out"
gpus=$(nvidia-smi -L | wc -l)
run_case() {  # name targets drafters
  local ring="hsring-model-$1"
  "$build/bin/hsring" ring remove "$ring" > /dev/null 2>&1
  "$build/bin/hsring" run --ring "$ring" --model "$model" --targets "$2" --drafters "$3" \
    --max-tokens 16384 --slots 6 --hs-min-ready 1 --no-split-fc-layers --seconds "$seconds" \
    --run-dir "/tmp/hsring-bench-run-$1" --checkpoint-every 0 --keep-ring --summary-json "$out/summary-$1.json" \
    > "$out/run-$1.log" 2>&1
  echo "== $1 (targets $2, drafters $3): exit $?"
  tail -3 "$out/run-$1.log"
  cat "$out/summary-$1.json"
  "$build/bin/hsring" status --ring "$ring" --json --interval 0 > "$out/status-$1.json" 2>&1
  "$build/bin/hsring" status --ring "$ring" --interval 0 2>&1 | tee "$out/status-$1.txt"
  "$build/bin/hsring" ring remove "$ring" > /dev/null 2>&1
  tail -n 3 "/tmp/hsring-bench-run-$1/metrics.jsonl" > "$out/metrics-tail-$1.jsonl" 2>/dev/null
  echo "-- last curve records (busy fractions):"
  cat "$out/metrics-tail-$1.jsonl"
  rm -rf "/tmp/hsring-bench-run-$1"
}
run_case one-gpu 0 0
[ "$gpus" -ge 2 ] && run_case two-gpus 0 1
exit 0
