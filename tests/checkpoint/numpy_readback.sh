#!/usr/bin/env bash
# A checkpoint written by 4 processes (mcx-run -n 4 --cpu-devices 2 checkpoint_worker save) read back by
# numpy alone: numpy_readback.sh MCX_RUN CHECKPOINT_WORKER numpy_readback.py. Exit 77 (skipped) without numpy and
# xxhash (python3-numpy, python3-xxhash).
set -euo pipefail
mcx_run=$1 worker=$2 reader=$3
python=""
for p in python3 /usr/bin/python3; do  # a python3 first on PATH (pyenv) may lack Debian's python3-numpy
  if "$p" -c 'import numpy, xxhash' 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then
  echo "skipped: no python3 with numpy and xxhash (scripts/install-deps.sh installs python3-numpy, python3-xxhash)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MCX_DEVICE_TIMEOUT_S=20 "$mcx_run" -n 4 --cpu-devices 2 --init-timeout 20 --timeout 50 -- "$worker" save "$dir/ckpt"
"$python" "$reader" "$dir/ckpt"
