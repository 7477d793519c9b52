#!/usr/bin/env bash
# Runs PROGRAM ARGS... under OpenMPI's mpirun with 2 processes (as root in CI, oversubscribing the 2 cores).
# Exits 77 (CTest "skipped"), saying why, when mpirun is not installed.
set -euo pipefail
if ! command -v mpirun > /dev/null; then
  echo "run_mpirun.sh: mpirun not found (Debian's openmpi-bin); skipping" >&2
  exit 77
fi
exec timeout 200 mpirun --allow-run-as-root --oversubscribe -n 2 "$@"
