#!/usr/bin/env bash
# Runs bench_spmd: the 784-512-512-10 MLP train step (global batch 256, SGD) on 1 device vs N CPU devices of
# one process (jit with shardings and shard_map), plus the partition + compile cost. Installs dependencies,
# builds bench_spmd (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one JSON line per case.
# Extra arguments go to bench_spmd, e.g. `bash bench/spmd/run.sh --devices 4 --repeats 30`. See
# docs/benchmarks.md ("SPMD on one process").
exec bash "$(dirname "$0")/../build-and-run.sh" bench_spmd bench/spmd/bench_spmd "$@"
