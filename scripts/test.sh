#!/usr/bin/env bash
# Installs dependencies, builds, and runs the default test set (labels unit and multiprocess; `slow`
# tests run with MCX_TEST_LABELS='unit|multiprocess|slow').
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The benchmarks have no tests; bench/run.sh builds them in a build directory of its own.
bash scripts/build.sh -DMCX_BUILD_BENCH=OFF
# The digits data (from Debian's python3-sklearn .deb) lets the demo's smoke test run; without it that test
# reports itself skipped.
bash scripts/fetch-digits.sh || echo "test.sh: could not fetch the digits data; train_digits_smoke will be skipped"
# Fashion-MNIST (from Debian's dataset-fashion-mnist .deb) for the data loader's tests and its example; without
# it those tests report themselves skipped.
bash scripts/fetch-fashion-mnist.sh || echo "test.sh: could not fetch Fashion-MNIST; the tests that read it will be skipped"
ctest --test-dir "${MCX_BUILD_DIR:-build}" -L "${MCX_TEST_LABELS:-unit|multiprocess}" \
  --output-on-failure -j 2 --timeout 600
