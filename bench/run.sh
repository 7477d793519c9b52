#!/usr/bin/env bash
# Runs the core benchmarks: mcx (jitted) against numpy, PyTorch and OpenBLAS on the same work, in one run.
# Installs dependencies, builds bench_core (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one
# JSON line per (case, peer). Extra arguments go to bench_core, e.g. `bash bench/run.sh --threads 2
# --cases gemm,softmax`. See docs/benchmarks.md.
#
# Optional: MCX_BENCH_SPMD=1 also runs bench_spmd afterwards (the MLP step on 1 vs 4 CPU devices of one
# process; arguments from MCX_BENCH_SPMD_ARGS, e.g. "--devices 4 --repeats 30"). bench/spmd/run.sh runs
# it alone.
set -euo pipefail
here=$(dirname "$0")
if [[ "${MCX_BENCH_SPMD:-0}" == 1 ]]; then
  bash "$here/build-and-run.sh" bench_core bench/core/bench_core "$@"
  # shellcheck disable=SC2086  # word splitting of the argument string is intended
  exec bash "$here/build-and-run.sh" bench_spmd bench/spmd/bench_spmd ${MCX_BENCH_SPMD_ARGS:-}
fi
exec bash "$here/build-and-run.sh" bench_core bench/core/bench_core "$@"
