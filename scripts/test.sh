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
  dir=$(./scripts/build.sh "$flavour" | tail -n 1)
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
  selection=()  # ctest -LE / -E: what this flavour leaves out
  # Forked crash tests are not TSan's business (they prove crash safety, not races). Nor are
  # the numerics at scale: the eval's decoding and training runs, and the pretraining runs,
  # which TSan slows ~35x (the trained-drafter eval: 9 s in release, over 300 s under TSan
  # on a busy machine) and whose only threads are the compute pool's, which the
  # ThreadCountDoesNotChangeBits tests run under TSan. The sanitizer builds build no
  # benchmarks (scripts/build.sh).
  [ "$flavour" = tsan ] && selection=(-LE "crash|reference|eval"
    -E "^train[.](PretrainTest[.]|CausalLmTest[.]WrittenFolder|DflashTrainingTest[.])")
  # The reference test (tests/reference) checks the export against Python's DFlash model,
  # not hsring's memory: the release build alone (the sanitizer builds do not register it).
  # The default job's end-to-end run (200 training steps, then the eval) takes minutes
  # under ASan and runs no code the smaller training runs leave out: release only.
  [ "$flavour" = asan ] && selection=(-LE "reference" -E "^crash[.]TrainingRunTest[.]TheDefaultJob")
  # A failing flavour does not stop the others: one run reports every flavour's failures.
  # Two at a time on two cores: most tests are one thread and brief. Those that kill
  # processes or time backoffs hold a lock (EXCLUSIVE), the heavy ones both cores
  # (PROCESSORS 2), the stress tests the machine (SERIAL): cmake/HsringTests.cmake.
  ctest --test-dir "$dir" --output-on-failure --timeout 900 -j "$(nproc)" "${selection[@]}" ||
    failed+=("$flavour")
  phase_done "ctest-$flavour"
done
if ((${#failed[@]})); then
  echo "=== tests failed in: ${failed[*]}"
  exit 1
fi
