#!/usr/bin/env bash
# Installs every Debian package that mcx's build, tests, examples and benchmarks need.
# Idempotent: packages already present are skipped; `apt-get update` runs only when something is missing.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # compiler cache: unchanged files are not compiled again (cmake/mcx_ccache.cmake)
  ccache
  # code generation for fused regions (ORC JIT; optional at build time, see docs/codegen.md)
  llvm-19-dev
  # Clang's thread-safety analysis of the library (scripts/thread_safety.sh, run by CI)
  clang-19
  # core libraries
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libzstd-dev libssl-dev
  libopenblas-dev libopenblas0
  # checkpoints' default checksum (XXH3-128; SHA-256 on request comes from libssl)
  libxxhash-dev
  # export artifacts (FlatBuffers schema compiler + header-only runtime)
  flatbuffers-compiler libflatbuffers-dev
  # control plane (gRPC + protobuf)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  python3 python3-numpy python3-torch
  # the checkpoint tests' independent reader checks XXH3-128 digests
  python3-xxhash
  # the Kubernetes examples' manifests read by the cluster-detection tests (YAML to JSON at build time)
  python3-yaml
  # multi-process tests and peers
  openmpi-bin libopenmpi-dev openssl
  # data plane across processes (Gloo collectives over TCP)
  libgloo-dev
  # the Slurm test's private single-node cluster (examples/data_parallel_digits/run_srun.sh)
  munge slurmctld slurmd slurm-client
  # data download for the digits example (apt-get download + dpkg -x)
  dpkg-dev ca-certificates zlib1g-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
