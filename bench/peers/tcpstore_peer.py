#!/usr/bin/python3
"""Peer for bench_distributed: PyTorch's TCPStore (Debian python3-torch) doing the same work as mcx's
coordination service, on loopback, in this machine's conditions.

Usage: /usr/bin/python3 bench/peers/tcpstore_peer.py [--procs 2,8,32,64] [--barriers 100] [--warmup 5]
                                                    [--kv-ops 2000] [--kv-clients 1,8] [--value-bytes 64]

Cases (each prints one JSON line; times in ms):
  init/N     N processes each construct a TCPStore client and meet once (add + wait on a done key), the
             analogue of mcx's register-and-wait-for-all. Per process: constructor start -> meeting passed.
             {"case", "p50_ms", "p99_ms", "max_ms", "samples"}
  barrier/N  store-based barrier, `barriers` rounds after `warmup`: count = add("b/<r>", 1); the last arrival
             sets "b/<r>/done"; everyone wait()s on it (event-driven, no spinning). Every (process, round)
             time is one sample. {"case", "p50_ms", "p99_ms", "max_ms", "samples"}
  kv_set/C, kv_get/C   C client processes each set `kv-ops` distinct keys (value-bytes values), then get
             them all back (get blocks until the key exists, as mcx's blocking get). set() does not wait for a
             reply, so the set phase ends with one get() of the last key (sets are applied by then). Aggregate throughput =
             C * kv-ops / slowest client's time. {"case", "ops_per_s", "ms_per_op", "clients", "ops"}
The store's server runs in this (parent) process, as mcx's coordinator runs in bench_distributed's.
Processes are forked after torch is imported once, so the import cost is not measured.
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", default="2,8,32,64")
    p.add_argument("--barriers", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--kv-ops", type=int, default=2000)
    p.add_argument("--kv-clients", default="1,8")
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--cases", default="init,barrier,kv")
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("OMP_NUM_THREADS", "1")
from torch.distributed import TCPStore  # noqa: E402

TIMEOUT = timedelta(seconds=60)


def percentile(samples, q):
    s = sorted(samples)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * (len(s) - 1)))))
    return s[k]


def run_children(n, body):
    """Forks n children running body(rank, write_fd); returns the lines each wrote (list per rank)."""
    pipes, pids = [], []
    for rank in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 0
            try:
                body(rank, w)
            except Exception as e:  # noqa: BLE001 - reported to the parent
                os.write(w, ("ERROR %r\n" % (e,)).encode())
                code = 1
            os._exit(code)
        os.close(w)
        pipes.append(r)
        pids.append(pid)
    outputs = []
    for r in pipes:
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        outputs.append(b"".join(chunks).decode().splitlines())
    for pid in pids:
        os.waitpid(pid, 0)
    for rank, lines in enumerate(outputs):
        for line in lines:
            if line.startswith("ERROR"):
                raise RuntimeError("child %d: %s" % (rank, line))
    return outputs


def meet(store, key, n):
    if store.add(key, 1) == n:
        store.set(key + "/done", "1")
    store.wait([key + "/done"])


def emit(obj):
    print(json.dumps(obj), flush=True)


def case_init_barrier(n, port, prefix):
    def body(rank, w):
        t0 = time.perf_counter()
        store = TCPStore("127.0.0.1", port, n, False, TIMEOUT)
        meet(store, prefix + "init", n)
        init_ms = (time.perf_counter() - t0) * 1e3
        samples = []
        for r in range(ARGS.warmup + ARGS.barriers):
            t = time.perf_counter()
            meet(store, "%sb/%d" % (prefix, r), n)
            if r >= ARGS.warmup:
                samples.append((time.perf_counter() - t) * 1e3)
        os.write(w, ("INIT %f\nBARRIER %s\n" % (init_ms, " ".join("%f" % s for s in samples))).encode())

    outputs = run_children(n, body)
    inits, barriers = [], []
    for lines in outputs:
        for line in lines:
            if line.startswith("INIT "):
                inits.append(float(line.split()[1]))
            elif line.startswith("BARRIER "):
                barriers.extend(float(x) for x in line.split()[1:])
    for name, samples in (("init/%d" % n, inits), ("barrier/%d" % n, barriers)):
        emit({"case": name, "peer": "torch.TCPStore", "p50_ms": statistics.median(samples),
              "p99_ms": percentile(samples, 99), "max_ms": max(samples), "samples": len(samples)})


def case_kv(clients, port, prefix):
    value = b"v" * ARGS.value_bytes
    ops = ARGS.kv_ops

    def body(rank, w):
        store = TCPStore("127.0.0.1", port, clients, False, TIMEOUT)
        meet(store, prefix + "start", clients)
        t0 = time.perf_counter()
        for i in range(ops):
            store.set("%skv/%d/%d" % (prefix, rank, i), value)
        # TCPStore's set() does not wait for a reply; one get() of the last key (answered after the server
        # has applied every earlier set of this connection) makes the phase end when the sets are applied.
        store.get("%skv/%d/%d" % (prefix, rank, ops - 1))
        t1 = time.perf_counter()
        meet(store, prefix + "sets", clients)
        t2 = time.perf_counter()
        for i in range(ops):
            if store.get("%skv/%d/%d" % (prefix, rank, i)) != value:
                raise RuntimeError("wrong value")
        t3 = time.perf_counter()
        os.write(w, ("KV %f %f\n" % (t1 - t0, t3 - t2)).encode())

    outputs = run_children(clients, body)
    sets, gets = [], []
    for lines in outputs:
        for line in lines:
            if line.startswith("KV "):
                _, s, g = line.split()
                sets.append(float(s))
                gets.append(float(g))
    total = clients * ops
    for name, times in (("kv_set/%d" % clients, sets), ("kv_get/%d" % clients, gets)):
        wall = max(times)
        emit({"case": name, "peer": "torch.TCPStore", "ops_per_s": total / wall, "ms_per_op": wall * 1e3 / total,
              "clients": clients, "ops": total})


def main():
    cases = set(ARGS.cases.split(","))
    server = TCPStore("127.0.0.1", 0, None, True, TIMEOUT, wait_for_workers=False)
    port = server.port
    run = 0
    if "init" in cases or "barrier" in cases:
        for n in [int(x) for x in ARGS.procs.split(",") if x]:
            run += 1
            case_init_barrier(n, port, "r%d/" % run)
    if "kv" in cases:
        for c in [int(x) for x in ARGS.kv_clients.split(",") if x]:
            run += 1
            case_kv(c, port, "r%d/" % run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
