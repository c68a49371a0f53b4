#!/usr/bin/env bash
# Installs, builds and runs the whole test suite through ctest: the normal build, then
# (with --sanitizers) the ASan+UBSan build and the ThreadSanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --tests
./scripts/check-format.sh
flavours=(release)
[ "${1:-}" = "--sanitizers" ] && flavours+=(asan tsan)
for flavour in "${flavours[@]}"; do
  dir=$(./scripts/build.sh "$flavour" | tail -n 1)
  # The built-in trained target, once per machine (cached; ~25 s on two cores), so no test
  # pays for it inside its timeout.
  "$dir/bin/hsring" model builtin > /dev/null
  # clang-tidy on the sources the newest commit changed (.clang-tidy's checks), once.
  [ "$flavour" = release ] && ./scripts/check-tidy.sh HEAD~1 "$dir"
  echo "=== ctest ($flavour, $dir)"
  labels=()
  # Forked crash tests are not TSan's business (they prove crash safety, not races).
  [ "$flavour" = tsan ] && labels=(-LE "crash|bench|reference")
  # The reference test (tests/reference) checks the export against Python's DFlash model,
  # not hsring's memory: the release build alone (the sanitizer builds do not register it).
  [ "$flavour" = asan ] && labels=(-LE "reference")
  ctest --test-dir "$dir" --output-on-failure --timeout 900 "${labels[@]}"
done
