#!/usr/bin/env bash
# Creates (or reuses) the cached virtual environment the reference test runs in and prints
# its python. PyPI's only Linux x86-64 torch wheel is the CUDA build, and no CPU-only
# build is reachable (PyPI is the only registry): its libtorch links the CUDA libraries
# (libcufile, libcudart, cuBLAS, cuDNN, NCCL...), so `import torch` fails without them even
# on the CPU. So torch is installed with its own CUDA dependencies, less triton (the GPU
# compiler, not imported on the CPU): ~3 GB in the venv, once per machine. Exit 3 (and a
# reason on stderr) when the packages cannot be installed; the caller turns that into a skip.
set -uo pipefail
venv=${HSRING_REFERENCE_VENV:-$HOME/.cache/hsring/pytest-venv}
# Pinned to what dflash 0.1.0's "local" extra names.
torch_pin=torch==2.13.0
# tensorboard: its event reader checks the training curves (tensorboard_curves_test.py).
# tokenizers, jinja2, pyarrow: `hsring data prepare` (tests/data/python), Parquet included.
rest=(transformers==5.15.0 safetensors numpy pytest tensorboard
      filelock typing-extensions sympy networkx jinja2 fsspec tokenizers pyarrow)
stamp="$venv/.hsring-ready-4"
# One installer at a time: ctest runs the tests that need the venv in parallel, and
# scripts/test.sh prepares it before them. The others wait here, then find it ready.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi
start=$(date +%s)
log=$(mktemp)
{
  python3 -m venv "$venv" &&
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$torch_pin" &&
  "$venv/bin/pip" install -q --disable-pip-version-check $("$venv/bin/python" -c '
import importlib.metadata as m
from pip._vendor.packaging.requirements import Requirement
for r in m.requires("torch") or []:
    q = Requirement(r)
    if q.name != "triton" and (q.marker is None or q.marker.evaluate({"extra": ""})):
        print(str(q).split(";")[0].replace(" ", ""))
') &&
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps dflash==0.1.0 &&
  "$venv/bin/pip" install -q --disable-pip-version-check "${rest[@]}" &&
  "$venv/bin/python" -c "import torch, transformers, safetensors, dflash.model, tensorboard, tokenizers, pyarrow"
} >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  echo "reference venv: cannot install the reference packages into $venv:" >&2
  tail -n 5 "$log" >&2
  rm -f "$log"
  exit 3
fi
rm -f "$log"
touch "$stamp"
echo "reference venv: installed in $(( $(date +%s) - start )) s ($venv)" >&2
echo "$venv/bin/python"
