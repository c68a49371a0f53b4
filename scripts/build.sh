#!/usr/bin/env bash
# Configures and builds one flavour of hsring: build.sh [release|asan|tsan] -> build/, build-asan/, build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
  release) dir=build; extra=() ;;
  # Sanitizer builds check host code; the CUDA code is compiled (and run on a GPU) in release.
  # Nor do they build the benchmarks: bench/ measures speed, so it runs (and its smoke tests
  # check it) in release only.
  asan) dir=build-asan; extra=(-DHSRING_SANITIZE=address -DHSRING_CUDA=OFF -DHSRING_BUILD_BENCH=OFF) ;;
  tsan) dir=build-tsan; extra=(-DHSRING_SANITIZE=thread -DHSRING_CUDA=OFF -DHSRING_BUILD_BENCH=OFF) ;;
  *) echo "usage: $0 [release|asan|tsan]" >&2; exit 2 ;;
esac
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
echo "$dir"
