#!/usr/bin/env bash
# clang-tidy (Debian 12's clang-tidy 14, the checks in the root .clang-tidy) on the C++
# sources changed since BASE (default: main's merge base with HEAD, else HEAD~1), with the
# compile commands of BUILD_DIR (default: build). Run it before a commit:
#   scripts/check-tidy.sh [BASE] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-$(git merge-base HEAD main 2>/dev/null || echo HEAD~1)}
[ "$base" = "$(git rev-parse HEAD)" ] && base=HEAD~1
if ! git rev-parse --verify -q "$base^{commit}" > /dev/null; then
  echo "tidy: no commit $base to compare with (a shallow clone): nothing checked"
  exit 0
fi
build=${2:-build}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json: build first" >&2; exit 2; }
mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' | grep -v '^tests/' || true)
if ((${#files[@]} == 0)); then echo "tidy: no C++ source changed since $base"; exit 0; fi
echo "tidy: ${#files[@]} files changed since $(git rev-parse --short "$base")"
status=0
for f in "${files[@]}"; do
  clang-tidy -p "$build" --quiet "$f" 2>/dev/null || { echo "  ^ $f" >&2; status=1; }
done
exit $status
