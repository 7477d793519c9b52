#!/usr/bin/env bash
# The cost of TLS on the data plane over a link with a network's speed, not loopback's: two "hosts" (network
# namespaces joined by a veth pair, as in tests/distributed/multiprocess/two_hosts_test.sh) whose link is shaped
# to RATE in each direction with tc's token bucket, one process of a 2-process job on each, the coordinator on
# host 1. bench_collectives runs all-reduce and all-gather from 1 MiB up over plaintext tcp and over TLS 1.3
# (MCX_DATA_PLANE_TLS=1). Prints JSON lines {name: "<op>_tls", bytes, processes, link, mcx_ms (TLS),
# peer: "mcx_tcp_plaintext", peer_ms, ratio = plaintext ms / TLS ms (the share of the throughput TLS keeps)}.
# Needs root and `ip netns`/`tc` (exits 77 saying why otherwise).
#   bash bench/collectives/two_hosts_tls.sh [--built DIR] [--rate 10gbit] [--bytes "1048576 16777216 67108864"]
# MCX_BENCH_WRAP="perf record -g -o FILE" runs process 0 under that command (to profile it).
set -uo pipefail
cd "$(dirname "$0")/../.."
built=build rate=10gbit bytes="1048576 16777216 67108864"
while [ $# -gt 0 ]; do
  case "$1" in
    --built) built=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    *) echo "two_hosts_tls: unknown argument '$1' (expected --built DIR, --rate RATE or --bytes LIST)" >&2; exit 2 ;;
  esac
done
skip() { echo "two_hosts_tls: skipped: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null && command -v tc > /dev/null || skip "iproute2 (ip, tc) is not installed"
bench=$built/bench/collectives/bench_collectives
[ -x "$bench" ] && [ -x "$built/bin/mcx-coordinator" ] || {
  echo "two_hosts_tls: build bench_collectives and mcx-coordinator in $built first" >&2; exit 2; }
suffix=$$
h1=mcx_b1_$suffix h2=mcx_b2_$suffix
tmp=$(mktemp -d)
pids=""
cleanup() {
  [ -n "$pids" ] && { kill -9 $pids 2> /dev/null; wait $pids 2> /dev/null; }
  ip netns del "$h1" 2> /dev/null
  ip netns del "$h2" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=../../tests/distributed/multiprocess/netns_pair.sh
source tests/distributed/multiprocess/netns_pair.sh
why=$(netns_pair "$h1" "$h2" "b1_$suffix" "b2_$suffix" 10.78.0 2>&1) || skip "${why:-the namespaces could not be set up}"
for h in "$h1:b1_$suffix" "$h2:b2_$suffix"; do
  ns=${h%%:*} dev=${h#*:}
  # Each direction shaped at the sender: a token bucket of RATE, bursts of 4 MB.
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 4mb latency 100ms ||
    skip "tc cannot shape the veth link (tbf)"
done
bash tests/distributed/multiprocess/make_certs.sh "$tmp/certs" 1 > /dev/null
c=$tmp/certs
coordinator_tls=()
run_pair() {  # run_pair OUT [ENV...]: one bench_collectives process per host
  local out=$1; shift
  local port=$((20000 + (suffix + RANDOM) % 20000))
  ip netns exec "$h1" "$built/bin/mcx-coordinator" --bind "10.78.0.1:$port" --num-processes 2 "${coordinator_tls[@]}" \
    > "$tmp/coord.log" 2>&1 &
  local coord=$!
  pids="$coord"
  for _ in $(seq 1 100); do grep -q "listening on" "$tmp/coord.log" && break; sleep 0.1; done
  local common=(MCX_COORDINATOR_ADDRESS="10.78.0.1:$port" MCX_NUM_PROCESSES=2 MCX_STANDALONE_COORDINATOR=1
                MCX_CLUSTER_DETECTION=env MCX_INIT_TIMEOUT=20 MCX_CPU_DEVICE_COUNT=1 MCX_CPU_THREADS=1 "$@")
  # shellcheck disable=SC2086
  ip netns exec "$h1" env "${common[@]}" MCX_PROCESS_ID=0 timeout 600 ${MCX_BENCH_WRAP:-} "$bench" --mcx-only --bytes $bytes > "$out" 2> "$tmp/p0.err" &
  local p0=$!
  # shellcheck disable=SC2086
  ip netns exec "$h2" env "${common[@]}" MCX_PROCESS_ID=1 timeout 600 "$bench" --mcx-only --bytes $bytes > /dev/null 2> "$tmp/p1.err" &
  local p1=$!
  pids="$coord $p0 $p1"
  wait $p0; local rc0=$?
  wait $p1; local rc1=$?
  kill $coord 2> /dev/null; wait $coord 2> /dev/null
  pids=""
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
    echo "two_hosts_tls: a process failed ($rc0, $rc1):" >&2; cat "$tmp/p0.err" "$tmp/p1.err" >&2; exit 1
  fi
}
echo "two_hosts_tls: link $rate each way; plaintext" >&2
run_pair "$tmp/plain.jsonl"
echo "two_hosts_tls: TLS 1.3" >&2
# The certificates that secure the data plane secure the control plane too (mTLS to the coordinator).
# The peers check each other's SPIFFE URI (the certificates name no 10.78.0.x address).
coordinator_tls=(--mtls-cert "$c/coordinator.pem" --mtls-key "$c/coordinator.key" --mtls-ca "$c/ca.pem"
                 --mtls-peer-uri-prefix spiffe://mcx/job/)
run_pair "$tmp/tls.jsonl" MCX_DATA_PLANE_TLS=1 MCX_MTLS_CERT_FILE="$c/task0.pem" MCX_MTLS_KEY_FILE="$c/task0.key" \
  MCX_MTLS_CA_FILE="$c/ca.pem" MCX_MTLS_PEER_URI_PREFIX=spiffe://mcx/job/
/usr/bin/python3 - "$tmp/plain.jsonl" "$tmp/tls.jsonl" "$rate" <<'PY'
import json, sys
load = lambda f: {(r["name"], r["bytes"]): r for r in map(json.loads, (l for l in open(f) if l.startswith("{")))}
plain, tls = load(sys.argv[1]), load(sys.argv[2])
for key, p in sorted(plain.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    t = tls.get(key)
    if t is None:
        continue
    print(json.dumps({"name": key[0] + "_tls", "bytes": key[1], "processes": 2, "link": sys.argv[3],
                      "mcx_ms": t["mcx_ms"], "peer": "mcx_tcp_plaintext", "peer_ms": p["mcx_ms"],
                      "ratio": round(p["mcx_ms"] / t["mcx_ms"], 3), "transport": t["transport"]}))
PY
