#!/bin/bash
# Runs the GPU tests (ctest -L gpu) and transport_bench on a GPU machine, from a build
# folder configured and built elsewhere and carried there (docs/gpu-data-path.md):
#   tests/gpu/device_run.sh [BUILD_DIR] [OUT_DIR]
# Logs go to OUT_DIR (ctest_gpu.log, transport_bench.log, machine.txt). Exit status: ctest's.
set -u
build=$(cd "${1:-build-gpu}" && pwd)
out=${2:-/tmp/hsring-gpu-run}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0

# ctest files hold the absolute paths of the machine that configured the build: make the
# source and build folders reachable there, and the GoogleTest discovery script too.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
here=$(cd "$(dirname "$build")" && pwd)
if [ -n "$src" ] && [ "$src" != "$here" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")" && ln -s "$here" "$src"
fi
gtest_script=$(grep -ho 'include("[^"]*GoogleTestAddTests.cmake")' -r "$build/tests" | head -1 | sed 's/include("\(.*\)")/\1/')
if [ -n "$gtest_script" ] && [ ! -e "$gtest_script" ] && [ -e "$build/GoogleTestAddTests.cmake" ]; then
  mkdir -p "$(dirname "$gtest_script")" && cp "$build/GoogleTestAddTests.cmake" "$gtest_script"
fi

{
  date -u
  nvidia-smi -L
  nvidia-smi topo -m 2>/dev/null | head -5
  echo "ulimit -l: $(ulimit -l)"
  df -h /dev/shm | tail -1
  nproc
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

cd "$src/$(basename "$build")" 2>/dev/null || cd "$build"
status=0
if command -v ctest > /dev/null; then
  ctest -L gpu -V --timeout 400 2>&1 | tee "$out/ctest_gpu.log" |
    grep -E "Test +#|tests passed|tests failed|Total Test|Failed|\*\*\*|\[          \]|Failure"
  status=${PIPESTATUS[0]}
else
  echo "no ctest on this machine: running the test programs directly" | tee "$out/ctest_gpu.log"
  for t in gpu_host_test gpu_preflight_test gpu_kernels_test gpu_pipeline_test gpu_launcher_test; do
    HSRING_BIN_DIR="$build/bin" "$build/bin/$t" 2>&1 | tee -a "$out/ctest_gpu.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]"
    status=$((status | PIPESTATUS[0]))
  done
fi
# HSRING_SKIP_BENCH=1: tests only. Arguments after the first two go to transport_bench.
if [ "${HSRING_SKIP_BENCH:-0}" != 1 ]; then
  "$build/bin/transport_bench" "${@:3}" 2>&1 | tee "$out/transport_bench.log"
fi
exit $status
