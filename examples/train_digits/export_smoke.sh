#!/usr/bin/env bash
# Trains briefly, exports the predictor with a symbolic batch, and serves it with mcx-export at two batch
# sizes: the whole held-out set and its first 7 rows must give valid classes, the same for the same images.
#   export_smoke.sh TRAIN_DIGITS MCX_EXPORT DATA
set -euo pipefail
train=$1 mcx_export=$2 data=$3
[ -f "$data" ] || { echo "export_smoke: $data not found (run scripts/fetch-digits.sh); skipping"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$train" --data "$data" --epochs 8 --threads 2 --min-accuracy 0.9 \
  --export "$dir/model.mcx" --export-samples "$dir/test_x.npy"
"$mcx_export" inspect "$dir/model.mcx"
"$mcx_export" run "$dir/model.mcx" --in "$dir/test_x.npy" --out-dir "$dir/all"
/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
x = np.load(f"{d}/test_x.npy")
np.save(f"{d}/first7.npy", x[:7])
PY
"$mcx_export" run "$dir/model.mcx" --in "$dir/first7.npy" --out-dir "$dir/few"
/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
x, all_, few = np.load(f"{d}/test_x.npy"), np.load(f"{d}/all/out_0.npy"), np.load(f"{d}/few/out_0.npy")
assert all_.shape == (x.shape[0],), (all_.shape, x.shape)
assert few.shape == (7,), few.shape
assert ((all_ >= 0) & (all_ <= 9)).all(), all_
assert (few == all_[:7]).all(), (few, all_[:7])
print(f"export_smoke: OK: {x.shape[0]} and 7 images classified from one artifact")
PY
