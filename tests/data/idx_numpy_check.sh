#!/usr/bin/env bash
# idx_numpy_check.sh IDX_DUMP DATA_DIR: mcx's IDX reader against numpy on the four Fashion-MNIST files (examples
# spread over each file, bit for bit). Exit 77 (skipped) without the data (bash scripts/fetch-fashion-mnist.sh) or
# without numpy.
set -uo pipefail
dump=$1
dir=$2
here=$(dirname "$0")
# Debian's interpreter, which scripts/install-deps.sh gives numpy (another python3 may come first in PATH).
python=/usr/bin/python3
[ -x "$python" ] || python=python3
[ -f "$dir/train-images-idx3-ubyte.gz" ] || { echo "idx_numpy_check.sh: no data in $dir; skipping"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  "$dump" "$dir/$f" "$work/$f.npy" 300 || exit 1
  "$python" "$here/idx_numpy_check.py" "$work/$f.npy" "$dir/$f"
  rc=$?
  [ $rc -eq 0 ] || exit $rc
done
