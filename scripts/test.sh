#!/usr/bin/env bash
# Installs, builds and runs the whole test suite through ctest: the normal build, then
# (with --sanitizers) the ASan+UBSan build and the ThreadSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed as it ends and again at the end (on failure too), so a CI
# log shows where its time went.
phases=()
phase_start=$SECONDS
phase_done() {
  phases+=("$1 $((SECONDS - phase_start)) s")
  echo "=== $1 took $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}
trap 'echo "=== phases: ${phases[*]:-none} (total ${SECONDS} s)"' EXIT
./scripts/install-deps.sh --tests
./scripts/check-format.sh
phase_done setup
flavours=(release)
failed=()
[ "${1:-}" = "--sanitizers" ] && flavours+=(asan tsan)
for flavour in "${flavours[@]}"; do
  dir=$(./scripts/build.sh "$flavour" --tests | tail -n 1)
  phase_done "build-$flavour"
  # The built-in trained target and its continuations of the built-in corpus (the default
  # job's data), once per machine (cached; ~25 s and ~40 s on two cores), so no test pays
  # for them inside its timeout.
  "$dir/bin/hsring" data builtin > /dev/null
  # clang-tidy on the sources the newest commit changed (.clang-tidy's checks), once. And
  # the reference tests' Python packages (tests/reference/setup_venv.sh: torch, transformers,
  # dflash; ~3 GB, cached per machine), installed before the tests that share them start
  # in parallel; without a network those tests skip, saying why.
  if [ "$flavour" = release ]; then
    ./scripts/check-tidy.sh HEAD~1 "$dir"
    tests/reference/setup_venv.sh > /dev/null || echo "=== no reference venv: its tests will skip"
    phase_done "tidy+venv"
  fi
  echo "=== ctest ($flavour, $dir)"
  # What each flavour leaves out, and why: CMakePresets.json's test presets (the sanitizer
  # builds skip the Python tests, the runs that measure quality at scale and, under TSan,
  # the forked crash tests). A failing flavour does not stop the others: one run reports
  # every flavour's failures. Two at a time on two cores: most tests are one thread and
  # brief. Those that kill processes or time backoffs hold a lock (EXCLUSIVE), the heavy
  # ones both cores (PROCESSORS 2), the stress tests the machine (SERIAL):
  # cmake/HsringTests.cmake.
  ctest --preset "$flavour" -j "$(nproc)" || failed+=("$flavour")
  phase_done "ctest-$flavour"
done
if ((${#failed[@]})); then
  echo "=== tests failed in: ${failed[*]}"
  exit 1
fi
