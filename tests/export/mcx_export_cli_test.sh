#!/bin/sh
# mcx-export inspect/run on the golden v1 artifact, checked with Debian's numpy.
# Usage: mcx_export_cli_test.sh MCX_EXPORT_BINARY GOLDEN_DIR WORK_DIR
set -eu
tool=$1; golden=$2; work=$3
rm -rf "$work" && mkdir -p "$work"
"$tool" inspect "$golden/v1_mlp.mcx" > "$work/inspect.txt"
for want in "function: golden_mlp" "args[0]: f32[b,6]" "out 0: f32[b,3]" "constraints: b >= 1" \
            "format version: 1 (min reader 1)" "platforms: cpu" "fingerprint " "sha256: "; do
  grep -qF "$want" "$work/inspect.txt" || { echo "inspect output lacks '$want'"; cat "$work/inspect.txt"; exit 1; }
done
"$tool" run "$golden/v1_mlp.mcx" --in "$golden/v1_mlp_x.npy" --out-dir "$work/out4"
/usr/bin/python3 - "$golden" "$work" <<'PY'
import sys, numpy as np
golden, work = sys.argv[1], sys.argv[2]
got = np.load(f"{work}/out4/out_0.npy"); want = np.load(f"{golden}/v1_mlp_y.npy")
assert got.shape == want.shape == (4, 3), (got.shape, want.shape)
assert np.allclose(got, want, rtol=1e-5, atol=1e-6), np.abs(got - want).max()
np.save(f"{work}/x9.npy", np.linspace(-1, 1, 9 * 6, dtype=np.float32).reshape(9, 6))
PY
"$tool" run "$golden/v1_mlp.mcx" --in "$work/x9.npy" --out-dir "$work/out9"
/usr/bin/python3 -c "
import numpy as np, sys
y = np.load('$work/out9/out_0.npy')
assert y.shape == (9, 3) and y.dtype == np.float32, (y.shape, y.dtype)
assert np.allclose(y.sum(axis=1), 1, atol=1e-5), y.sum(axis=1)  # softmax rows
"
# A sharded artifact (4 devices, batch over "data") runs on 4 CPU devices and computes the same values.
"$tool" run "$golden/v1_sharded_mlp.mcx" --in "$golden/v1_mlp_x.npy" --out-dir "$work/sharded" > "$work/sharded.txt"
grep -qF "NamedSharding(mesh={data: 4}, spec=P('data',))" "$work/sharded.txt" || { cat "$work/sharded.txt"; exit 1; }
/usr/bin/python3 -c "
import numpy as np
got, want = np.load('$work/sharded/out_0.npy'), np.load('$golden/v1_mlp_y.npy')
assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6), np.abs(got - want).max()
"
# --platform: the artifact's own platform runs; another is refused naming it (not among the artifact's
# platforms, or not usable here).
"$tool" run "$golden/v1_mlp.mcx" --in "$golden/v1_mlp_x.npy" --out-dir "$work/cpu" --platform cpu > /dev/null
cmp "$work/cpu/out_0.npy" "$work/out4/out_0.npy" || { echo "--platform cpu computed other values"; exit 1; }
if "$tool" run "$golden/v1_mlp.mcx" --in "$golden/v1_mlp_x.npy" --out-dir "$work/gpu" --platform cuda 2> "$work/err_platform.txt"; then
  echo "a cpu artifact ran with --platform cuda"; exit 1
fi
grep -q "cuda" "$work/err_platform.txt" || { cat "$work/err_platform.txt"; exit 1; }
# Errors: a wrong input shape and a corrupt file exit 1 with a message.
if "$tool" run "$golden/v1_mlp.mcx" --in "$golden/v1_mlp_y.npy" --out-dir "$work/bad" 2> "$work/err.txt"; then
  echo "a wrong input shape was accepted"; exit 1
fi
grep -q "dimension 1 of args\[0\] (specification '6', found 3)" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
head -c 100 "$golden/v1_mlp.mcx" > "$work/trunc.mcx"
if "$tool" inspect "$work/trunc.mcx" 2> "$work/err2.txt"; then echo "a truncated file was accepted"; exit 1; fi
grep -q "truncated" "$work/err2.txt" || { cat "$work/err2.txt"; exit 1; }
echo "mcx-export CLI ok"
