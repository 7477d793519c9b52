#!/usr/bin/env bash
# The control plane at scale: N simulated tasks against a real mcx-coordinator (docs/distributed.md, "Scale").
# Builds bench_control_plane_scale and the coordinator (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints
# one JSON line per task count. Extra arguments go to the benchmark, e.g.
# `bash bench/distributed/scale/run.sh --tasks 1024,16384 --kill-deadline 60`.
exec bash "$(dirname "$0")/../../build-and-run.sh" bench_control_plane_scale \
  bench/distributed/bench_control_plane_scale "$@"
