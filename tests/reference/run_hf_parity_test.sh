#!/usr/bin/env bash
# run_hf_parity_test.sh HF_FORWARD_DUMP WORK_DIR: installs (or reuses) the reference venv,
# then runs hf_parity_test.py in it. Prints "[  SKIPPED ]" and exits 0 when the packages
# cannot be installed (ctest's SKIP_REGULAR_EXPRESSION).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dump=$1 work=$2
if ! python=$("$here/setup_venv.sh"); then
  echo "[  SKIPPED ] hf_parity: the reference packages (torch, transformers) cannot be installed"
  exit 0
fi
exec "$python" "$here/hf_parity_test.py" --dump "$dump" --work "$work"
