#!/usr/bin/env bash
# Runs the core benchmarks: mcx (jitted) against numpy, PyTorch and OpenBLAS on the same work, in one run.
# Installs dependencies, builds bench_core (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one
# JSON line per (case, peer). Extra arguments go to bench_core, e.g. `bash bench/run.sh --threads 2
# --cases gemm,softmax`. See docs/benchmarks.md.
exec bash "$(dirname "$0")/build-and-run.sh" bench_core bench/core/bench_core "$@"
