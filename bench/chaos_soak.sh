#!/usr/bin/env bash
# bench/chaos_soak.sh: KILLS SIGKILLs of random live workers of one `hsring run`, bounded in
# time, then a drain; reports the run's torn / lost / duplicated batches, which must be 0.
# Not run by CI (tests/crash covers the same promise in seconds); bench/RESULTS.md has runs.
#
#   bench/chaos_soak.sh [-k KILLS] [-t MAX_SECONDS] [-p PERIOD_MS] [-b BIN_DIR] [-- RUN_FLAGS...]
#   bench/chaos_soak.sh -b build/bin -k 10000 -t 1800
#
# Default run flags: --model synthetic --targets cpu:4 --drafters cpu:2 (every element of
# every batch verified by the drafters; six workers to kill). The kill loop is
# bench/chaos_kill.py. Stops killing at KILLS kills or MAX_SECONDS, whichever comes first, then
# SIGTERMs the launcher. Exits 0 when the run exited 0 with nothing torn, lost or
# duplicated, 1 when not, 2 on bad usage.
set -euo pipefail

kills_wanted=10000
max_seconds=1800
period_ms=10
bin_dir=${HSRING_BIN_DIR:-build/bin}
chaos_usage_lines=2,15
chaos_own_options=k:t:
chaos_default_run_flags=(--model synthetic --targets cpu:4 --drafters cpu:2)
chaos_option() {
  case $1 in
    k) kills_wanted=$2 ;;
    t) max_seconds=$2 ;;
  esac
}
# shellcheck source=bench/chaos_options.sh
source "$(dirname "$0")/chaos_options.sh"
chaos_parse_options "$@"
chaos_require_positive "$kills_wanted" "$max_seconds"

work=$(mktemp -d /tmp/hsring-soak-XXXXXX)

# The launcher's own deadline is a backstop past ours; the drain is our SIGTERM. The soak
# is about the data, not the crash-loop limit: a worker killed before its first batch on a
# loaded machine must not end it.
"$bin_dir/hsring" run --ring "hsring-soak-$$" --seconds $((max_seconds + 300)) --quiet \
  --max-restarts 1000000 --summary-json "$work/summary.json" "${run_flags[@]}" \
  2>"$work/launcher.log" &
launcher=$!
started=$SECONDS
kills=$(python3 "$(dirname "$0")/chaos_kill.py" "$launcher" "$kills_wanted" "$max_seconds" "$period_ms")
elapsed=$((SECONDS - started))
rc=0
if kill -0 "$launcher" 2>/dev/null; then
  kill -TERM "$launcher"
  wait "$launcher" || rc=$?
else
  wait "$launcher" || rc=$?
  echo "chaos_soak.sh: the launcher ended before the soak did (exit $rc)" >&2
  ((rc)) || rc=1
fi
launcher=

python3 - "$work/summary.json" "$kills" "$elapsed" "$rc" <<'EOF'
import json, sys
path, kills, elapsed, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    s = json.load(open(path))
except (OSError, ValueError) as e:
    print("chaos_soak.sh: FAIL: no summary (%s); launcher exit %d" % (e, rc))
    sys.exit(1)
print("chaos_soak.sh: %d SIGKILLs in %d s; launcher exit %d; %d batches consumed of %d published; "
      "restarts t %d d %d; torn %d, lost %d, duplicated %d, redelivered %d"
      % (kills, elapsed, rc, s["batches_consumed"], s["batches_published"], s["restarts_target"],
         s["restarts_drafter"], s["batches_torn"], s["batches_lost"], s["batches_duplicated"],
         s["batches_redelivered"]))
bad = [k for k in ("batches_torn", "batches_lost", "batches_duplicated") if s[k]]
if rc or bad:
    print("chaos_soak.sh: FAIL: " + ", ".join(["exit %d" % rc] * bool(rc) + bad))
    sys.exit(1)
print("chaos_soak.sh: OK: torn 0, lost 0, duplicated 0")
EOF
