#!/usr/bin/env python3
"""Peer of bench/train/run.sh: one epoch of training on Fashion-MNIST in PyTorch, the same models as
examples/train_fashion_mnist (the MLP 784-512-512-10 and the CNN conv 32 3x3 SAME, relu, max pool 2, conv 64 3x3
SAME, relu, max pool 2, dense 128, relu, dense 10), the same Adam (lr 1e-3), global batch 128 (drop_last), a
seeded shuffle per epoch, pixels normalised (x/255 - mean)/std, fed by torch's DataLoader (num_workers 0, the
normalisation per batch in a collate_fn: torch's fastest configuration in bench/data). torch.set_num_threads
--threads. The gzipped IDX files are decoded before anything is timed (mcx also decodes them at open).

Per model: one warm-up of 20 steps, then one timed epoch; then the held-out accuracy after that epoch. Prints
one JSON line per model: {"model", "epoch_s", "examples_per_s", "test_acc", "threads", "torch"}."""
import argparse
import gzip
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

MEAN, STD = 0.2860, 0.3530


def read_idx_gz(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * d:8 + 4 * d], "big") for d in range(ndims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims).copy()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1)
        self.d1, self.d2 = nn.Linear(3136, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.d2(F.relu(self.d1(x.flatten(1))))


def collate(batch):
    x = torch.stack([b[0] for b in batch]).float().div_(255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    y = torch.stack([b[1] for b in batch]).long()
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/fashion-mnist")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.from_numpy(read_idx_gz(args.data + "/train-images-idx3-ubyte.gz"))
    y = torch.from_numpy(read_idx_gz(args.data + "/train-labels-idx1-ubyte.gz"))
    tx = torch.from_numpy(read_idx_gz(args.data + "/t10k-images-idx3-ubyte.gz")).float().div(255.0).sub(MEAN).div(STD)
    ty = torch.from_numpy(read_idx_gz(args.data + "/t10k-labels-idx1-ubyte.gz")).long()
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = MLP() if name == "mlp" else CNN()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator()
        g.manual_seed(0)
        loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True, drop_last=True,
                            num_workers=0, collate_fn=collate, generator=g)

        def step(xb, yb):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()

        for i, (xb, yb) in enumerate(loader):  # warm-up
            step(xb, yb)
            if i == 20:
                break
        t0 = time.perf_counter()
        n = 0
        for xb, yb in loader:
            step(xb, yb)
            n += xb.shape[0]
        secs = time.perf_counter() - t0
        with torch.no_grad():
            acc = (model(tx.unsqueeze(1)).argmax(1) == ty).float().mean().item()
        print(json.dumps({"model": name, "epoch_s": secs, "examples_per_s": n / secs, "test_acc": acc,
                          "threads": args.threads, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
