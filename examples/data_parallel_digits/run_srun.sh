#!/usr/bin/env bash
# Runs PROGRAM ARGS... as `srun -n 2` inside a private single-node Slurm cluster started for this run from
# Debian's packages (munged, slurmctld, slurmd; a generated slurm.conf in a temporary directory, its own ports
# and munge socket, so a Slurm installation already on the machine is left alone). The program sees the
# scheduler's own environment (SLURM_JOB_ID, SLURM_PROCID, SLURM_STEP_NODELIST, ...) and mcx's cluster
# detection derives the coordinator from it. Everything started here is stopped on exit.
# Exits 77 (CTest "skipped"), saying why, when the packages are missing or the daemons cannot run here
# (not root, no Slurm, the controller does not come up).
#   run_srun.sh PROGRAM [ARGS...]     (env: MCX_SRUN_TASKS, default 2)
set -uo pipefail
tasks=${MCX_SRUN_TASKS:-2}
skip() { echo "run_srun.sh: skipping: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the private Slurm cluster needs root (slurmd runs jobs as their user)"
for tool in munged mungekey slurmctld slurmd srun sinfo; do
  command -v "$tool" > /dev/null || skip "$tool not found (Debian's munge, slurmctld, slurmd, slurm-client)"
done

# Everything runs in a PID namespace of its own when one can be made: when this script (its init) ends, the
# kernel kills every daemon and job step left in it, whatever happened.
if [ -z "${MCX_SRUN_IN_NAMESPACE:-}" ] && unshare --pid --fork --mount-proc true 2> /dev/null; then
  MCX_SRUN_IN_NAMESPACE=1 exec unshare --pid --fork --mount-proc --kill-child bash "$0" "$@"
fi

dir=$(mktemp -d -t mcx-slurm.XXXXXX)  # the private cluster's conf, keys, sockets, state and logs
chmod 755 "$dir"
cleanup() {
  # Outside a namespace of our own: the daemons are found by the private files on their command lines.
  pkill -f "$dir/" 2> /dev/null
  sleep 0.5
  pkill -9 -f "$dir/" 2> /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
show_logs() {
  for log in munged.log slurmctld.log slurmd.log; do
    [ -f "$dir/$log" ] && { echo "--- $log (last lines)" >&2; tail -n 15 "$dir/$log" >&2; }
  done
}

# Two free TCP ports for the controller and the node daemon.
read -r ctld_port slurmd_port < <(/usr/bin/python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
)
host=$(hostname -s)
cpus=$(nproc)

mkdir -p "$dir/state" "$dir/spool"
mungekey --create --force --keyfile="$dir/munge.key" > /dev/null 2>&1 || skip "mungekey could not create a key"
chmod 600 "$dir/munge.key"
munged --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" --force 2> "$dir/munged.err" ||
  { cat "$dir/munged.err" >&2; skip "munged did not start"; }

cat > "$dir/slurm.conf" <<EOF
ClusterName=mcxtest
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=mcx Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i || { show_logs; skip "slurmctld did not start"; }
slurmd -f "$SLURM_CONF" || { show_logs; skip "slurmd did not start"; }

# Wait (at most 30 s) for the node to be idle in the partition.
for _ in $(seq 60); do
  state=$(sinfo -h -p mcx -o %T 2> /dev/null | head -n 1)
  [ "$state" = "idle" ] && break
  sleep 0.5
done
[ "$state" = "idle" ] || { show_logs; skip "the Slurm node did not become idle (state '${state:-none}')"; }

echo "run_srun.sh: private Slurm cluster up (node $host, $cpus CPUs); srun -n $tasks $*" >&2
# --overcommit: the tasks share the machine's cores; the deadline bounds the whole step.
timeout 200 srun -n "$tasks" --overcommit --kill-on-bad-exit=1 --time=4 "$@"
rc=$?
[ $rc -eq 0 ] || { echo "run_srun.sh: srun exited $rc" >&2; show_logs; }
exit $rc
