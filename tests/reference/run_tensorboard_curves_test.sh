#!/usr/bin/env bash
# run_tensorboard_curves_test.sh HSRING_BIN WORK_DIR: installs (or reuses) the reference venv
# (setup_venv.sh), then runs tensorboard_curves_test.py in it. Prints "[  SKIPPED ]" and
# exits 0 when the packages cannot be installed (ctest's SKIP_REGULAR_EXPRESSION).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hsring=$1 work=$2
if ! python=$("$here/setup_venv.sh"); then
  echo "[  SKIPPED ] tensorboard_curves: the reference packages (tensorboard) cannot be installed"
  exit 0
fi
exec "$python" "$here/tensorboard_curves_test.py" --hsring "$hsring" --work "$work"
