#!/bin/bash
# AdamW settings compared at a real shape: the qwen3-8b target (random weights, CUDA
# forward) and its default DFlash drafter (1.05 B trained parameters) on one GPU, trained
# with `--deterministic` on the same batches in the same order under each setting, then
# the summaries side by side. The data is byte-level text packed from TEXT_DIR (the GPU
# machine's Python standard library serves), and the drafter learns the target's own
# greedy tokens (`--labels target`), so every batch is one the drafter has not seen: the
# teacher-forced tau of the last steps measures what it learned, not what it memorised.
#   bench/gpu_optimizer_compare.sh BIN_DIR OUT_DIR [BATCHES] [TEXT_DIR]
set -u
bin=$(cd "$1" && pwd)
out=$2
batches=${3:-60}
text=${4:-$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')}
mkdir -p "$out"
corpus=/tmp/hsring-optimizer-corpus
rm -rf "$corpus"
"$bin/hsring" data pack "$text" -o "$corpus" > "$out/pack.log" 2>&1 || { cat "$out/pack.log"; exit 1; }
run_case() {  # name, then the optimizer flags
  local name=$1
  shift
  local ring="hsring-optim-$name"
  "$bin/hsring" ring remove "$ring" > /dev/null 2>&1
  local start=$SECONDS
  "$bin/hsring" run --ring "$ring" --model qwen3-8b --targets 0 --drafters 0 --data "$corpus" \
    --labels target --max-tokens 16384 --slots 4 --no-split-fc-layers --deterministic \
    --batches "$batches" --checkpoint-every 0 --run-dir "/tmp/hsring-optim-$name" \
    --summary-json "$out/summary-$name.json" --quiet "$@" > "$out/run-$name.log" 2>&1
  echo "== $name ($*): exit $? in $((SECONDS - start)) s"
  python3 - "$out/summary-$name.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("   steps %s, loss %.4f -> %.4f, teacher-forced tau %.3f, agreement %.3f" % (
    s.get("steps"), s.get("initial_loss", 0), s.get("final_loss", 0),
    s.get("acceptance_length_teacher_forced", 0), s.get("agreement", 0)))
EOF
  rm -rf "/tmp/hsring-optim-$name"
}
run_case hsring --lr 1e-3 --adam-beta2 0.95 --weight-decay 0.01 --max-grad-norm 1.0
run_case specforge-qwen3-8b --lr 6e-4 --adam-beta2 0.999 --weight-decay 0 --max-grad-norm 1.0
run_case specforge-cli --lr 1e-4 --adam-beta2 0.999 --weight-decay 0 --max-grad-norm 0.5
