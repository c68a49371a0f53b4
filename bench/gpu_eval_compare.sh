#!/bin/bash
# `hsring eval --gpu` against the reference DFlash decoding and transformers' greedy
# `generate` on the same GPU, export, target and prompts (bench/gpu_eval_compare.py):
#   bench/gpu_eval_compare.sh BIN_DIR OUT_DIR [EXPORT_DIR]
# Without EXPORT_DIR it trains one first with the default job on GPU 0. The target is the
# built-in one (its Hugging Face folder in the hsring cache). Needs python3 with torch,
# transformers and dflash (HSRING_WHEELS: a folder holding the dflash wheel to install).
set -euo pipefail
bin=$(cd "$1" && pwd)
out=$2
export_dir=${3:-}
mkdir -p "$out"
if [ -z "$export_dir" ]; then
  "$bin/hsring" run --run-dir "$out/train" > "$out/train.log" 2>&1
  export_dir=$out/train/export
fi
target=$("$bin/hsring" model builtin | tail -n 1)
pylib=$(mktemp -d)
if ! python3 -c "import dflash" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --find-links "${HSRING_WHEELS:?}" \
    --target "$pylib" dflash
fi
run_compare() {  # name dtype report
  PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}" python3 "$(dirname "$0")/gpu_eval_compare.py" \
    --target "$target" --export "$export_dir" --report "$3" --dtype "$2" \
    --out "$out/compare-$1.json" | sed "s/^/$1: /"
}
# Speed: hsring on the GPU (bf16 target) against the reference and transformers in bf16, in
# groups of 16 and 64 prompts.
for prompts in 16 64; do
  "$bin/hsring" eval --gpu 0 --drafter "$export_dir" --max-prompts "$prompts" \
    --json "$out/hsring-gpu-$prompts.json" > "$out/hsring-gpu-$prompts.log"
  tail -n 6 "$out/hsring-gpu-$prompts.log"
  run_compare "gpu-$prompts" bfloat16 "$out/hsring-gpu-$prompts.json"
done
# Agreement: hsring's CPU path (fp32) against the reference in fp32 on the GPU.
"$bin/hsring" eval --drafter "$export_dir" --max-prompts 64 --json "$out/hsring-cpu-64.json" \
  > "$out/hsring-cpu-64.log"
run_compare cpu-64-fp32 float32 "$out/hsring-cpu-64.json"
