#!/usr/bin/env bash
# Runs the core benchmarks: mcx (jitted) against numpy, PyTorch and OpenBLAS on the same work, in one run.
# Installs dependencies, builds bench_core (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one
# JSON line per (case, peer). Extra arguments go to bench_core, e.g. `bash bench/run.sh --threads 2
# --cases gemm,softmax`. See docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >&2
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_core -j "${MCX_JOBS:-2}" >&2
"$build_dir"/bench/core/bench_core "$@"
