# shellcheck shell=bash
# shellcheck disable=SC2154  # chaos_usage_lines, chaos_own_options: set by the sourcing script
# bench/chaos_options.sh: what bench/chaos.sh and bench/chaos_soak.sh share, sourced by both:
# their common options (-p PERIOD_MS, -b BIN_DIR, -h), the usage text read from the script's
# own header, the checks of numbers and of the hsring binary, the run flags after "--" (or
# the script's defaults), and the stop of a launcher still running when the script exits.
#
# Before sourcing, a script sets: chaos_usage_lines (the header lines that are its usage,
# "2,13"), chaos_own_options (its own getopts letters, each taking a value, "s:w:"), a
# function chaos_option LETTER VALUE that takes one of them, chaos_default_run_flags (an
# array), and the defaults of period_ms and bin_dir. Then:
#   chaos_parse_options "$@"            # sets period_ms, bin_dir, run_flags
#   chaos_require_positive "$n" ...     # usage (exit 2) unless each is a positive integer
# and sets `launcher` to the launcher's pid while one runs.

chaos_usage() {
  sed -n "${chaos_usage_lines}p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

chaos_parse_options() {
  local opt OPTIND=1
  while getopts "${chaos_own_options}p:b:h" opt; do
    case $opt in
      p) period_ms=$OPTARG ;;
      b) bin_dir=$OPTARG ;;
      h | '?') chaos_usage ;;
      *) chaos_option "$opt" "$OPTARG" ;;
    esac
  done
  shift $((OPTIND - 1))
  chaos_require_positive "$period_ms"
  if [[ ! -x $bin_dir/hsring ]]; then
    echo "$(basename "$0"): no hsring in '$bin_dir' (pass -b BIN_DIR or set HSRING_BIN_DIR)" >&2
    exit 2
  fi
  run_flags=("$@")
  ((${#run_flags[@]})) || run_flags=("${chaos_default_run_flags[@]}")
}

chaos_require_positive() {
  local n
  for n in "$@"; do [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || chaos_usage; done
}

launcher=
chaos_stop_launcher() {
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
}
trap chaos_stop_launcher EXIT
trap 'exit 130' INT TERM
