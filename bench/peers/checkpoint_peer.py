#!/usr/bin/env python3
"""Peer of bench_checkpoint: writes the same bytes with numpy.save from one process and reads them back with
numpy.load. Prints one JSON line {"save_mb_s", "save_fsync_mb_s", "load_mb_s", "load_cold_mb_s", "mb"}; best
of --reps.
save_mb_s: numpy.save alone, which neither fsyncs nor hashes (the bytes may still be only in the page cache).
save_fsync_mb_s: numpy.save to an open file then os.fsync of each file and of the directory, the durability an
mcx save gives (still no hashing). load_mb_s: numpy.load of the numpy.save files, still in the page cache.
load_cold_mb_s: numpy.load of the fsynced files after posix_fadvise(DONTNEED) dropped them from the page cache,
as an mcx save's files are (written with O_DIRECT, they are not cached)."""
import argparse
import json
import os
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    leaves = 4
    rows = a.mb * (1 << 20) // leaves // 4 // 4096  # f32 [rows, 4096] per leaf
    arrays = [np.arange(rows * 4096, dtype=np.float32).reshape(rows, 4096) + k for k in range(leaves)]
    total_mb = sum(x.nbytes for x in arrays) / (1 << 20)
    os.makedirs(a.dir, exist_ok=True)
    save, save_fsync, load, load_cold = [], [], [], []
    for rep in range(a.reps):
        synced = [os.path.join(a.dir, "r%d_sync%d.npy" % (rep, k)) for k in range(leaves)]
        t0 = time.perf_counter()
        for p, x in zip(synced, arrays):
            with open(p, "wb") as f:
                np.save(f, x)
                f.flush()
                os.fsync(f.fileno())
        dfd = os.open(a.dir, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        save_fsync.append(time.perf_counter() - t0)
        # Cold read: the fsynced files dropped from the page cache (as an mcx save's O_DIRECT files are).
        for p in synced:
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        t0 = time.perf_counter()
        cold = [np.load(p) for p in synced]
        load_cold.append(time.perf_counter() - t0)
        assert all(b.tobytes() == x.tobytes() for b, x in zip(cold, arrays))
        del cold
        for p in synced:
            os.remove(p)
        paths = [os.path.join(a.dir, "r%d_leaf%d.npy" % (rep, k)) for k in range(leaves)]
        t0 = time.perf_counter()
        for p, x in zip(paths, arrays):
            np.save(p, x)
        save.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        back = [np.load(p) for p in paths]
        load.append(time.perf_counter() - t0)
        assert all(b.tobytes() == x.tobytes() for b, x in zip(back, arrays))
        for p in paths:
            os.remove(p)
    print(json.dumps({"save_mb_s": total_mb / min(save), "save_fsync_mb_s": total_mb / min(save_fsync),
                      "load_mb_s": total_mb / min(load), "load_cold_mb_s": total_mb / min(load_cold),
                      "mb": total_mb}))


if __name__ == "__main__":
    main()
