#!/usr/bin/env bash
# run_prepare_tests.sh BIN_DIR WORK_DIR: pytest of `hsring data prepare` (python/hsring/prepare,
# tests/data/python) in the reference venv (tests/reference/setup_venv.sh: transformers,
# tokenizers, jinja2, pyarrow, pytest). Prints "[  SKIPPED ]" and exits 0 when the venv or
# pytest cannot be had (no network), as ctest's SKIP_REGULAR_EXPRESSION expects.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin_dir=$1 work=$2
if ! python=$("$here/../reference/setup_venv.sh"); then
  echo "[  SKIPPED ] data_prepare_python: the reference venv (transformers, tokenizers) cannot be installed"
  exit 0
fi
if ! "$python" -c "import pytest, transformers, tokenizers" 2>/dev/null; then
  echo "[  SKIPPED ] data_prepare_python: the reference venv has no pytest, transformers or tokenizers"
  exit 0
fi
mkdir -p "$work"
export HSRING_BIN_DIR=$bin_dir
export PYTHONPATH=$here/../../python${PYTHONPATH:+:$PYTHONPATH}
cd "$work" && exec "$python" -m pytest -q -p no:cacheprovider "$here/python" "$@"
