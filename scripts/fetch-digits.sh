#!/usr/bin/env bash
# Fetches the UCI optical-digits data (1797 8x8 images, 64 features + label per CSV row) into
# data/digits.csv.gz. The file ships inside Debian's python3-sklearn package; this script downloads that
# .deb with `apt-get download` (nothing is installed), unpacks it in a temporary directory with `dpkg -x`
# and copies the one file out. Idempotent: does nothing when data/digits.csv.gz already exists.
# `apt-get update` runs only when the first download attempt fails.
set -euo pipefail
cd "$(dirname "$0")/.."

dest=data/digits.csv.gz
if [ -s "$dest" ]; then
  echo "fetch-digits: $dest present"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes into the current directory; the _apt sandbox user needs to write there.
chmod 0777 "$tmp"

download() { (cd "$tmp" && apt-get download -q python3-sklearn); }
if ! download; then
  echo "fetch-digits: download failed, running apt-get update and retrying"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  download
fi

deb=$(ls "$tmp"/python3-sklearn_*.deb)
dpkg -x "$deb" "$tmp/root"
src=$(find "$tmp/root" -path '*sklearn/datasets/data/digits.csv.gz' | head -n 1)
if [ -z "$src" ]; then
  echo "fetch-digits: digits.csv.gz not found in $(basename "$deb")" >&2
  exit 1
fi
mkdir -p data
cp "$src" "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "fetch-digits: wrote $dest ($(wc -c <"$dest") bytes, $(zcat "$dest" | wc -l) rows)"
