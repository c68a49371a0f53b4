#!/bin/bash
# `hsring data generate --gpu` against the CPU path and against transformers' `generate` on
# the same GPU (bench/gpu_generate_compare.py): the built-in target continues the built-in
# held-out documents.   bench/gpu_generate_compare.sh BIN_DIR OUT_DIR [MAX_NEW_TOKENS]
set -euo pipefail
bin=$(cd "$1" && pwd)
out=$2
new=${3:-64}
mkdir -p "$out"
target=$("$bin/hsring" model builtin | tail -n 1)
prompts=$(ls -d "${HSRING_CACHE_DIR:-$HOME/.cache/hsring}"/default-heldout-*)
rm -rf "$out/cpu" "$out/gpu"
/usr/bin/time -f "cpu %e s" "$bin/hsring" data generate --model builtin --data "$prompts" \
  -o "$out/cpu" --max-new-tokens "$new" > "$out/cpu.log" 2>&1
/usr/bin/time -f "gpu %e s" "$bin/hsring" data generate --model builtin --data "$prompts" \
  -o "$out/gpu" --max-new-tokens "$new" --gpu 0 > "$out/gpu.log" 2>&1
tail -n 2 "$out/cpu.log" "$out/gpu.log"
PYTHONPATH="$(dirname "$0")/../python${PYTHONPATH:+:$PYTHONPATH}" python3 \
  "$(dirname "$0")/gpu_generate_compare.py" --target "$target" --cpu "$out/cpu" --gpu "$out/gpu" \
  --new-tokens "$new" --gpu-log "$out/gpu.log" --out "$out/compare.json"
