#!/usr/bin/env bash
# Configures and builds one flavour of hsring: build.sh [release|asan|tsan] -> build/, build-asan/, build-tsan/
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
case "$flavour" in
  release) dir=build; extra=() ;;
  # Sanitizer builds check host code; the CUDA code is compiled (and run on a GPU) in release.
  asan) dir=build-asan; extra=(-DHSRING_SANITIZE=address -DHSRING_CUDA=OFF) ;;
  tsan) dir=build-tsan; extra=(-DHSRING_SANITIZE=thread -DHSRING_CUDA=OFF) ;;
  *) echo "usage: $0 [release|asan|tsan]" >&2; exit 2 ;;
esac
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
echo "$dir"
