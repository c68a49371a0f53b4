#!/bin/bash
# The chunked delta rule of two builds and flash-linear-attention's on one GPU, in one call:
#   bench/delta_rule_compare.sh BASE_BIN_DIR NEW_BIN_DIR OUT_DIR [FLA_PYTHONPATH]
# NEW's delta-rule and qwen3_5 model tests first (its kernels against the per-token
# recurrence), then forward_bench's delta rule alone at the qwen3.6-27b shape (8 layers,
# 16 384 tokens, its 15 documents), BASE and NEW alternating twice, then fla's
# chunk_gated_delta_rule on the same documents with its per-kernel profile
# (bench/delta_rule_fla.py; FLA_PYTHONPATH holds the flash-linear-attention, fla-core and
# einops wheels' files), then NEW's `hf_parity --cuda`. Each BIN_DIR holds forward_bench;
# NEW_BIN_DIR also cuda_model_test and hf_forward_dump. Key lines go to stdout, logs to OUT.
set -uo pipefail
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
out=$3
fla_path=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
timeout 120 "$new/cuda_model_test" --gtest_filter='*Delta*:*qwen3_5*' > "$out/model_test.log" 2>&1
echo "new model tests (delta, qwen3_5): exit $?, $(grep -cE '^\[       OK \]' "$out/model_test.log") passed"
grep -E "delta rule dk|^\[  FAILED  \]" "$out/model_test.log"
for round in 1 2; do
  for side in base new; do
    dir=$base
    [ "$side" = new ] && dir=$new
    timeout 120 "$dir/forward_bench" --model qwen3.6-27b --num-layers 8 --layers 2 --tokens 16384 \
      --iterations 3 --warmup 1 --docs-out "$out/docs.txt" > "$out/forward_$side$round.log" 2>&1
    echo "$side $round: $(grep -E '^delta_rule_(bf16_)?ms_per_layer' "$out/forward_$side$round.log" | tr '\n' ' ')"
  done
done
PYTHONPATH="$fla_path${PYTHONPATH:+:$PYTHONPATH}" timeout 150 python3 "$here/delta_rule_fla.py" \
  --docs "$out/docs.txt" --profile > "$out/fla.log" 2>&1
grep -E '^fla' "$out/fla.log"
HSRING_REFERENCE_PYTHON=${HSRING_REFERENCE_PYTHON:-python3} timeout 200 \
  bash "$here/../tests/reference/run_hf_parity_test.sh" "$new/hf_forward_dump" "$out/hf_parity" --cuda \
  > "$out/hf_parity.log" 2>&1
echo "new hf_parity --cuda: exit $?"
grep -E "qwen3_5" "$out/hf_parity.log" | head -12
rm -rf "$out/hf_parity"
