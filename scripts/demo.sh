#!/usr/bin/env bash
# Installs dependencies, builds, fetches the digits data and trains the digits MLP (the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/fetch-digits.sh
"${MCX_BUILD_DIR:-build}"/examples/train_digits/train_digits --data data/digits.csv.gz "$@"
