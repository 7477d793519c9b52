#!/usr/bin/env bash
# Installs dependencies, builds, fetches the digits data and trains the digits MLP (the demo): once on one
# device, then data-parallel over a ("data",) mesh of 4 virtual CPU devices.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/fetch-digits.sh
"${MCX_BUILD_DIR:-build}"/examples/train_digits/train_digits --data data/digits.csv.gz "$@"
echo
echo "== the same model, data-parallel over 4 CPU devices =="
"${MCX_BUILD_DIR:-build}"/examples/data_parallel_digits/data_parallel_digits --data data/digits.csv.gz --devices 4
