#!/bin/bash
# Device time of every kernel of one DFlash step at the qwen3-8b shape, from Nsight Compute
# (on the GPU machine): bench/ncu_dflash_step.sh BIN_DIR OUT_DIR ["KERNEL ..."].
# Writes OUT_DIR/kernels.csv (one row a launch) and prints the time summed by kernel name,
# largest first; then, for each kernel named, the full sections of its first launch
# (OUT_DIR/KERNEL.txt). Clocks are left as they are (--clock-control none)
# and caches are not flushed between launches (--cache-control none), as in a real step.
set -eu
bin=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
ncu --profile-from-start off --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum --csv --print-units base --print-kernel-base function \
  "$bin/drafter_step_bench" --warmup 1 --iterations 1 --profile > "$out/kernels.csv" 2> "$out/ncu.err"
python3 - "$out/kernels.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
name, value = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    short = r[name].replace("(anonymous namespace)::", "").split("(")[0].split("<")[0].strip()
    total[short] += float(r[value].replace(",", "")) / 1e6  # ns -> ms
    count[short] += 1
step = sum(total.values())
print(f"kernels={sum(count.values())} device_ms={step:.2f}")
for k, ms in total.most_common():
    print(f"{ms:8.2f} ms {100 * ms / step:5.1f}% x{count[k]:<4d} {k}")
PY
# Each kernel named in the space-separated KERNELS: the full sections of its first launch.
for kernel in ${3:-}; do
  ncu --profile-from-start off --clock-control none --cache-control none --set full \
    -k "$kernel" --launch-count 1 \
    "$bin/drafter_step_bench" --warmup 1 --iterations 1 --profile > "$out/$kernel.txt" 2>&1
  echo "== $kernel"
  grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|Block Limit|Shared Memory Configuration|L1/TEX Hit|Executed Ipc A" "$out/$kernel.txt" | head -30
done
