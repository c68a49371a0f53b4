#!/usr/bin/env bash
# Fails, naming the files and lines, when a tracked C++ or CUDA source differs from what
# clang-format (Debian 12's clang-format 14, with the root .clang-format) makes of it. To
# fix: `clang-format -i FILE...`, or `git clang-format` on a change.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if ! log=$(clang-format --style=file --dry-run --Werror "${files[@]}" 2>&1); then
  echo "not clang-format clean; run clang-format -i on:" >&2
  grep -oE '^[^:]+\.(cc|h|cu|cuh):' <<<"$log" | sort -u | sed 's/:$//; s/^/  /' >&2
  exit 1
fi
echo "format: ${#files[@]} files clang-format clean"
