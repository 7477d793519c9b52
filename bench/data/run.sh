#!/usr/bin/env bash
# Runs the data-loading benchmark: the mcx/data DataLoader shuffling, batching and normalising Fashion-MNIST
# into device arrays on 1 process and on 2 (mcx-run -n 2 --cpu-devices 2) against PyTorch's DataLoader
# (bench/peers/data_peer.py: num_workers 0 and 2, same batch size, the images normalised per example and, a
# faster torch variant, per batch in a collate_fn), and the fraction of a training epoch of
# examples/train_fashion_mnist spent waiting for data. Installs dependencies, fetches the data
# (scripts/fetch-fashion-mnist.sh), builds bench_data, mcx-run, mcx-coordinator and train_fashion_mnist
# (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints one JSON line per case ({name, mcx_examples_per_s,
# peer, peer_examples_per_s, ratio = mcx / peer throughput}; train_epoch_data_wait/* lines: {wait_fraction,
# target}). Extra arguments go to bench_data, e.g. `bash bench/data/run.sh --reps 10`. See docs/data.md
# ("Benchmark").
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
bash scripts/install-deps.sh >&2
bash scripts/fetch-fashion-mnist.sh >&2
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_data mcx-run mcx-coordinator train_fashion_mnist -j "${MCX_JOBS:-2}" >&2
"$build_dir/bench/data/bench_data" "$@"
