#!/usr/bin/env bash
# Runs PROGRAM ARGS... as `srun -n 2` inside a private Slurm cluster started for this run from Debian's packages
# (munged, slurmctld, slurmd; a generated slurm.conf in a temporary directory, its own ports and munge socket, so
# a Slurm installation already on the machine is left alone). The program sees the scheduler's own environment
# (SLURM_JOB_ID, SLURM_PROCID, SLURM_STEP_NODELIST, ...) and mcx's cluster detection derives the coordinator
# from it. Everything started here is stopped on exit.
#
# With MCX_SRUN_NODES=N (N > 1) the cluster has N nodes, each a slurmd in network and UTS namespaces of its own:
# hostname mcxnodeI, address 10.78.0.(10+I) on a bridge with the controller (10.78.0.1), names resolved by a
# private /etc/hosts. The job runs as `srun -N N --ntasks-per-node T` (MCX_SRUN_TASKS_PER_NODE, default 2), so
# its processes on different nodes talk over the bridge as over a network.
#
# Exits 77 (CTest "skipped"), saying why, when the packages are missing or the daemons cannot run here
# (not root, no Slurm, no namespaces, the controller or a node does not come up).
# With MCX_SRUN_LAUNCHER=mpirun the job is `salloc -N N mpirun ...` instead: OpenMPI's launcher starts the
# processes through Slurm, and they carry OpenMPI's variables.
#   run_srun.sh PROGRAM [ARGS...]     (env: MCX_SRUN_TASKS, default 2; MCX_SRUN_NODES, default 1;
#                                      MCX_SRUN_TASKS_PER_NODE, default 2; MCX_SRUN_LAUNCHER, srun or mpirun)
set -uo pipefail
tasks=${MCX_SRUN_TASKS:-2}
nodes=${MCX_SRUN_NODES:-1}
per_node=${MCX_SRUN_TASKS_PER_NODE:-2}
skip() { echo "run_srun.sh: skipping: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the private Slurm cluster needs root (slurmd runs jobs as their user)"
for tool in munged mungekey slurmctld slurmd srun sinfo; do
  command -v "$tool" > /dev/null || skip "$tool not found (Debian's munge, slurmctld, slurmd, slurm-client)"
done
[[ "$nodes" =~ ^[1-9][0-9]?$ ]] || { echo "run_srun.sh: MCX_SRUN_NODES must be 1..99, got '$nodes'" >&2; exit 2; }
namespaces=(--pid --fork --mount-proc)
if [ "$nodes" -gt 1 ]; then
  command -v ip > /dev/null || skip "iproute2 (ip) is not installed"
  namespaces+=(--net)  # the bridge and the nodes' links live and die with this script
fi

# Everything runs in a PID namespace of its own when one can be made: when this script (its init) ends, the
# kernel kills every daemon and job step left in it, whatever happened.
if [ -z "${MCX_SRUN_IN_NAMESPACE:-}" ] && unshare "${namespaces[@]}" true 2> /dev/null; then
  MCX_SRUN_IN_NAMESPACE=1 exec unshare "${namespaces[@]}" --kill-child bash "$0" "$@"
fi
[ "$nodes" -eq 1 ] || [ -n "${MCX_SRUN_IN_NAMESPACE:-}" ] || skip "cannot make the namespaces of $nodes nodes here"

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
  for log in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd*.log; do
    [ -f "$log" ] && { echo "--- $(basename "$log") (last lines)" >&2; tail -n 15 "$log" >&2; }
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
ctld_addr=127.0.0.1
node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN"
if [ "$nodes" -gt 1 ]; then
  # The nodes' network: a bridge in this script's network namespace, one veth pair to each node's namespace.
  ctld_addr=10.78.0.1
  ip link set lo up && ip link add mcxbr type bridge && ip addr add "$ctld_addr/24" dev mcxbr &&
    ip link set mcxbr up || skip "cannot create the nodes' bridge"
  mkdir -p /run/netns && mount -t tmpfs mcx-netns /run/netns || skip "cannot mount a private /run/netns"
  printf '127.0.0.1 localhost\n%s %s\n' "$ctld_addr" "$host" > "$dir/hosts"
  node_lines=""
  for i in $(seq "$nodes"); do
    name=mcxnode$i addr=10.78.0.$((10 + i))
    # IPv4 only: a fresh link's IPv6 address stays "tentative" for a moment, and OpenMPI (built with IPv6) may pick
    # it and wait on a connection that never completes.
    ip netns add "$name" && nsenter --net="/run/netns/$name" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
      net.ipv6.conf.default.disable_ipv6=1 &&
      ip link add "vh$i" type veth peer name "vn$i" && ip link set "vn$i" netns "$name" &&
      ip link set "vh$i" master mcxbr up && ip -n "$name" addr add "$addr/24" dev "vn$i" &&
      ip -n "$name" link set "vn$i" up && ip -n "$name" link set lo up || skip "cannot set up node $name's network"
    echo "$addr $name" >> "$dir/hosts"
    mkdir -p "$dir/spool-$name"
    node_lines+="NodeName=$name NodeAddr=$addr CPUs=$cpus State=UNKNOWN"$'\n'
  done
  mount --bind "$dir/hosts" /etc/hosts || skip "cannot give the cluster its own /etc/hosts"
fi

mkdir -p "$dir/state" "$dir/spool-$host"
mungekey --create --force --keyfile="$dir/munge.key" > /dev/null 2>&1 || skip "mungekey could not create a key"
chmod 600 "$dir/munge.key"
munged --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" --force 2> "$dir/munged.err" ||
  { cat "$dir/munged.err" >&2; skip "munged did not start"; }

cat > "$dir/slurm.conf" <<EOF
ClusterName=mcxtest
SlurmctldHost=${host}($ctld_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
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
$node_lines
PartitionName=mcx Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i || { show_logs; skip "slurmctld did not start"; }
if [ "$nodes" -eq 1 ]; then
  slurmd -f "$SLURM_CONF" || { show_logs; skip "slurmd did not start"; }
  layout=(-n "$tasks")
else
  # Each node's slurmd in its network namespace and a UTS namespace with the node's hostname (by which slurmd
  # finds its NodeName); the job steps it starts inherit both.
  for i in $(seq "$nodes"); do
    # (nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup file system slurmd needs.)
    nsenter --net="/run/netns/mcxnode$i" unshare --uts sh -c "hostname mcxnode$i && exec slurmd -f '$SLURM_CONF'" ||
      { show_logs; skip "slurmd of mcxnode$i did not start"; }
  done
  layout=(-N "$nodes" --ntasks-per-node "$per_node")
fi

# Wait (at most 30 s) for every node to be idle in the partition.
for _ in $(seq 60); do
  idle=$(sinfo -h -N -p mcx -t idle -o %N 2> /dev/null | wc -l)
  [ "$idle" -ge "$nodes" ] && break
  sleep 0.5
done
[ "$idle" -ge "$nodes" ] ||
  { show_logs; sinfo -N -p mcx >&2; skip "$idle of the $nodes Slurm nodes became idle within 30 s"; }

if [ "${MCX_SRUN_LAUNCHER:-srun}" = mpirun ]; then
  # OpenMPI's own launcher inside an allocation: mpirun starts its daemons on the nodes through Slurm (no ssh)
  # and gives every process OpenMPI's variables (OMPI_COMM_WORLD_RANK, ...).
  mpi_layout=(-n "$tasks")
  [ "$nodes" -eq 1 ] || mpi_layout=(-n $((nodes * per_node)) --map-by "ppr:$per_node:node")
  echo "run_srun.sh: private Slurm cluster up ($nodes node(s), $cpus CPUs each); salloc -N $nodes mpirun" \
    "${mpi_layout[*]} $*" >&2
  timeout 200 salloc -N "$nodes" --overcommit --time=4 mpirun --allow-run-as-root --oversubscribe \
    "${mpi_layout[@]}" "$@"
else
  echo "run_srun.sh: private Slurm cluster up ($nodes node(s), $cpus CPUs each); srun ${layout[*]} $*" >&2
  # --overcommit: the tasks share the machine's cores; the deadline bounds the whole step.
  timeout 200 srun "${layout[@]}" --overcommit --kill-on-bad-exit=1 --time=4 "$@"
fi
rc=$?
[ $rc -eq 0 ] || { echo "run_srun.sh: srun exited $rc" >&2; show_logs; }
exit $rc
