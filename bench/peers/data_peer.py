#!/usr/bin/env python3
"""Peer of bench_data: PyTorch's DataLoader over Fashion-MNIST's training set, doing what the mcx loader does in
bench_data: a seeded shuffle per epoch, batches of --batch (drop_last, as mcx's drop-remainder), images to float32
(x/255 - mean)/std, labels as uint8. The gzipped IDX files are decoded with numpy before anything is timed (mcx
decompresses them when the source is opened, also outside its timed region).

Configurations: num_workers=0 (the main process does everything) and num_workers=2 with persistent_workers
(worker processes, started during the warm-up epoch), each with the normalisation in the Dataset's __getitem__
(per example, as mcx's normalize transform) and, a stronger variant doing the same arithmetic, in a collate_fn
on the stacked u8 batch (one vectorised op per batch instead of four per example). Each: one warm-up epoch,
then --reps timed epochs (iterating every batch); examples/s = examples / epoch seconds, the best and median.
Prints one JSON line {"configs": [{"tag", "name", "examples_per_s", "examples_per_s_median", "epochs_s"}, ...],
"batches_per_epoch", "batch", "torch"}."""
import argparse
import gzip
import json
import os
import statistics
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

MEAN, STD = 0.2860, 0.3530  # as bench_data and examples/train_fashion_mnist


def read_idx_gz(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError("%s: expected an IDX file of u8, found magic %s" % (path, raw[:4].hex()))
    ndims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * d:8 + 4 * d], "big") for d in range(ndims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims).copy()


class FashionMNIST(Dataset):
    """Example i as (f32[28, 28] normalised, u8 label): the normalisation per example, in __getitem__."""

    def __init__(self, images, labels):
        self.images = images
        self.labels = labels

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i]).to(torch.float32)
        x.mul_(1.0 / 255.0).sub_(MEAN).div_(STD)
        return x, self.labels[i]


class RawFashionMNIST(FashionMNIST):
    """Example i as (u8[28, 28], u8 label); normalise_collate normalises the whole batch at once."""

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def normalise_collate(items):
    x = torch.from_numpy(np.stack([it[0] for it in items])).to(torch.float32)
    x.mul_(1.0 / 255.0).sub_(MEAN).div_(STD)
    return x, torch.from_numpy(np.array([it[1] for it in items], dtype=np.uint8))


def run(dataset, batch, workers, reps, collate_fn=None):
    g = torch.Generator()
    g.manual_seed(0)
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                        persistent_workers=workers > 0, generator=g, collate_fn=collate_fn)
    epochs = []
    for epoch in range(reps + 1):  # epoch 0: warm-up (starts the persistent workers)
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            n += x.shape[0]
        dt = time.perf_counter() - t0
        assert n == len(loader) * batch and x.dtype == torch.float32 and tuple(x.shape[1:]) == (28, 28)
        if epoch > 0:
            epochs.append(dt)
    examples = len(loader) * batch
    del loader, x, y  # ends the persistent workers
    return {"examples_per_s": examples / min(epochs), "examples_per_s_median": examples / statistics.median(epochs),
            "epochs_s": epochs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    images = read_idx_gz(os.path.join(a.data, "train-images-idx3-ubyte.gz"))
    labels = read_idx_gz(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))
    configs = []
    for collate in (False, True):
        for workers in (0, 2):
            if collate:
                r = run(RawFashionMNIST(images, labels), a.batch, workers, a.reps, normalise_collate)
            else:
                r = run(FashionMNIST(images, labels), a.batch, workers, a.reps)
            name = "torch DataLoader num_workers=%d" % workers + (" (persistent_workers)" if workers else "")
            if collate:
                name += ", normalised per batch in collate_fn"
            configs.append(dict(tag="torch_nw%d%s" % (workers, "_collate" if collate else ""), name=name, **r))
    print(json.dumps({"configs": configs, "batches_per_epoch": len(images) // a.batch, "batch": a.batch,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
