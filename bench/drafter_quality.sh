#!/usr/bin/env bash
# bench/drafter_quality: hsring's default DFlash drafter against an independent PyTorch
# implementation of the published recipe, by acceptance length on held-out prompts
# (bench/drafter_quality.py says what it runs; bench/RESULTS.md has the figures).
#
#   bench/drafter_quality.sh [--seeds 0,1,2] [--steps 200,1000] [--work DIR] [--json F] ...
#
# Needs a release build (build/bin/hsring, or --hsring BIN) and the reference Python
# environment of tests/reference (torch, transformers, dflash 0.1.0): $HSRING_REFERENCE_VENV,
# else ~/.cache/hsring/pytest-venv, made by tests/reference/setup_venv.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${HSRING_REFERENCE_VENV:-$HOME/.cache/hsring/pytest-venv}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "no Python environment at $venv: run tests/reference/setup_venv.sh first" >&2
  exit 2
fi
cd "$here/.."
exec "$venv/bin/python" "$here/drafter_quality.py" "$@"
