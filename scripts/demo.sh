#!/usr/bin/env bash
# Installs dependencies, builds, fetches the digits data and trains the digits MLP (the demo): once on one
# device, then data-parallel over a ("data",) mesh of 4 virtual CPU devices, then the same mesh spread over 2
# processes (2 devices each) launched by mcx-run, with the gradient all-reduce crossing processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/fetch-digits.sh
"${MCX_BUILD_DIR:-build}"/examples/train_digits/train_digits --data data/digits.csv.gz "$@"
echo
echo "== the same model, data-parallel over 4 CPU devices =="
"${MCX_BUILD_DIR:-build}"/examples/data_parallel_digits/data_parallel_digits --data data/digits.csv.gz --devices 4
echo
echo "== the same model, data-parallel over 2 processes x 2 CPU devices (mcx-run) =="
"${MCX_BUILD_DIR:-build}"/bin/mcx-run -n 2 --cpu-devices 2 -- \
  "${MCX_BUILD_DIR:-build}"/examples/data_parallel_digits/data_parallel_digits --data data/digits.csv.gz
