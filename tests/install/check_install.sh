#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds a user program against it with
# find_package(mcx): the package config, the exported targets and the installed headers must all work.
#   check_install.sh BUILD_DIR
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" > "$tmp/install.log"
cmake -S "$here/consumer" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log"
cmake --build "$tmp/build" > "$tmp/build.log"
out=$("$tmp/build/consumer")
echo "consumer printed: $out"
[ "$out" = "f32[]{3.718282} f32[2]{0, 2}" ] || { echo "check_install: unexpected output" >&2; exit 1; }
