#!/bin/bash
# Builds of the CUDA forward side by side on one GPU, in one call:
#   bench/forward_compare.sh OUT_DIR MODELS BIN_DIR...
# MODELS: forward_bench presets, comma-separated (qwen3.6-27b,qwen3-8b); the first BIN_DIR is
# the baseline, each holds forward_bench and cuda_model_test (hf_forward_dump too for the
# last). In order:
#   1. every build but the baseline: its whole cuda_model_test;
#   2. the last build: `hf_parity --cuda` against transformers (when it has hf_forward_dump);
#   3. with ncu on the PATH or in /usr/local/cuda/bin, unless NO_NCU is set: each build's
#      time per launch of the kernels between the GEMMs (median over one 8-layer forward,
#      `forward_bench --forward-only`; no clock or cache control: the forward's own
#      conditions), per model;
#   4. with NCU_DETAIL set to a kernel-name regex (e.g. attention_kernel): where that kernel's
#      time goes, per build and model, from one launch (ncu's occupancy, scheduler and
#      warp-state sections: issue slots, eligible warps, the stall reasons);
#   5. the full forwards, builds alternating, ROUNDS times (default 2) per model: the time
#      of one forward and its ratio to the same run's cuBLAS rate.
# Key lines go to stdout and to OUT_DIR/summary.txt (a device call brings back only a few
# of OUT_DIR's files, and only the tail of stdout), every log to OUT_DIR. Exits 1 when a
# build fails its tests, hf_parity or a forward.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 OUT_DIR MODELS BIN_DIR..." >&2; exit 2; }
out=$1 models=${2//,/ }
shift 2
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-2}
mkdir -p "$out"
exec > >(tee "$out/summary.txt")
tee_pid=$!
builds=()
for dir in "$@"; do builds+=("$(cd "$dir" && pwd)"); done
name() { basename "$1"; }
status=0
for dir in "${builds[@]:1}"; do
  log="$out/model_test_$(name "$dir").log"
  timeout 300 "$dir/cuda_model_test" > "$log" 2>&1
  rc=$?
  echo "$(name "$dir") cuda_model_test: exit $rc, $(grep -cE '^\[       OK \]' "$log") passed," \
    "$(grep -cE '^\[  SKIPPED \]' "$log") skipped"
  grep -E '^\[  FAILED  \]' "$log" | sort -u
  [ $rc -eq 0 ] || status=1
done
last=${builds[-1]}
if [ -x "$last/hf_forward_dump" ]; then
  HSRING_REFERENCE_PYTHON=${HSRING_REFERENCE_PYTHON:-python3} timeout 300 \
    bash "$here/../tests/reference/run_hf_parity_test.sh" "$last/hf_forward_dump" "$out/hf_parity" \
    --cuda > "$out/hf_parity.log" 2>&1
  rc=$?
  echo "$(name "$last") hf_parity --cuda: exit $rc"
  grep -E '\(CUDA\)|MISMATCH|SKIPPED' "$out/hf_parity.log"
  [ $rc -eq 0 ] || status=1
  rm -rf "$out/hf_parity"
fi
ncu=$(command -v ncu || { [ -x /usr/local/cuda/bin/ncu ] && echo /usr/local/cuda/bin/ncu; })
[ -z "${NO_NCU:-}" ] || ncu=
kernels='rms_norm|swiglu|qkv_finish|output_gate|attention|delta_conv|delta_gates|delta_prepare|delta_state|gated_rms|capture|argmax'
for model in $models; do
  [ -n "$ncu" ] || break
  for dir in "${builds[@]}"; do
    csv="$out/ncu_${model}_$(name "$dir").csv"
    timeout 300 "$ncu" --clock-control none --cache-control none --kernel-name "regex:$kernels" \
      --metrics gpu__time_duration.sum --csv \
      "$dir/forward_bench" --model "$model" --num-layers 8 --layers 2 --iterations 1 --warmup 0 \
      --forward-only > "$csv" 2>&1
    python3 - "$csv" "$model $(name "$dir")" <<'PY'
import csv, re, statistics, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.reader(lines))
if not rows:
    sys.exit(print(sys.argv[2], "ncu: no kernels (see the csv)"))
head, times = rows[0], {}
name, value = head.index("Kernel Name"), head.index("Metric Value")
for r in rows[1:]:
    # The function's own name: the identifier before its argument list (and template's).
    kernel = re.search(r"([A-Za-z_]\w*)(<[^()]*>)?\(", r[name]).group(1)
    times.setdefault(kernel, []).append(float(r[value].replace(",", "")) / 1e3)
print(sys.argv[2], "us per launch:",
      ", ".join(f"{k} {statistics.median(v):.1f} (x{len(v)})" for k, v in sorted(times.items())))
PY
  done
done
for model in $models; do
  [ -n "$ncu" ] && [ -n "${NCU_DETAIL:-}" ] || break
  for dir in "${builds[@]}"; do
    report="$out/ncu_detail_${model}_$(name "$dir").txt"
    timeout 300 "$ncu" --clock-control none --kernel-name "regex:$NCU_DETAIL" --launch-skip 1 \
      --launch-count 1 --section Occupancy --section SchedulerStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      "$dir/forward_bench" --model "$model" --num-layers 8 --layers 2 --iterations 1 --warmup 0 \
      --forward-only > "$report" 2>&1
    echo "$model $(name "$dir") $NCU_DETAIL:" $(grep -E 'Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Mem Pipes Busy|Max Bandwidth|stalled' "$report" | sed -E 's/ {2,}/ /g' | tr '\n' ';')
  done
done
for model in $models; do
  for round in $(seq "$rounds"); do
    for dir in "${builds[@]}"; do
      log="$out/forward_${model}_$(name "$dir")_$round.log"
      timeout 300 "$dir/forward_bench" --model "$model" --tokens 16384 --iterations 3 --warmup 1 \
        > "$log" 2>&1
      result=$(grep -E '^(forward_ms|forward_over_cublas|cublas_gemm_tflops|attention_ms_per_layer|attention_wgmma_speed_over_mma_sync_32)=' "$log" | tr '\n' ' ')
      if [ -z "$result" ]; then
        result="failed: $(tail -1 "$log")"
        status=1
      fi
      echo "$model $(name "$dir") $round: $result"
    done
  done
done
# The summary is whole before the caller reads it: tee has written everything and exited.
exec >&-
wait "$tee_pid"
exit $status
