#!/usr/bin/env bash
# Builds the unit tests under sanitizers and runs them:
#   bash scripts/sanitize.sh            # address,undefined then thread
#   bash scripts/sanitize.sh thread     # one of them
# Build dirs: build-asan, build-tsan. Not part of the default test run (each build takes a while on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(address,undefined thread)
for mode in "${modes[@]}"; do
  case "$mode" in
    address,undefined) dir=build-asan ;;
    thread) dir=build-tsan ;;
    *) echo "sanitize.sh: unknown mode '$mode' (expected address,undefined or thread)" >&2; exit 2 ;;
  esac
  MCX_BUILD_DIR=$dir MCX_BUILD_TYPE=Debug bash scripts/build.sh -DMCX_SANITIZE="$mode" \
    -DMCX_BUILD_EXAMPLES=OFF -DMCX_BUILD_BENCH=OFF
  # halt_on_error: a sanitizer report fails the test instead of scrolling past.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "$dir" -L unit --output-on-failure -j 2 --timeout 900
done
