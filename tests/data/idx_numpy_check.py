#!/usr/bin/python3
"""idx_numpy_check.py DUMP_NPY IDX_FILE: compares what mcx's IDX reader returned (idx_dump's .npy and the indices
beside it) with numpy parsing the same gzipped or raw IDX file itself. Exit 0 equal, 1 different, 77 without numpy."""
import gzip
import sys

try:
    import numpy as np
except ImportError:
    print("idx_numpy_check.py: numpy is not installed; skipping")
    sys.exit(77)

dump, path = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
if raw[:2] == b"\x1f\x8b":
    raw = gzip.decompress(raw)
assert raw[0] == 0 and raw[1] == 0, "not an IDX file"
types = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
dtype, ndims = np.dtype(types[raw[2]]), raw[3]
dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
data = np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndims).reshape(dims)
ours = np.load(dump)
indices = np.load(dump + ".idx.npy")
want = data[indices].astype(dtype.newbyteorder("<"))
if ours.dtype != want.dtype or ours.shape != want.shape or not np.array_equal(ours, want):
    print("idx_numpy_check.py: DIFFERENT: mcx %s %s vs numpy %s %s" % (ours.dtype, ours.shape, want.dtype, want.shape))
    sys.exit(1)
print("idx_numpy_check.py: OK: %d examples of %s equal (%s, %s)" % (len(indices), path, ours.dtype, ours.shape[1:]))
