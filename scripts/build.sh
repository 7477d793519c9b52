#!/usr/bin/env bash
# Configures and builds mcx into ${MCX_BUILD_DIR:-build} with Ninja. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MCX_BUILD_DIR:-build}
jobs=${MCX_JOBS:-2}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${MCX_BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$build_dir" -j "$jobs"
