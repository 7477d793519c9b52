#!/usr/bin/python3
"""Peer timings for bench_core: the same cases as bench/core/main.cc, run with numpy and PyTorch.

Usage: /usr/bin/python3 bench/peers/core_peers.py --threads N [--repeats R] [--warmup W] [--cases a,b]

Prints one JSON line per (case, peer): {"case", "peer", "ms" (median), "min_ms", "repeats", "threads",
"blas", "omp_wait_policy"}. Threads are pinned before numpy/torch load (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS,
torch.set_num_threads), so the peers use as many threads as mcx does. "blas" names the BLAS shared
library actually mapped into this process (Debian's numpy/torch use the libblas.so.3 alternative).
Cases (shapes must match bench/core/main.cc):
  elementwise  exp(a)*b+1, a, b f32[1048576]
  dense_tanh   tanh(x@W+b), x f32[1024,256], W f32[256,1024], b f32[1024] (output 1M elements)
  gemm         f32[1024,1024] @ f32[1024,1024]
  softmax      softmax over the last axis of f32[4096,1024]
  attention_softmax  softmax(scores + mask) over the last axis, scores f32[8,8,128,128], causal mask
               f32[128,128] (0 or -1e9) broadcast over batch and heads
  layer_norm   (x - mean) / sqrt(var + 1e-5) * gamma + beta over the last axis of f32[32,128,512]
  mlp_step     784-512-512-10 ReLU MLP, batch 256, softmax cross-entropy, gradients + SGD update
  conv2d       3x3 convolution 32 -> 64 channels, padding 1, batch 64 of 28x28 (torch: NCHW; peer
               torch_channels_last: the same in channels_last memory format)
  conv2d_grad  the same convolution forward and backward (gradients of the summed output for x and w)
  eager_dispatch  x = x * 0.5 + 1 fifty times on f32[16], op by op (the cost of dispatching small ops)
  per_example_grads  each example's gradient, 784-256-10 ReLU MLP, batch 128 (torch only: functorch.vmap
               of functorch.grad, as torch.func in later PyTorch releases)
"""
import argparse
import json
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cases",
                   default="elementwise,dense_tanh,gemm,softmax,attention_softmax,layer_norm,mlp_step,conv2d,"
                           "conv2d_grad,per_example_grads,eager_dispatch")
    p.add_argument("--peers", default="numpy,torch,torch_channels_last")
    return p.parse_args()


ARGS = parse_args()
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)
# PyTorch's OpenMP workers busy-wait between parallel regions by default; on a shared, oversubscribed
# machine (other processes compiling) that makes a 1 ms op take 50+ ms. Passive waiting keeps the peer
# honest under load and costs little on a quiet machine. Override by setting OMP_WAIT_POLICY yourself.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402  (after the thread variables are set)


def blas_library():
    """The BLAS/LAPACK shared object mapped into this process (after a GEMM has run)."""
    names = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if "blas" in base.lower():
                    names.add(os.path.realpath(path))
    except OSError:
        pass
    # The last two path components say which implementation: openblas-pthread/libblas.so.3.
    return ",".join(sorted("/".join(n.split("/")[-2:]) for n in names)) or "unknown"


def median_ms(fn, repeats, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    return med, times[0]


# ----------------------------------------------------------------------------------------------- numpy
def numpy_cases(rng):
    f32 = np.float32
    cases = {}

    a = rng.standard_normal(1 << 20).astype(f32)
    b = rng.standard_normal(1 << 20).astype(f32)
    cases["elementwise"] = lambda: np.exp(a) * b + f32(1)

    x16 = rng.standard_normal(16).astype(f32)

    def eager_dispatch_numpy():
        x = x16
        for _ in range(50):
            x = x * f32(0.5) + f32(1)
        return x
    cases["eager_dispatch"] = eager_dispatch_numpy

    x = rng.standard_normal((1024, 256)).astype(f32)
    w = (rng.standard_normal((256, 1024)) / 16).astype(f32)
    bias = rng.standard_normal(1024).astype(f32)
    cases["dense_tanh"] = lambda: np.tanh(x @ w + bias)

    g1 = rng.standard_normal((1024, 1024)).astype(f32)
    g2 = rng.standard_normal((1024, 1024)).astype(f32)
    cases["gemm"] = lambda: g1 @ g2

    s = rng.standard_normal((4096, 1024)).astype(f32)

    def softmax():
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        return e / e.sum(axis=1, keepdims=True)
    cases["softmax"] = softmax

    scores = rng.standard_normal((8, 8, 128, 128)).astype(f32)
    causal = np.where(np.tril(np.ones((128, 128), dtype=bool)), f32(0), f32(-1e9)).astype(f32)

    def attention_softmax():
        z = scores + causal
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    cases["attention_softmax"] = attention_softmax

    ln_x = rng.standard_normal((32, 128, 512)).astype(f32)
    ln_g = rng.standard_normal(512).astype(f32)
    ln_b = rng.standard_normal(512).astype(f32)

    def layer_norm():
        d = ln_x - ln_x.mean(axis=-1, keepdims=True)
        return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + f32(1e-5)) * ln_g + ln_b
    cases["layer_norm"] = layer_norm

    params = mlp_init_numpy(rng)
    xb = rng.standard_normal((256, 784)).astype(f32)
    yb = rng.integers(0, 10, 256)
    cases["mlp_step"] = lambda: mlp_step_numpy(params, xb, yb, f32(0.01))
    return cases


def mlp_init_numpy(rng):
    sizes = [784, 512, 512, 10]
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        params.append([(rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32),
                       np.zeros(n_out, np.float32)])
    return params


def mlp_step_numpy(params, x, y, lr):
    """Forward, hand-written backward of mean softmax cross-entropy, SGD update in place."""
    acts = [x]
    pre = []
    h = x
    for i, (w, b) in enumerate(params):
        z = h @ w + b
        pre.append(z)
        h = np.maximum(z, 0) if i + 1 < len(params) else z
        acts.append(h)
    logits = acts[-1]
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    p = e / e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.mean(np.log(p[np.arange(n), y]))
    g = p
    g[np.arange(n), y] -= 1
    g /= n
    for i in reversed(range(len(params))):
        w, b = params[i]
        gw = acts[i].T @ g
        gb = g.sum(axis=0)
        if i > 0:
            g = (g @ w.T) * (pre[i - 1] > 0)
        w -= lr * gw
        b -= lr * gb
    return loss


# ----------------------------------------------------------------------------------------------- torch
def torch_cases(rng):
    import torch
    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(0)
    t = lambda arr: torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))  # noqa: E731
    cases = {}
    a = t(rng.standard_normal(1 << 20))
    b = t(rng.standard_normal(1 << 20))
    cases["elementwise"] = lambda: torch.exp(a) * b + 1

    x16 = t(rng.standard_normal(16))

    def eager_dispatch_torch():
        x = x16
        for _ in range(50):
            x = x * 0.5 + 1
        return x
    cases["eager_dispatch"] = eager_dispatch_torch

    x = t(rng.standard_normal((1024, 256)))
    w = t(rng.standard_normal((256, 1024)) / 16)
    bias = t(rng.standard_normal(1024))
    cases["dense_tanh"] = lambda: torch.tanh(torch.addmm(bias, x, w))

    g1 = t(rng.standard_normal((1024, 1024)))
    g2 = t(rng.standard_normal((1024, 1024)))
    cases["gemm"] = lambda: g1 @ g2

    s = t(rng.standard_normal((4096, 1024)))
    cases["softmax"] = lambda: torch.softmax(s, dim=1)

    scores = t(rng.standard_normal((8, 8, 128, 128)))
    causal = t(np.where(np.tril(np.ones((128, 128), dtype=bool)), 0.0, -1e9))
    cases["attention_softmax"] = lambda: torch.softmax(scores + causal, dim=-1)

    ln_x = t(rng.standard_normal((32, 128, 512)))
    ln_g = t(rng.standard_normal(512))
    ln_b = t(rng.standard_normal(512))
    cases["layer_norm"] = lambda: torch.nn.functional.layer_norm(ln_x, (512,), ln_g, ln_b, 1e-5)

    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xb = t(rng.standard_normal((256, 784)))
    yb = torch.from_numpy(rng.integers(0, 10, 256))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss
    cases["mlp_step"] = step
    cases.update(torch_conv_cases(rng, torch.contiguous_format))
    cases.update(torch_per_example_cases(rng))
    return cases


def torch_per_example_cases(rng):
    """per_example_grads: functorch.vmap(functorch.grad(loss)) over a batch of 128."""
    import torch
    import functorch
    t = lambda arr: torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))  # noqa: E731
    params = (t(rng.standard_normal((784, 256)) / 28), t(rng.standard_normal(256) * 0.01),
              t(rng.standard_normal((256, 10)) / 16), t(rng.standard_normal(10) * 0.01))
    xb = t(rng.standard_normal((128, 784)))
    # functorch cannot vmap one_hot or integer indexing: the labels are one-hot encoded outside.
    yb = torch.nn.functional.one_hot(torch.from_numpy(np.arange(128) % 10), 10).float()

    def loss(p, x, y):
        h = torch.relu(x @ p[0] + p[1])
        logits = h @ p[2] + p[3]
        return -(torch.log_softmax(logits, dim=-1) * y).sum()
    per_example = functorch.vmap(functorch.grad(loss), in_dims=(None, 0, 0))
    return {"per_example_grads": lambda: per_example(params, xb, yb)}


def torch_conv_cases(rng, memory_format):
    """conv2d and conv2d_grad on x [64, 32, 28, 28], w [64, 32, 3, 3] in the given memory format."""
    import torch
    torch.set_num_threads(ARGS.threads)
    x = torch.from_numpy(rng.standard_normal((64, 32, 28, 28)).astype(np.float32))
    w = torch.from_numpy((rng.standard_normal((64, 32, 3, 3)) / 17).astype(np.float32))
    x = x.contiguous(memory_format=memory_format)
    w = w.contiguous(memory_format=memory_format)
    conv = torch.nn.functional.conv2d

    def forward():
        with torch.no_grad():
            return conv(x, w, padding=1)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)

    def forward_backward():
        xg.grad = None
        wg.grad = None
        conv(xg, wg, padding=1).sum().backward()
        return xg.grad, wg.grad
    return {"conv2d": forward, "conv2d_grad": forward_backward}


def torch_channels_last_cases(rng):
    import torch
    return torch_conv_cases(rng, torch.channels_last)


def main():
    wanted = [c for c in ARGS.cases.split(",") if c]
    builders = {"numpy": numpy_cases, "torch": torch_cases, "torch_channels_last": torch_channels_last_cases}
    peers = [p for p in ARGS.peers.split(",") if p]
    if len(peers) > 1:
        # One process per peer: numpy's OpenBLAS threads and torch's OpenMP threads would otherwise
        # compete for the same cores (both spin after work).
        import subprocess
        rc = 0
        for peer in peers:
            argv = [sys.executable, os.path.abspath(__file__), "--threads", str(ARGS.threads), "--repeats",
                    str(ARGS.repeats), "--warmup", str(ARGS.warmup), "--cases", ARGS.cases, "--peers", peer]
            rc |= subprocess.call(argv)
        return rc
    for peer in peers:
        try:
            cases = builders[peer](np.random.default_rng(0))
        except Exception as e:  # a missing peer is reported, not fatal
            print(json.dumps({"peer": peer, "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        for name in wanted:
            if name not in cases:
                continue
            med, best = median_ms(cases[name], ARGS.repeats, ARGS.warmup)
            print(json.dumps({"case": name, "peer": peer, "ms": round(med, 4), "min_ms": round(best, 4),
                              "repeats": ARGS.repeats, "threads": ARGS.threads, "blas": blas_library(),
                              "omp_wait_policy": os.environ["OMP_WAIT_POLICY"]}),
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
