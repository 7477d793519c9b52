#!/usr/bin/env bash
# Runs the distributed control-plane benchmark: mcx's coordination service (gRPC, loopback) against PyTorch's
# TCPStore on the same work, in one run. Installs dependencies, builds bench_distributed (Release) in
# ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one JSON line per case. Extra arguments go to
# bench_distributed, e.g. `bash bench/distributed/run.sh --procs 2,8 --no-peer`. See docs/distributed.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh >&2
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_distributed -j "${MCX_JOBS:-2}" >&2
"$build_dir"/bench/distributed/bench_distributed "$@"
