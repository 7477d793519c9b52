#!/usr/bin/env bash
# Three "hosts" on one machine, two processes each: network namespaces on a bridge (10.79.0.11-13), the link of
# host 3 shaped with tc (netem: 5 ms each way and 200 Mbit/s; a token bucket of 200 Mbit/s where the kernel has no
# netem), the coordinator on host 1. The processes find their
# hosts themselves (host_identity(): their network namespaces differ), so the data plane's all-reduces are
# hierarchical. Checks:
#   1. every collective across the 6 processes matches its reference (collectives_worker all);
#   2. bytes on the wire: a 16 MiB psum per process crosses each host's link 2 (H - 1) / H x 16 MiB = 21.3 MiB
#      each way (the host leaders' ring), counted on the bridge side of each veth pair (psum_mib 16 minus the
#      same job with a tiny psum); the flat ring of the same processes (each given a host of its own with
#      MCX_HOST_ID) sends 2 (P - 1) / P x 16 MiB = 26.7 MiB over each link between hosts, and is measured too.
# Needs root, iproute2 and tc; exits 77 (CTest "skipped") saying why otherwise.
#   three_hosts_test.sh BIN_DIR COLLECTIVES_WORKER
set -uo pipefail
bin=$1 worker=$2
skip() { echo "three_hosts_test: skipped: $*"; exit 77; }
fail() { echo "three_hosts_test: FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "iproute2 (ip) is not installed"
command -v tc > /dev/null || skip "tc (iproute2) is not installed"
# Private network, mount and PID namespaces: the bridge, the hosts and every process die with this script.
if [ -z "${MCX_THREE_HOSTS_INNER:-}" ]; then
  unshare --net --mount --pid --fork true 2> /dev/null || skip "cannot create namespaces here"
  MCX_THREE_HOSTS_INNER=1 exec unshare --net --mount --pid --fork --mount-proc --kill-child bash "$0" "$@"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p /run/netns && mount -t tmpfs mcx-netns /run/netns || skip "cannot mount a private /run/netns"
ip link set lo up && ip link add mcxbr type bridge && ip link set mcxbr up || skip "cannot create a bridge"
for h in 1 2 3; do
  ip netns add "host$h" && nsenter --net="/run/netns/host$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 &&
    ip link add "vb$h" type veth peer name eth0 netns "host$h" && ip link set "vb$h" master mcxbr up &&
    ip -n "host$h" addr add "10.79.0.1$h/24" dev eth0 && ip -n "host$h" link set eth0 up &&
    ip -n "host$h" link set lo up || skip "cannot set up host $h's network"
done
# Host 3 is far and slow: 5 ms and 200 Mbit/s each way with netem; where the kernel has no netem, 200 Mbit/s
# (a token bucket) without the delay.
shaped="5 ms, 200 Mbit/s"
shape() {
  tc qdisc add dev vb3 root "$@" && ip netns exec host3 tc qdisc add dev eth0 root "$@"
}
if ! shape netem delay 5ms rate 200mbit 2> /dev/null; then
  shape tbf rate 200mbit burst 64kb latency 100ms || skip "tc can shape neither with netem nor with tbf"
  shaped="200 Mbit/s; this kernel has no netem for the delay"
fi

port=$((20000 + $$ % 20000))
# run_job NAME ARGS...: the 6 processes (2 per host). With flat=1 each process is told it has a host of its own
# (MCX_HOST_ID), so the all-reduce is the flat ring. Logs in $tmp/NAME.p<k>.log.
flat=0
run_job() {
  local name=$1 pids=() status=0
  shift
  # A coordinator of its own on host 1 (a coordinator serves one job), gone when the job is done.
  port=$((port + 1))
  ip netns exec host1 "$bin/mcx-coordinator" --bind "10.79.0.11:$port" --num-processes 6 --exit-when-done \
    > "$tmp/$name.coordinator.log" 2>&1 &
  local coordinator=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$tmp/$name.coordinator.log" && break; sleep 0.1; done
  grep -q "listening on" "$tmp/$name.coordinator.log" ||
    { cat "$tmp/$name.coordinator.log" >&2; echo "three_hosts_test: the coordinator did not start" >&2; return 1; }
  for p in 0 1 2 3 4 5; do
    local own_host=()
    [ "$flat" = 1 ] && own_host=(MCX_HOST_ID="a host of process $p's own")
    ip netns exec "host$((1 + p / 2))" env MCX_COORDINATOR_ADDRESS="10.79.0.11:$port" MCX_NUM_PROCESSES=6 \
      MCX_PROCESS_ID=$p MCX_STANDALONE_COORDINATOR=1 MCX_CLUSTER_DETECTION=env MCX_INIT_TIMEOUT=30 \
      MCX_DEVICE_TIMEOUT_S=60 MCX_CPU_DEVICE_COUNT=1 "${own_host[@]}" timeout 120 "$worker" "$@" \
      > "$tmp/$name.p$p.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  wait "$coordinator" 2> /dev/null
  for p in 0 1 2 3 4 5; do
    if [ $status -ne 0 ] || grep -q "FAIL" "$tmp/$name.p$p.log" || ! grep -q "DONE 0 failed" "$tmp/$name.p$p.log"; then
      { echo "--- $name, process $p:"; cat "$tmp/$name.p$p.log"; } >&2
      status=1
    fi
  done
  return $status
}
# Bytes that left (rx on the bridge side) and entered (tx) host H's link.
# (/proc/net/dev is this network namespace's; /sys/class/net still shows the machine's.)
link_bytes() { awk -v dev="vb$1:" '$1 == dev { print $2 + $10 }' /proc/net/dev; }
# psum_bytes NAME: sets bytes[1..3], per host the bytes of a 16 MiB psum on its link (both ways), a job with a
# tiny psum subtracted.
bytes=()
psum_bytes() {
  local before=() base=()
  for h in 1 2 3; do before[$h]=$(link_bytes $h); done
  run_job "$1-baseline" psum_mib 0 || fail "$1: the baseline job failed"
  for h in 1 2 3; do base[$h]=$(($(link_bytes $h) - before[h])); before[$h]=$(link_bytes $h); done
  run_job "$1" psum_mib 16 || fail "$1: the 16 MiB psum failed"
  for h in 1 2 3; do bytes[$h]=$(($(link_bytes $h) - before[h] - base[h])); done
}

run_job collectives all || fail "collectives across 3 hosts x 2 processes"
echo "three_hosts_test: every collective across 3 hosts x 2 processes (host 3's link: $shaped) matches its reference"

psum_bytes hierarchical
h1=${bytes[1]} h2=${bytes[2]} h3=${bytes[3]}
flat=1
psum_bytes flat
f1=${bytes[1]} f2=${bytes[2]} f3=${bytes[3]}
mib=$((1 << 20))
# Each way: hierarchical 2 (3 - 1) / 3 x 16 MiB; flat 2 (6 - 1) / 6 x 16 MiB. Both ways counted, so twice that.
want=$((2 * 2 * 2 * 16 * mib / 3)) flat_want=$((2 * 2 * 5 * 16 * mib / 6))
echo "three_hosts_test: a 16 MiB psum, bytes on each host's link (both ways): hierarchical $h1 $h2 $h3" \
  "(payload $want), flat ring $f1 $f2 $f3 (payload $flat_want)"
for b in $h1 $h2 $h3; do
  # TCP/IP headers and acknowledgements add a few percent; nothing else may cross.
  [ "$b" -ge "$want" ] && [ "$b" -le $((want * 108 / 100)) ] ||
    fail "a host's link carried $b bytes; the hierarchical all-reduce should send $want (+ at most 8% of headers)"
done
for b in $f1 $f2 $f3; do
  [ "$b" -ge "$flat_want" ] || fail "the flat ring's link carried $b bytes, less than its payload $flat_want"
done
echo "three_hosts_test: OK (each host's link carries 2 (H-1)/H of the data each way, $((100 * h3 / f3))% of the flat ring's)"
