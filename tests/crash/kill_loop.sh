#!/usr/bin/env bash
# The crash acceptance run, by hand (e.g. on a GPU machine): starts `hsring run` with the
# given flags, SIGKILLs one random live target and one random live drafter every PERIOD
# ms until the launcher exits, then checks its summary: exit 0, and no batch torn, lost or
# duplicated. crash.LauncherTest.KillsEvery200MsForAWholeRunLoseNothing is the automated
# version; ctest also runs this script briefly (crash.kill_loop_script).
#
#   tests/crash/kill_loop.sh [-p PERIOD_MS] [-b BIN_DIR] -- RUN_FLAGS...
#   tests/crash/kill_loop.sh -b build/bin -- --seconds 30 --max-restarts 100000
#
# Exits 0 when the run kept its promise, 1 when it did not, 2 on bad usage.
set -euo pipefail

period_ms=200
bin_dir=${HSRING_BIN_DIR:-}
usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while getopts "p:b:h" opt; do
  case $opt in
    p) period_ms=$OPTARG ;;
    b) bin_dir=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $period_ms =~ ^[0-9]+$ && $period_ms -gt 0 ]] || usage
if [[ ! -x $bin_dir/hsring ]]; then
  echo "kill_loop.sh: no hsring in '$bin_dir' (pass -b BIN_DIR or set HSRING_BIN_DIR)" >&2
  exit 2
fi

ring=hsring-killloop-$$
summary=$(mktemp /tmp/hsring-killloop-XXXXXX.json)
launcher=
cleanup() {
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  rm -f "$summary"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin_dir/hsring" run --ring "$ring" --summary-json "$summary" "$@" &
launcher=$!

sleep_s=$(printf '%d.%03d' $((period_ms / 1000)) $((period_ms % 1000)))
kills=0
while kill -0 "$launcher" 2>/dev/null; do
  sleep "$sleep_s"
  for program in hsring-target hsring-drafter; do
    # Live children only: a worker waiting out its restart backoff has no process.
    mapfile -t pids < <(pgrep -P "$launcher" -x "$program" || true)
    ((${#pids[@]})) || continue
    if kill -KILL "${pids[RANDOM % ${#pids[@]}]}" 2>/dev/null; then kills=$((kills + 1)); fi
  done
done
rc=0
wait "$launcher" || rc=$?
launcher=

value() { sed -n "s/^ *\"$1\": \([0-9.]*\),\{0,1\}$/\1/p" "$summary"; }
echo "kill_loop.sh: $kills SIGKILLs; launcher exit $rc"
if [[ ! -s $summary ]]; then
  echo "kill_loop.sh: FAIL: no summary written" >&2
  exit 1
fi
cat "$summary"
failed=0
[[ $rc -eq 0 ]] || failed=1
for key in batches_torn batches_lost batches_duplicated; do
  v=$(value "$key")
  if [[ $v != 0 ]]; then
    echo "kill_loop.sh: FAIL: $key is '$v'" >&2
    failed=1
  fi
done
if ((failed)); then
  echo "kill_loop.sh: FAIL" >&2
  exit 1
fi
echo "kill_loop.sh: OK: nothing torn, lost or duplicated"
