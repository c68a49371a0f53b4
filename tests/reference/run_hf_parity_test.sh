#!/usr/bin/env bash
# run_hf_parity_test.sh HF_FORWARD_DUMP WORK_DIR [--cuda | --hsring BIN]: runs hf_parity_test.py in the
# reference venv (setup_venv.sh installs or reuses it), else in HSRING_REFERENCE_PYTHON or
# this machine's python3 when either imports torch and transformers (the GPU machine has
# them installed, and no network). Prints "[  SKIPPED ]" and exits 0 when none can
# (ctest's SKIP_REGULAR_EXPRESSION).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dump=$1 work=$2
shift 2
# Without a GPU device the CUDA half skips at once, not after importing torch (14 s in CI).
if [ "${1:-}" = --cuda ] && ! compgen -G '/dev/nvidia[0-9]*' > /dev/null; then
  echo "[  SKIPPED ] hf_parity --cuda: no GPU (/dev/nvidia*)"
  exit 0
fi
python=${HSRING_REFERENCE_PYTHON:-}
if [ -z "$python" ] && ! python=$("$here/setup_venv.sh" 2>/dev/null); then
  python=python3
fi
if ! "$python" -c "import torch, transformers, numpy" 2>/dev/null; then
  echo "[  SKIPPED ] hf_parity: the reference packages (torch, transformers) cannot be installed or imported"
  exit 0
fi
exec "$python" "$here/hf_parity_test.py" --dump "$dump" --work "$work" "$@"
