#!/bin/bash
# Issue #7's shape on the GPUs at hand: 5 target processes (the qwen3-8b forward, random
# weights) and 3 drafter processes spread over the machine's GPUs, several per GPU, for
# SECONDS; then the same run with one random target SIGKILLed every KILL_PERIOD seconds.
# Each run's per-second progress lines (throughput dip and recovery), summary (torn, lost,
# duplicated) and final status (stage timings) go to OUT_DIR.
#   bench/gpu_crowd_run.sh BUILD_DIR OUT_DIR [SECONDS] [KILL_PERIOD] [MAX_TOKENS]
set -u
build=$(cd "$1" && pwd)
out=$2
seconds=${3:-90}
kill_period=${4:-20}
tokens=${5:-8192}
mkdir -p "$out"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  targets=0,0,0,1,1 drafters=1,1,0
else
  targets=0,0,0,0,0 drafters=0,0,0
fi
run_case() {  # name kill(0|1)
  local ring="hsring-crowd-$1"
  "$build/bin/hsring" ring remove "$ring" > /dev/null 2>&1
  "$build/bin/hsring" run --ring "$ring" --model qwen3-8b --targets "$targets" --drafters "$drafters" \
    --max-tokens "$tokens" --slots 14 --hs-min-ready 1 --no-split-fc-layers --seconds "$seconds" \
    --max-restarts 1000 --run-dir "$out/run-$1" --keep-ring --summary-json "$out/summary-$1.json" \
    > "$out/run-$1.log" 2>&1 &
  local launcher=$!
  if [ "$2" = 1 ]; then
    sleep "$kill_period"
    while kill -0 "$launcher" 2> /dev/null; do
      victim=$(pgrep -f "hsring-target --ring $ring " | shuf -n 1)
      [ -n "$victim" ] && kill -9 "$victim" && echo "$(date +%s.%N) SIGKILL target pid $victim" >> "$out/kills-$1.log"
      sleep "$kill_period"
    done
  fi
  wait "$launcher"
  echo "== $1 (targets $targets, drafters $drafters, kills: $2): exit $?"
  grep -E "summary|error" "$out/run-$1.log" | tail -3
  cat "$out/summary-$1.json"
  "$build/bin/hsring" status --ring "$ring" --interval 0 > "$out/status-$1.txt" 2>&1
  grep -E "target.forward|drafter.claim_wait" "$out/status-$1.txt" | head -8
  "$build/bin/hsring" ring remove "$ring" > /dev/null 2>&1
}
run_case steady 0
run_case kills 1
[ -f "$out/kills-kills.log" ] && cat "$out/kills-kills.log"
exit 0
