#!/usr/bin/env bash
# Builds one benchmark (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and runs it; the build's output goes
# to stderr so that stdout carries only the benchmark's JSON lines.
#   bench/build-and-run.sh TARGET PATH_IN_BUILD_DIR [ARGS...]
set -euo pipefail
target=$1 path=$2
shift 2
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >&2
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target "$target" -j "${MCX_JOBS:-2}" >&2
"$build_dir/$path" "$@"
