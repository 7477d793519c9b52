#!/usr/bin/env python3
"""Peers of the main job's epoch on the GPU: the Fashion-MNIST CNN of `train_fashion_mnist --model cnn`
(conv 32 3x3 SAME, relu, max pool 2x2, conv 64 3x3 SAME, relu, max pool 2x2, dense 128, relu, dense 10; mean
softmax cross-entropy; Adam, learning rate 1e-3; global batch 128; pixels (x / 255 - 0.2860) / 0.3530) trained on
the IDX files of --data, on the same GPU as mcx, by:
  torch       PyTorch, one process (eager; each batch copied from pinned host memory, as a loader does)
  torch_ddp2  PyTorch DistributedDataParallel over 2 processes sharing the GPU (the device check's layout for
              mcx; backend gloo, since NCCL refuses two ranks on one GPU), 64 examples per process and step
  jax         JAX, one process: the step under jax.jit (Adam written out: no optax needed)

Each peer trains one warm-up epoch (compilation, allocator, cuDNN autotuning), then times the next one to
completion (torch.cuda.synchronize / block_until_ready). Prints one JSON line per peer:
{"peer", "epoch_s", "steps", "examples_per_s", "loss"} (loss: the timed epoch's mean), or {"peer", "error"}.

Usage: python3 bench/gpu/epoch_peers.py --data DIR [--peers torch,torch_ddp2,jax] [--batch 128] [--limit N]
  [--device cuda|cpu]   (cpu: the same code on the CPU, to check the script where there is no GPU)
scripts/device-check.sh runs it beside train_fashion_mnist and reports each peer's epoch over mcx's.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

MEAN, STD = 0.2860, 0.3530
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def read_idx(path):
    raw = gzip.open(path).read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir):
    images = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz")).astype(np.float32)
    labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    images = (images / 255.0 - MEAN) / STD
    return images.reshape(-1, 1, 28, 28), labels


def report(peer, epoch_s, steps, batch, loss):
    print(json.dumps({"peer": peer, "epoch_s": epoch_s, "steps": steps,
                      "examples_per_s": steps * batch / epoch_s, "loss": loss}), flush=True)


def torch_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def torch_sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def torch_epochs(torch, device, model, opt, images, labels, batch, first, stride, epochs=2):
    """Trains `epochs` epochs on rows first, first + stride, ... of each global batch; returns (seconds, steps,
    mean loss) of the last one."""
    x_host = torch.from_numpy(images)
    y_host = torch.from_numpy(labels)
    if device.type == "cuda":
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    steps = len(images) // batch
    loss_fn = torch.nn.CrossEntropyLoss()
    result = None
    for _ in range(epochs):
        torch_sync(torch, device)
        t0 = time.perf_counter()
        total = torch.zeros((), device=device)
        for s in range(steps):
            rows = slice(s * batch + first, (s + 1) * batch, stride)
            x = x_host[rows].to(device, non_blocking=True)
            y = y_host[rows].to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.detach()
        torch_sync(torch, device)
        result = (time.perf_counter() - t0, steps, float(total) / steps)
    return result


def run_torch(images, labels, batch, device_name):
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device(device_name)
    model = torch_model(torch).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS)
    secs, steps, loss = torch_epochs(torch, device, model, opt, images, labels, batch, 0, 1)
    report("torch", secs, steps, batch, loss)


def ddp_worker(rank, world, port, images, labels, batch, device_name, out):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device(device_name)
    model = torch_model(torch).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS)
    secs, steps, loss = torch_epochs(torch, device, model, opt, images, labels, batch, rank, world)
    slowest = torch.tensor([secs])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if rank == 0:
        out.put((float(slowest[0]), steps, loss))
    dist.destroy_process_group()


def run_torch_ddp2(images, labels, batch, device_name):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(ddp_worker, args=(2, port, images, labels, batch, device_name, out), nprocs=2, join=True,
                       start_method="spawn")
    secs, steps, loss = out.get()
    report("torch_ddp2", secs, steps, batch, loss)


def run_jax(images, labels, batch, device_name):
    import jax
    import jax.numpy as jnp
    device = jax.devices("gpu" if device_name == "cuda" else "cpu")[0]

    def init(key):
        shapes = {"c1_w": (3, 3, 1, 32), "c2_w": (3, 3, 32, 64), "d1_w": (3136, 128), "d2_w": (128, 10)}
        params = {}
        for i, (name, shape) in enumerate(sorted(shapes.items())):
            fan_in = int(np.prod(shape[:-1]))
            params[name] = jax.random.normal(jax.random.fold_in(key, i), shape) * np.sqrt(2.0 / fan_in)
            params[name.replace("_w", "_b")] = jnp.zeros(shape[-1])
        return params

    def pool(h):
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def conv(h, w):
        return jax.lax.conv_general_dilated(h, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def loss_fn(p, x, y):
        h = x.reshape(-1, 28, 28, 1)
        h = pool(jax.nn.relu(conv(h, p["c1_w"]) + p["c1_b"]))
        h = pool(jax.nn.relu(conv(h, p["c2_w"]) + p["c2_b"]))
        h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["d1_w"] + p["d1_b"])
        logits = h @ p["d2_w"] + p["d2_b"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(p, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda a, b: BETA1 * a + (1 - BETA1) * b, m, g)
        v = jax.tree_util.tree_map(lambda a, b: BETA2 * a + (1 - BETA2) * b * b, v, g)
        scale = LR * jnp.sqrt(1 - BETA2 ** t) / (1 - BETA1 ** t)
        p = jax.tree_util.tree_map(lambda w, a, b: w - scale * a / (jnp.sqrt(b) + EPS), p, m, v)
        return p, m, v, t, loss

    p = jax.device_put(init(jax.random.PRNGKey(0)), device)
    m = jax.tree_util.tree_map(jnp.zeros_like, p)
    v = jax.tree_util.tree_map(jnp.zeros_like, p)
    t = jnp.zeros((), jnp.float32)
    x_host = images.reshape(len(images), 784)
    y_host = labels.astype(np.int32)
    steps = len(images) // batch
    result = None
    for _ in range(2):
        t0 = time.perf_counter()
        total = jnp.zeros(())
        for s in range(steps):
            rows = slice(s * batch, (s + 1) * batch)
            x, y = jax.device_put(x_host[rows], device), jax.device_put(y_host[rows], device)
            p, m, v, t, loss = step(p, m, v, t, x, y)
            total = total + loss
        total.block_until_ready()
        result = (time.perf_counter() - t0, steps, float(total) / steps)
    report("jax", result[0], result[1], batch, result[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--peers", default="torch,torch_ddp2,jax")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="train on the first N images only (0: all)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    images, labels = load(args.data)
    if args.limit > 0:
        images, labels = images[:args.limit], labels[:args.limit]
    runners = {"torch": run_torch, "torch_ddp2": run_torch_ddp2, "jax": run_jax}
    for peer in [p for p in args.peers.split(",") if p]:
        try:
            runners[peer](images, labels, args.batch, args.device)
        except Exception as e:  # one peer's failure (a missing package) leaves the others
            print(json.dumps({"peer": peer, "error": f"{type(e).__name__}: {e}"[:500]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
