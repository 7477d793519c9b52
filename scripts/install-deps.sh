#!/usr/bin/env bash
# Installs every Debian package that mcx's build, tests, examples and benchmarks need; with --demo, only what
# building the library, its tools and the examples needs (scripts/demo.sh).
# Idempotent: packages already present are skipped; `apt-get update` runs only when something is missing.
set -euo pipefail

# What building the library, its tools and the examples needs (and the demo's data download): `--demo` installs
# only these (scripts/demo.sh). The CMake configure also finds GoogleTest, so its (small) packages are here.
demo_packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # compiler cache: unchanged files are not compiled again (cmake/mcx_ccache.cmake)
  ccache
  # code generation for fused regions (ORC JIT; optional at build time, see docs/codegen.md)
  llvm-19-dev
  # core libraries
  libabsl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libzstd-dev libssl-dev
  libopenblas-dev libopenblas0
  # checkpoints' default checksum (XXH3-128; SHA-256 on request comes from libssl)
  libxxhash-dev
  # export artifacts (FlatBuffers schema compiler + header-only runtime)
  flatbuffers-compiler libflatbuffers-dev
  # control plane (gRPC + protobuf)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # data plane across processes (Gloo collectives over TCP)
  libgloo-dev
  # the test framework the configure step finds
  libgtest-dev libgmock-dev googletest
  # data download for the examples (apt-get download + dpkg -x)
  dpkg-dev ca-certificates zlib1g-dev
)
# What the tests, the benchmarks and their peers need on top.
test_packages=(
  # Clang's thread-safety analysis of the library (scripts/thread_safety.sh, run by CI)
  clang-19
  # benchmarks and their peers
  libbenchmark-dev
  python3 python3-numpy python3-torch
  # the checkpoint tests' independent reader checks XXH3-128 digests
  python3-xxhash
  # the Kubernetes examples' manifests read by the cluster-detection tests (YAML to JSON at build time)
  python3-yaml
  # multi-process tests and peers (OpenMPI also gives the library its MPI data plane when present)
  openmpi-bin libopenmpi-dev openssl
  # the Slurm test's private cluster (examples/data_parallel_digits/run_srun.sh)
  munge slurmctld slurmd slurm-client
  # the coordinator's metrics scraped by a real Prometheus server, its exposition checked by promtool
  prometheus curl
  # the job report (mcx-run --report) rendered in a headless browser
  chromium
)

packages=("${demo_packages[@]}")
case "${1:-}" in
  --demo) ;;
  "") packages+=("${test_packages[@]}") ;;
  *) echo "install-deps: unknown argument '$1' (expected --demo or nothing)" >&2; exit 2 ;;
esac

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

echo "install-deps: installing ${#missing[@]} packages (with their dependencies; apt prints each as it is set up): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" |
  grep --line-buffered -E '^(Setting up|Get:[0-9]+ |E: )' || true
missing_after=()
for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_after+=("$p")
done
if [ ${#missing_after[@]} -gt 0 ]; then
  echo "install-deps: could not install ${missing_after[*]}" >&2
  exit 1
fi
