#!/usr/bin/env bash
# Runs the checkpoint benchmark: save and restore throughput of a 256 MB sharded pytree on 2 processes
# (mcx-run -n 2 --cpu-devices 2) against numpy.save / numpy.load of the same bytes from one process
# (bench/peers/checkpoint_peer.py), and the step-time cost of an overlapped save_async. Installs
# dependencies, builds bench_checkpoint and mcx-run (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints
# one JSON line per case ({name, mcx_*, peer, peer_*, ratio = mcx / peer throughput}). Extra arguments go to
# bench_checkpoint, e.g. `bash bench/checkpoint/run.sh --mb 64`. See docs/checkpoint.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
bash scripts/install-deps.sh >&2
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_checkpoint mcx-run mcx-coordinator -j "${MCX_JOBS:-2}" >&2
"$build_dir/bench/checkpoint/bench_checkpoint" "$@"
