#!/usr/bin/env bash
# collectives_worker under OpenMPI's mpirun: N processes x D devices, the data plane given by MCX_COLLECTIVES
# (gloo or mpi). Every rank must report "DONE 0 failed" and the same bits for the float all-reduce.
#   mpirun_collectives_test.sh WORKER N D BACKEND
# Exits 77 (CTest "skipped"), saying why, when mpirun is not installed.
set -uo pipefail
worker=$1 n=$2 d=$3 backend=$4
command -v mpirun > /dev/null || { echo "mpirun_collectives_test: skipped: mpirun not found (openmpi-bin)"; exit 77; }
out=$(MCX_COLLECTIVES=$backend MCX_CPU_DEVICE_COUNT=$d MCX_DEVICE_TIMEOUT_S=30 timeout 120 \
  mpirun --allow-run-as-root --oversubscribe -n "$n" -x MCX_COLLECTIVES -x MCX_CPU_DEVICE_COUNT -x MCX_DEVICE_TIMEOUT_S \
  "$worker" all 2>&1)
rc=$?
done_ok=$(grep -c "DONE 0 failed" <<< "$out")
hashes=$(grep "HASH psum_float" <<< "$out" | sort -u | wc -l)
if [ $rc -ne 0 ] || [ "$done_ok" -ne "$n" ] || [ "$hashes" -ne 1 ] || grep -q "FAIL" <<< "$out"; then
  echo "$out"
  echo "mpirun_collectives_test: FAIL ($backend, $n x $d): exit $rc, $done_ok of $n ranks passed, $hashes distinct hashes"
  exit 1
fi
echo "mpirun_collectives_test: OK ($backend, $n processes x $d devices, every check passed on every rank)"
