#!/usr/bin/env python3
"""Peer timings for bench_gpu: the same cases as bench/gpu/main.cc with JAX (jit) and PyTorch on the same GPU,
plus the device-to-device copy bandwidth (PyTorch's copy of f32[2^28], case "copy_bandwidth": the limit an
element-wise kernel can reach).

Usage: python3 bench/gpu/gpu_peers.py [--repeats R] [--warmup W] [--cases a,b] [--threads N (ignored)]

Prints one JSON line per (case, peer): {"case", "peer", "ms" (median), "min_ms", "repeats"}; a peer that fails
prints {"peer", "case", "error"} and the others go on. Every timing runs to completion (JAX's
block_until_ready, torch.cuda.synchronize). JAX allocates as it goes (XLA_PYTHON_CLIENT_PREALLOCATE=false),
beside the mcx process that started this.
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cases", default="exp_mul_add,gemm_bf16,gemm_f32,softmax,layer_norm,mlp_step")
    return p.parse_args()


def timed(fn, sync, warmup, repeats):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times), min(times)


def emit(case, peer, med, best, repeats):
    print(json.dumps({"case": case, "peer": peer, "ms": round(med, 4), "min_ms": round(best, 4), "repeats": repeats}),
          flush=True)


def torch_cases(names):
    import torch
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True  # the same TF32 products as mcx's and JAX's default
    g = torch.Generator(device=dev).manual_seed(0)
    out = {}
    if "exp_mul_add" in names:
        a = torch.randn(1 << 28, device=dev, generator=g) * 0.5
        b = torch.randn(1 << 28, device=dev, generator=g)
        out["exp_mul_add"] = lambda: torch.exp(a) * b + 1
        y = torch.empty_like(a)
        out["copy_bandwidth"] = lambda: y.copy_(a)
    for name, dt in (("gemm_bf16", torch.bfloat16), ("gemm_f32", torch.float32)):
        if name in names:
            x = torch.randn(8192, 8192, device=dev, generator=g).to(dt)
            w = torch.randn(8192, 8192, device=dev, generator=g).to(dt)
            out[name] = (lambda x=x, w=w: x @ w)
    if "softmax" in names or "layer_norm" in names:
        s = torch.randn(32768, 4096, device=dev, generator=g)
        gamma = torch.randn(4096, device=dev, generator=g)
        beta = torch.randn(4096, device=dev, generator=g)
        out["softmax"] = lambda: torch.softmax(s, dim=-1)
        out["layer_norm"] = lambda: torch.nn.functional.layer_norm(s, (4096,), gamma, beta, 1e-5)
    if "mlp_step" in names:
        sizes = [784, 512, 512, 10]
        ws = [(torch.randn(sizes[i], sizes[i + 1], device=dev, generator=g) * (2.0 / sizes[i]) ** 0.5).requires_grad_()
              for i in range(3)]
        bs = [torch.zeros(sizes[i + 1], device=dev, requires_grad=True) for i in range(3)]
        x = torch.randn(4096, 784, device=dev, generator=g)
        y = torch.randint(0, 10, (4096,), device=dev, generator=g)

        def step():
            h = x
            for i in range(3):
                h = h @ ws[i] + bs[i]
                if i < 2:
                    h = torch.relu(h)
            loss = torch.nn.functional.cross_entropy(h, y)
            gs = torch.autograd.grad(loss, ws + bs)
            with torch.no_grad():
                for p, gp in zip(ws + bs, gs):
                    p -= 0.01 * gp
            return loss
        out["mlp_step"] = step
    return out, torch.cuda.synchronize


def jax_cases(names):
    import jax
    import jax.numpy as jnp
    key = jax.random.PRNGKey(0)
    ks = jax.random.split(key, 16)
    out = {}
    if "exp_mul_add" in names:
        a = jax.random.normal(ks[0], (1 << 28,)) * 0.5
        b = jax.random.normal(ks[1], (1 << 28,))
        f = jax.jit(lambda a, b: jnp.exp(a) * b + 1)
        out["exp_mul_add"] = lambda: f(a, b).block_until_ready()
    for name, dt, k in (("gemm_bf16", jnp.bfloat16, 2), ("gemm_f32", jnp.float32, 4)):
        if name in names:
            x = jax.random.normal(ks[k], (8192, 8192)).astype(dt)
            w = jax.random.normal(ks[k + 1], (8192, 8192)).astype(dt)
            f = jax.jit(lambda x, w: x @ w)
            out[name] = (lambda f=f, x=x, w=w: f(x, w).block_until_ready())
    if "softmax" in names or "layer_norm" in names:
        s = jax.random.normal(ks[6], (32768, 4096))
        gamma = jax.random.normal(ks[7], (4096,))
        beta = jax.random.normal(ks[8], (4096,))
        sm = jax.jit(lambda s: jax.nn.softmax(s, axis=-1))

        def ln(x, g, b):
            d = x - x.mean(-1, keepdims=True)
            return d / jnp.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g + b
        lnj = jax.jit(ln)
        out["softmax"] = lambda: sm(s).block_until_ready()
        out["layer_norm"] = lambda: lnj(s, gamma, beta).block_until_ready()
    if "mlp_step" in names:
        sizes = [784, 512, 512, 10]
        params = [(jax.random.normal(ks[9 + i], (sizes[i], sizes[i + 1])) * (2.0 / sizes[i]) ** 0.5,
                   jnp.zeros(sizes[i + 1])) for i in range(3)]
        x = jax.random.normal(ks[12], (4096, 784))
        y = jax.random.randint(ks[13], (4096,), 0, 10)

        def loss(ps, x, y):
            h = x
            for i, (w, b) in enumerate(ps):
                h = h @ w + b
                if i < 2:
                    h = jax.nn.relu(h)
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(h) * jax.nn.one_hot(y, 10), -1))

        @jax.jit
        def step(ps, x, y):
            l, g = jax.value_and_grad(loss)(ps, x, y)
            return jax.tree_util.tree_map(lambda p, gp: p - 0.01 * gp, ps, g), l
        state = {"p": params}

        def run():
            state["p"], l = step(state["p"], x, y)
            l.block_until_ready()
        out["mlp_step"] = run
    return out, lambda: None


def main():
    args = parse_args()
    names = set(args.cases.split(","))
    for peer, make in (("torch", torch_cases), ("jax", jax_cases)):
        try:
            cases, sync = make(names)
        except Exception as e:  # the other peer still runs
            print(json.dumps({"peer": peer, "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        for name, fn in cases.items():
            try:
                med, best = timed(fn, sync, args.warmup, args.repeats)
                emit(name, peer, med, best, args.repeats)
            except Exception as e:
                print(json.dumps({"case": name, "peer": peer, "error": f"{type(e).__name__}: {e}"}), flush=True)
        del cases


if __name__ == "__main__":
    main()
