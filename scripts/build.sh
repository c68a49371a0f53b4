#!/usr/bin/env bash
# Configures and builds one flavour of hsring through CMakePresets.json:
#   build.sh [release|asan|tsan] [--tests]  -> build/, build-asan/, build-tsan/
# Alone it builds the programs `hsring run` starts (hsring, its workers, libhsring.so); with
# --tests also the tests and benchmarks (scripts/test.sh). Prints the build folder last.
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
  release) dir=build ;;
  asan) dir=build-asan ;;
  tsan) dir=build-tsan ;;
  *) echo "usage: $0 [release|asan|tsan] [--tests]" >&2; exit 2 ;;
esac
build_preset=$flavour
[ "${2:-}" = "--tests" ] && build_preset=$flavour-tests
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
cmake --preset "$flavour" >/dev/null
cmake --build --preset "$build_preset" -j "$(nproc)"
echo "$dir"
