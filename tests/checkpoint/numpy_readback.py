#!/usr/bin/env python3
"""Reads an mcx checkpoint with json, hashlib, xxhash and numpy alone (the format of docs/checkpoint.md) and checks it
against the values checkpoint_worker saves: element i of w = i/4 - 7 (f32), b = 1.5 i (f32), p = 7 i - 100
(i32), e = i/3 (f64), step = 42 (i64). Usage: numpy_readback.py ROOT. Exit 0 when every step matches."""
import hashlib
import json
import os
import sys

import numpy as np
import xxhash

# The checksums a manifest may name (docs/checkpoint.md, "Format").
CHECKSUMS = {"xxh3-128": xxhash.xxh3_128, "sha256": hashlib.sha256}


def load_step(step_dir):
    """Returns ({leaf path: numpy array}, metadata) of one committed step, verifying every hash."""
    with open(os.path.join(step_dir, "COMMIT")) as f:
        commit = json.load(f)
    with open(os.path.join(step_dir, "manifest.json"), "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == commit["manifest_sha256"], "manifest changed after the commit"
    manifest = json.loads(raw)
    assert manifest["format"] == "mcx.checkpoint" and manifest["version"] == 3
    checksum = CHECKSUMS[manifest["checksum"]]
    chunk_bytes = manifest["chunk_bytes"]
    leaves = {}
    for leaf in manifest["leaves"]:
        out = np.zeros(leaf["shape"], dtype=np.dtype(leaf["dtype"]))
        covered = np.zeros(leaf["shape"], dtype=np.int32)
        for shard in leaf["shards"]:
            path = os.path.join(step_dir, shard["file"])
            with open(path, "rb") as f:
                data = f.read()
            assert len(data) == shard["bytes"], path + ": size differs from the manifest"
            chunks = [checksum(data[k:k + chunk_bytes]).digest() for k in range(0, len(data), chunk_bytes)]
            assert [c.hex() for c in chunks] == shard["chunk_digests"], path + ": a chunk's digest differs"
            # The file's digest: the checksum over its chunk digests (no second pass over the bytes).
            assert checksum(b"".join(chunks)).hexdigest() == shard["digest"], path + ": digest"
            box = tuple(slice(a, b) for a, b in zip(shard["start"], shard["stop"]))
            out[box] = np.load(path)
            covered[box] += 1
        assert (covered == 1).all(), leaf["path"] + ": shards do not cover every element exactly once"
        leaves[leaf["path"]] = out
    return leaves, manifest["metadata"]


def expected():
    i = lambda n: np.arange(n, dtype=np.float64)
    return {
        "params/w": (i(48 * 24) / 4 - 7).astype(np.float32).reshape(48, 24),
        "params/b": (1.5 * i(24)).astype(np.float32),
        "opt/0": (7 * i(24 * 24) - 100).astype(np.int32).reshape(24, 24),
        "opt/1": (i(24 * 12) / 3).reshape(24, 12),
        "step": np.array(42, dtype=np.int64),
    }


def main():
    root = sys.argv[1]
    steps = sorted(int(d) for d in os.listdir(root)
                   if d.isdigit() and os.path.exists(os.path.join(root, d, "COMMIT")))
    assert steps, "no committed step in " + root
    want = expected()
    for step in steps:
        leaves, metadata = load_step(os.path.join(root, str(step)))
        assert metadata["step"] == step, metadata
        assert sorted(leaves) == sorted(want), sorted(leaves)
        for path, value in want.items():
            got = leaves[path]
            assert got.dtype == value.dtype and got.shape == value.shape, (path, got.dtype, got.shape)
            assert got.tobytes() == value.tobytes(), path + " differs"
        print("step %d: %d leaves equal bit for bit (%s)" % (step, len(leaves), ", ".join(sorted(leaves))))
    print("OK")


if __name__ == "__main__":
    main()
