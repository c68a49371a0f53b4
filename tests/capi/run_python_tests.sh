#!/usr/bin/env bash
# run_python_tests.sh BIN_DIR WORK_DIR: pytest of python/hsring and the mixed pipelines,
# in the reference venv (tests/reference/setup_venv.sh: numpy, torch CPU, transformers,
# pytest). Prints "[  SKIPPED ]" and exits 0 when the venv or pytest
# cannot be had (no network), as ctest's SKIP_REGULAR_EXPRESSION expects.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin_dir=$1 work=$2
if ! python=$("$here/../reference/setup_venv.sh"); then
  echo "[  SKIPPED ] capi_python: the reference venv (numpy, torch) cannot be installed"
  exit 0
fi
if ! "$python" -c "import pytest" 2>/dev/null; then
  echo "[  SKIPPED ] capi_python: the reference venv has no pytest"
  exit 0
fi
mkdir -p "$work"
export HSRING_BIN_DIR=$bin_dir HSRING_LIB=$bin_dir/libhsring.so
export PYTHONPATH=$here/../../python${PYTHONPATH:+:$PYTHONPATH}
export PATH=$bin_dir:$PATH HSRING_TEST_PYTHON=$python
cd "$work" && exec "$python" -m pytest -q -p no:cacheprovider "$here/python" "$@"
