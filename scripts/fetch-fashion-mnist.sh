#!/usr/bin/env bash
# Fetches Fashion-MNIST (60,000 training + 10,000 test 28x28 grey images, gzipped IDX files) into
# data/fashion-mnist/. The files ship in Debian's dataset-fashion-mnist package; this script downloads that
# .deb with `apt-get download` (nothing is installed), unpacks it in a temporary directory with `dpkg -x`
# and copies the four files out, checking each one's SHA-256. Idempotent: does nothing when the four files are
# present with the right sizes. `apt-get update` runs only when the first download attempt fails.
# Prints the directory the files are in (the loader's examples read it by default).
set -euo pipefail
cd "$(dirname "$0")/.."

dest=data/fashion-mnist
# name size sha256 (Debian's dataset-fashion-mnist 0.0~git20200523.55506a9-1, the upstream release files)
files=(
  "train-images-idx3-ubyte.gz 26421856 b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"
  "train-labels-idx1-ubyte.gz 29491 0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"
  "t10k-images-idx3-ubyte.gz 4422079 cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"
  "t10k-labels-idx1-ubyte.gz 5125 8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"
)

present() {
  local entry name size
  for entry in "${files[@]}"; do
    read -r name size _ <<<"$entry"
    [ -f "$dest/$name" ] && [ "$(wc -c <"$dest/$name")" -eq "$size" ] || return 1
  done
}
if present; then
  echo "fetch-fashion-mnist: $dest present"
  echo "$(pwd)/$dest"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes into the current directory; the _apt sandbox user needs to write there.
chmod 0777 "$tmp"

download() { (cd "$tmp" && apt-get download -q dataset-fashion-mnist); }
if ! download; then
  echo "fetch-fashion-mnist: download failed, running apt-get update and retrying"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  download
fi

deb=$(ls "$tmp"/dataset-fashion-mnist_*.deb)
dpkg -x "$deb" "$tmp/root"
src=$tmp/root/usr/share/datasets/fashion-mnist
mkdir -p "$dest"
for entry in "${files[@]}"; do
  read -r name size sum <<<"$entry"
  if [ ! -f "$src/$name" ]; then
    echo "fetch-fashion-mnist: $name not found in $(basename "$deb")" >&2
    exit 1
  fi
  found=$(sha256sum "$src/$name" | cut -d' ' -f1)
  if [ "$found" != "$sum" ]; then
    echo "fetch-fashion-mnist: $name: expected sha256 $sum, found $found" >&2
    exit 1
  fi
  cp "$src/$name" "$dest/$name.tmp"
  mv "$dest/$name.tmp" "$dest/$name"
done
echo "fetch-fashion-mnist: wrote $dest ($(du -sk "$dest" | cut -f1) KiB, 4 files, checksums match)"
echo "$(pwd)/$dest"
