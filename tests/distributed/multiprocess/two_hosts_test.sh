#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2), one process
# of a 2-process job in each, the coordinator on host 1. collectives_worker runs every collective across them,
# so the data plane binds the address of the route to the coordinator (not loopback, not all interfaces) and
# its traffic crosses the veth pair as it would cross a network. Needs root and `ip netns`; exits 77 (CTest
# "skipped") saying why when namespaces cannot be made.
# With "tls": mTLS required with each process's own certificate bound to its task, so the data plane between the
# hosts runs over TLS 1.3 by default; the test checks the processes say so.
#   two_hosts_test.sh BIN_DIR COLLECTIVES_WORKER [tls]
set -uo pipefail
bin=$1 worker=$2 mode=${3:-plain}
suffix=$$
h1=mcx_h1_$suffix h2=mcx_h2_$suffix
skip() { echo "two_hosts_test: skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "iproute2 (ip) is not installed"
cleanup() {
  if [ -n "${pids:-}" ]; then
    kill -9 $pids 2> /dev/null
    wait $pids 2> /dev/null
  fi
  ip netns del "$h1" 2> /dev/null
  ip netns del "$h2" 2> /dev/null
}
trap cleanup EXIT
# shellcheck source=netns_pair.sh
source "$(dirname "$0")/netns_pair.sh"
why=$(netns_pair "$h1" "$h2" "v1_$suffix" "v2_$suffix" 10.77.0 2>&1) || skip "${why:-the namespaces could not be set up}"
tmp=$(mktemp -d)
port=$((20000 + suffix % 20000))
coordinator_tls=() tls0=() tls1=()
if [ "$mode" = tls ]; then
  bash "$(dirname "$0")/make_certs.sh" "$tmp/certs" 2 > /dev/null
  c=$tmp/certs
  coordinator_tls=(--mtls-cert "$c/coordinator.pem" --mtls-key "$c/coordinator.key" --mtls-ca "$c/ca.pem"
                   --mtls-peer-uri-prefix spiffe://mcx/job/ --mtls-bind-identity --require-mtls)
  for p in 0 1; do
    declare -n t=tls$p
    t=(MCX_MTLS_CERT_FILE="$c/task$p.pem" MCX_MTLS_KEY_FILE="$c/task$p.key" MCX_MTLS_CA_FILE="$c/ca.pem"
       MCX_MTLS_PEER_URI_PREFIX=spiffe://mcx/job/ MCX_MTLS_BIND_TASK_IDENTITY=1 MCX_REQUIRE_MTLS=1 MCX_LOG_LEVEL=debug)
  done
fi
ip netns exec "$h1" "$bin/mcx-coordinator" --bind "10.77.0.1:$port" --num-processes 2 "${coordinator_tls[@]}" \
  > "$tmp/coord.log" 2>&1 &
pids=$!
for _ in $(seq 1 100); do grep -q "listening on" "$tmp/coord.log" && break; sleep 0.1; done
grep -q "listening on" "$tmp/coord.log" || { cat "$tmp/coord.log"; echo "two_hosts_test: FAIL coordinator did not start"; exit 1; }
common=(MCX_COORDINATOR_ADDRESS="10.77.0.1:$port" MCX_NUM_PROCESSES=2 MCX_STANDALONE_COORDINATOR=1
        MCX_CLUSTER_DETECTION=env MCX_INIT_TIMEOUT=20 MCX_DEVICE_TIMEOUT_S=30 MCX_CPU_DEVICE_COUNT=2)
ip netns exec "$h1" env "${common[@]}" "${tls0[@]}" MCX_PROCESS_ID=0 timeout 90 "$worker" all > "$tmp/p0.log" 2>&1 &
p0=$!
ip netns exec "$h2" env "${common[@]}" "${tls1[@]}" MCX_PROCESS_ID=1 timeout 90 "$worker" all > "$tmp/p1.log" 2>&1 &
p1=$!
pids="$pids $p0 $p1"
wait $p0; rc0=$?
wait $p1; rc1=$?
status=0
for p in 0 1; do
  log=$tmp/p$p.log
  if grep -q "FAIL" "$log" || ! grep -q "DONE 0 failed" "$log"; then
    echo "--- host $((p + 1)) (process $p):"; cat "$log"; status=1
  fi
  if [ "$mode" = tls ] && ! grep -q "data plane: tcp+tls on 10.77.0.$((p + 1))" "$log"; then
    echo "--- host $((p + 1)) (process $p) did not run its data plane over TLS:"; cat "$log"; status=1
  fi
done
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || status=1
grep -c "CHECK .* OK" "$tmp/p1.log" | xargs echo "two_hosts_test: checks passed on host 2:"
rm -rf "$tmp"
[ $status -eq 0 ] && echo "two_hosts_test: OK ($mode; process 0 on 10.77.0.1, process 1 on 10.77.0.2)"
exit $status
