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
# e = exp(1) to f32 precision: the last digit depends on the exp kernel the build uses (vectorised in optimised
# builds, scalar in the sanitizer builds), so the check reads the number instead of matching the string.
echo "$out" | grep -Eq '^f32\[\]\{3\.71828[0-9]*\} f32\[2\]\{0, 2\}$' ||
  { echo "check_install: unexpected output (expected e ~ 3.718282 and {0, 2})" >&2; exit 1; }
