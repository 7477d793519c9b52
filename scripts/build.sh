#!/usr/bin/env bash
# Configures and builds mcx into ${MCX_BUILD_DIR:-build} with Ninja. Extra arguments go to cmake.
# MCX_BUILD_TARGETS="a b": build only those targets (and what they need) instead of everything.
# Ninja prints "[n/m] Building ..." for each step, so a long build shows where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MCX_BUILD_DIR:-build}
jobs=${MCX_JOBS:-2}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${MCX_BUILD_TYPE:-RelWithDebInfo} "$@"
targets=()
if [ -n "${MCX_BUILD_TARGETS:-}" ]; then
  read -r -a names <<< "$MCX_BUILD_TARGETS"
  targets=(--target "${names[@]}")
fi
echo "build.sh: building ${MCX_BUILD_TARGETS:-everything} in $build_dir with $jobs jobs"
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
