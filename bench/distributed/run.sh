#!/usr/bin/env bash
# Runs the distributed control-plane benchmark: mcx's coordination service (gRPC, loopback) against PyTorch's
# TCPStore on the same work, in one run. Installs dependencies, builds bench_distributed (Release) in
# ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one JSON line per case. Extra arguments go to
# bench_distributed, e.g. `bash bench/distributed/run.sh --procs 2,8 --no-peer`. See docs/distributed.md.
exec bash "$(dirname "$0")/../build-and-run.sh" bench_distributed bench/distributed/bench_distributed "$@"
