#!/usr/bin/env bash
# Installs what hsring needs to build on Debian 12 (run as root). Skips apt when all is there.
# --tests adds what only the test command needs (clang-format and clang-tidy, for the checks
# of formatting and of the changed files).
set -euo pipefail
packages=(cmake g++ make libboost-dev liburing-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
          libfmt-dev libgtest-dev systemd libprotobuf-dev protobuf-compiler)
[ "${1:-}" = "--tests" ] && packages+=(clang-format clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "CUDA found at /usr/local/cuda: GPU code will be built"
else
  echo "no CUDA toolkit at /usr/local/cuda: building the CPU mode only"
fi
