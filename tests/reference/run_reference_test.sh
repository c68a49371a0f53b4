#!/usr/bin/env bash
# run_reference_test.sh HSRING_BIN WORK_DIR: installs (or reuses) the reference venv, then
# runs dflash_reference_test.py in it. Prints "[  SKIPPED ]" and exits 0 when the packages
# cannot be installed (ctest's SKIP_REGULAR_EXPRESSION).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hsring=$1 work=$2
start=$(date +%s)
if ! python=$("$here/setup_venv.sh"); then
  echo "[  SKIPPED ] dflash_reference: the reference packages (torch, transformers, dflash) cannot be installed"
  exit 0
fi
echo "reference venv ready after $(( $(date +%s) - start )) s"
exec "$python" "$here/dflash_reference_test.py" --hsring "$hsring" --work "$work"
