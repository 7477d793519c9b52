#!/usr/bin/env bash
# A real multi-node Slurm cluster on one machine: slurmctld and two slurmd "nodes", each in network and UTS
# namespaces of its own (hostnames mcxnode1/mcxnode2, addresses on a bridge; run_srun.sh with MCX_SRUN_NODES=2),
# and jobs started with `srun -N 2 --ntasks-per-node 2`:
#   1. the data-parallel digits training, 4 processes x 1 device, in deterministic mode: every process's final
#      parameters are bitwise equal to one process with 4 devices (its fingerprint, computed here first);
#      each process says cluster detection took everything from Slurm (process id, its node's hostname, its local
#      process id on the node, the coordinator on the first node);
#   2. every collective across the 4 processes (collectives_worker, each checked against its reference);
#   3. the same under OpenMPI's launcher in the same kind of cluster (`salloc -N 2 mpirun`, its daemons started
#      through Slurm, no ssh): detected as OpenMPI, with the coordinator on the allocation's first node although
#      mpirun itself runs on the submitting host.
# Exits 77 (CTest "skipped") saying why where the cluster cannot be made (run_srun.sh's reasons).
#   slurm_nodes_test.sh RUN_SRUN DATA_PARALLEL_DIGITS DIGITS_DATA COLLECTIVES_WORKER
set -uo pipefail
run_srun=$1 digits=$2 data=$3 worker=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "slurm_nodes_test: FAIL: $*"; exit 1; }
train=(--data "$data" --epochs 3 --threads 1 --min-accuracy 0.8)

MCX_DETERMINISTIC_REDUCTIONS=1 "$digits" "${train[@]}" --devices 4 > "$tmp/reference.log" 2>&1 ||
  { cat "$tmp/reference.log"; fail "the one-process reference run failed"; }
want=$(sed -n 's/.*parameters fingerprint \([0-9a-f]*\).*/\1/p' "$tmp/reference.log")
[ -n "$want" ] || { cat "$tmp/reference.log"; fail "the reference printed no parameters fingerprint"; }

MCX_SRUN_NODES=2 MCX_SRUN_TASKS_PER_NODE=2 MCX_DETERMINISTIC_REDUCTIONS=1 MCX_LOG_LEVEL=info \
  bash "$run_srun" "$digits" "${train[@]}" --devices 1 > "$tmp/digits.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat "$tmp/digits.log"; exit 77; fi
[ $rc -eq 0 ] || { cat "$tmp/digits.log"; fail "srun of the digits training exited $rc"; }
got=$(grep -c "parameters fingerprint $want" "$tmp/digits.log")
[ "$got" -eq 4 ] || { cat "$tmp/digits.log"; fail "$got of 4 processes ended with the reference's parameters ($want)"; }
coordinator=$(sed -n 's/.*process 0 of 4 joined the job .*(coordinator \([^,]*\), detected by slurm).*/\1/p' \
  "$tmp/digits.log")
[[ "$coordinator" == mcxnode1:* ]] || { cat "$tmp/digits.log"; fail "the coordinator is '$coordinator', not on mcxnode1"; }
for p in 0 1 2 3; do
  node=mcxnode$((1 + p / 2)) local=$((p % 2))
  line="process $p of 4 joined the job on host $node, local process $local (coordinator $coordinator, detected by slurm)"
  grep -qF "$line" "$tmp/digits.log" || { cat "$tmp/digits.log"; fail "no line '$line'"; }
done
echo "slurm_nodes_test: digits on 2 nodes x 2 processes: parameters bitwise equal to 1 process x 4 devices ($want)"

MCX_SRUN_NODES=2 MCX_SRUN_TASKS_PER_NODE=2 MCX_CPU_DEVICE_COUNT=2 MCX_DEVICE_TIMEOUT_S=60 \
  bash "$run_srun" "$worker" all > "$tmp/collectives.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat "$tmp/collectives.log"; exit 77; fi
done_lines=$(grep -c "DONE 0 failed" "$tmp/collectives.log")
if [ $rc -ne 0 ] || [ "$done_lines" -ne 4 ] || grep -q "FAIL" "$tmp/collectives.log"; then
  cat "$tmp/collectives.log"
  fail "collectives across 2 nodes: srun exited $rc, $done_lines of 4 processes finished without failures"
fi
echo "slurm_nodes_test: every collective across 2 nodes x 2 processes x 2 devices matches its reference"
MCX_SRUN_NODES=2 MCX_SRUN_TASKS_PER_NODE=2 MCX_SRUN_LAUNCHER=mpirun MCX_CPU_DEVICE_COUNT=2 MCX_DEVICE_TIMEOUT_S=60 \
  MCX_LOG_LEVEL=info bash "$run_srun" "$worker" all > "$tmp/mpirun.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then cat "$tmp/mpirun.log"; exit 77; fi
done_lines=$(grep -c "DONE 0 failed" "$tmp/mpirun.log")
detected=$(grep -c "joined the job on host mcxnode[12], local process [01] (coordinator mcxnode1:[0-9]*, detected by ompi)" \
  "$tmp/mpirun.log")
if [ $rc -ne 0 ] || [ "$done_lines" -ne 4 ] || [ "$detected" -ne 4 ] || grep -q "FAIL" "$tmp/mpirun.log"; then
  cat "$tmp/mpirun.log"
  fail "salloc mpirun across 2 nodes: exited $rc, $done_lines of 4 processes finished without failures, $detected of 4 \
detected as OpenMPI with the coordinator on mcxnode1"
fi
echo "slurm_nodes_test: salloc -N 2 mpirun: detected as OpenMPI, coordinator on mcxnode1, every collective matches"
echo "slurm_nodes_test: OK"
