#!/usr/bin/env bash
# bench/chaos.sh: a training run's throughput under chaos against the same run unkilled.
# Runs `hsring run` twice with the same flags, the second time SIGKILLing one random live
# worker (target or drafter) every PERIOD ms, and prints the ratio of the two runs' batches
# consumed per second (aim: at least 0.5), of their training steps, how many checkpoints the
# killed run wrote, and its torn / lost / duplicated batches (must be 0). Not run by CI.
#
#   bench/chaos.sh [-s SECONDS] [-p PERIOD_MS] [-b BIN_DIR] [-w WORK_DIR] [-- RUN_FLAGS...]
#   bench/chaos.sh -b build/bin -s 60 -- --model tiny --checkpoint-every 5
#
# Default run flags: --model tiny --checkpoint-every 5 --no-eval. Exits 0 when the killed
# run kept half the throughput, wrote checkpoints, exited 0 and lost nothing; 1 when not;
# 2 on bad usage.
set -euo pipefail

seconds=60
period_ms=2000
bin_dir=${HSRING_BIN_DIR:-build/bin}
work=
chaos_usage_lines=2,13
chaos_own_options=s:w:
chaos_default_run_flags=(--model tiny --checkpoint-every 5 --no-eval)
chaos_option() {
  case $1 in
    s) seconds=$2 ;;
    w) work=$2 ;;
  esac
}
# shellcheck source=bench/chaos_options.sh
source "$(dirname "$0")/chaos_options.sh"
chaos_parse_options "$@"
chaos_require_positive "$seconds"
[[ -n $work ]] || work=$(mktemp -d /tmp/hsring-chaos-XXXXXX)
mkdir -p "$work"

# run NAME KILL: one run in WORK/NAME; KILL=1 SIGKILLs a random live worker every period.
# Leaves NAME/summary.json, NAME/launcher.log, NAME/rc and NAME/kills.
run() {
  local name=$1 kill_workers=$2 dir=$work/$1
  rm -rf "$dir" && mkdir -p "$dir"
  # The launcher's default restart limits: chaos must not look like a crash loop to it.
  "$bin_dir/hsring" run --ring "hsring-chaos-$$-$name" --seconds "$seconds" \
    --run-dir "$dir/run" --log-dir "$dir/logs" --summary-json "$dir/summary.json" \
    "${run_flags[@]}" 2>"$dir/launcher.log" &
  launcher=$!
  local kills=0 sleep_s
  sleep_s=$(printf '%d.%03d' $((period_ms / 1000)) $((period_ms % 1000)))
  while kill -0 "$launcher" 2>/dev/null; do
    sleep "$sleep_s"
    ((kill_workers)) || continue
    # Live workers only: one waiting out its restart delay has no process.
    mapfile -t pids < <(pgrep -P "$launcher" -x hsring-target; pgrep -P "$launcher" -x hsring-drafter)
    ((${#pids[@]})) || continue
    if kill -KILL "${pids[RANDOM % ${#pids[@]}]}" 2>/dev/null; then kills=$((kills + 1)); fi
  done
  local rc=0
  wait "$launcher" || rc=$?
  launcher=
  echo "$rc" >"$dir/rc"
  echo "$kills" >"$dir/kills"
}

echo "chaos.sh: $seconds s per run, flags: ${run_flags[*]}; work in $work"
run steady 0
run chaos 1

python3 - "$work" "$period_ms" "$seconds" <<'EOF'
import glob, json, os, re, sys
work, period_ms, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def load(name):
    d = os.path.join(work, name)
    s = json.load(open(os.path.join(d, "summary.json")))
    logs = "".join(open(p).read() for p in glob.glob(os.path.join(d, "logs", "*.log")))
    s["checkpoints"] = len(re.findall(r"\] checkpoint \S+\.hsckpt", logs))
    s["rc"] = int(open(os.path.join(d, "rc")).read())
    s["kills"] = int(open(os.path.join(d, "kills")).read())
    # Over the run asked for: a run that ended early (a crash loop) delivered nothing after.
    s["rate"] = s["batches_consumed"] / max(s["wall_s"], seconds)
    return s
steady, chaos = load("steady"), load("chaos")
for name, s in (("steady", steady), ("chaos", chaos)):
    print("%-6s exit %d: %d batches consumed in %.1f s (%.2f/s), %s steps, %d checkpoints; "
          "%d SIGKILLs, restarts t %d d %d; torn %d lost %d duplicated %d"
          % (name, s["rc"], s["batches_consumed"], s["wall_s"], s["rate"], s.get("steps", "-"),
             s["checkpoints"], s["kills"], s["restarts_target"], s["restarts_drafter"],
             s["batches_torn"], s["batches_lost"], s["batches_duplicated"]))
ratio = chaos["rate"] / steady["rate"] if steady["rate"] else 0.0
steps = (chaos.get("steps", 0) / steady["steps"]) if steady.get("steps") else float("nan")
print("chaos.sh: throughput ratio %.2f (batches consumed per second, killed / steady; aim >= 0.5); "
      "steps ratio %.2f; one SIGKILL every %d ms" % (ratio, steps, period_ms))
failed = []
if ratio < 0.5: failed.append("throughput ratio %.2f < 0.5" % ratio)
if chaos["checkpoints"] == 0 and steady["checkpoints"] > 0: failed.append("no checkpoint landed")
for key in ("batches_torn", "batches_lost", "batches_duplicated"):
    if chaos[key] or steady[key]: failed.append("%s %d / %d" % (key, steady[key], chaos[key]))
if steady["rc"] or chaos["rc"]: failed.append("exit %d / %d" % (steady["rc"], chaos["rc"]))
print("chaos.sh: " + ("FAIL: " + "; ".join(failed) if failed else "OK"))
sys.exit(1 if failed else 0)
EOF
