#!/usr/bin/env bash
# Builds bench_control_plane_scale and the coordinator, then runs the sweep (JSON lines on stdout; docs/distributed.md,
# "Scale"). Extra arguments go to the benchmark, e.g. --tasks 1024,16384 --threads 2.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build_dir=${MCX_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja > /dev/null
cmake --build "$build_dir" -j "${MCX_JOBS:-2}" --target bench_control_plane_scale mcx-coordinator
"$build_dir/bench/distributed/bench_control_plane_scale" "$@"
