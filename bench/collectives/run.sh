#!/usr/bin/env bash
# Cross-process collectives on loopback, mcx against its peers in one run: for 2 and 4 processes, all-reduce
# (f32 sum) and all-gather from 4 KiB to 64 MiB through mcx's communicator, Gloo called directly with the same
# algorithm (ring, chunked) and OpenMPI. Prints JSON lines {name, bytes, processes, mcx_ms, peer, peer_ms, ratio}
# with ratio = peer_ms / mcx_ms (above 1: mcx is faster). mcx runs on its default data plane (tcp, the processes
# of this host through shared memory), its processes bound to a core each where mpirun binds its own (2 processes
# on this 2-core machine; 4 run unbound, as OpenMPI's do when oversubscribed). One run compares moments of a
# shared VM; alternate.sh compares medians over alternating runs; the same collectives also run over MCX_COLLECTIVES=gloo (peer
# "mcx_on_gloo"), alone in the process on shared memory (rows "<name>_alone") against loopback TCP
# (MCX_DATA_PLANE_SHARED_MEMORY=0, peer "mcx_loopback_tcp": ratio = what shared memory gains), and over TLS 1.3
# on loopback (MCX_DATA_PLANE_TLS=1, rows "<name>_tls" against peer "mcx_tcp_plaintext", the loopback TCP run:
# ratio = plaintext time / TLS time, the throughput kept). Then the
# data-parallel MLP step (784-512-512-10, batch 256) on 2 processes x 1 device against 1 process x 2 devices, each
# with where its time goes, and their ratio.
# Builds in ${MCX_BENCH_BUILD_DIR:-build-bench}.
#   bash bench/collectives/run.sh [--procs 2,4] [--built DIR]
# --built DIR: use the binaries of an existing build directory as they are (no configure, no build).
set -euo pipefail
cd "$(dirname "$0")/../.."
procs=2,4
built=""
while [ $# -gt 0 ]; do
  case "$1" in
    --procs) procs=$2; shift 2 ;;
    --built) built=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1' (expected --procs LIST or --built DIR)" >&2; exit 2 ;;
  esac
done
if [ -n "$built" ]; then
  build_dir=$built
else
  bash scripts/install-deps.sh >&2
  build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
  cmake --build "$build_dir" --target bench_collectives bench_collectives_mpi bench_mlp_step mcx-run mcx-coordinator \
    -j "${MCX_JOBS:-2}" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash tests/distributed/multiprocess/make_certs.sh "$tmp/certs" 1 >&2
tls_env=(MCX_DATA_PLANE_TLS=1 MCX_MTLS_CERT_FILE="$tmp/certs/task0.pem" MCX_MTLS_KEY_FILE="$tmp/certs/task0.key"
         MCX_MTLS_CA_FILE="$tmp/certs/ca.pem")
for n in ${procs//,/ }; do
  echo "bench/collectives: $n processes" >&2
  # Placed as OpenMPI places its processes by default: each bound to a core of its own when there are enough
  # cores (mpirun --report-bindings: "bound to socket 0[core 1]"), unbound when oversubscribed.
  bind=()
  [ "$n" -le "$(nproc)" ] && bind=(--cpu-bind cores)
  # One CPU thread per process: the processes share the 2 cores.
  MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" "${bind[@]}" --cpu-devices 1 --no-prefix --timeout 900 -- \
    "$build_dir/bench/collectives/bench_collectives" >> "$tmp/mcx.jsonl"
  MCX_COLLECTIVES=gloo MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" "${bind[@]}" --cpu-devices 1 --no-prefix --timeout 900 \
    -- "$build_dir/bench/collectives/bench_collectives" --mcx-only >> "$tmp/transports.jsonl"
  # Shared memory alone (no Gloo context in the process; its threads make the rows above noisy on 2 cores), then
  # loopback TCP instead of shared memory, plaintext and TLS (TLS has nothing to protect between two processes of
  # one host, so with shared memory on it would time shared memory again).
  MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" "${bind[@]}" --cpu-devices 1 --no-prefix --timeout 900 -- \
    "$build_dir/bench/collectives/bench_collectives" --mcx-only >> "$tmp/transports.jsonl"
  MCX_DATA_PLANE_SHARED_MEMORY=0 MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" "${bind[@]}" --cpu-devices 1 --no-prefix \
    --timeout 900 -- "$build_dir/bench/collectives/bench_collectives" --mcx-only >> "$tmp/transports.jsonl"
  env "${tls_env[@]}" MCX_DATA_PLANE_SHARED_MEMORY=0 MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" "${bind[@]}" \
    --cpu-devices 1 --no-prefix --timeout 900 -- "$build_dir/bench/collectives/bench_collectives" --mcx-only \
    >> "$tmp/transports.jsonl"
  mpirun --allow-run-as-root --oversubscribe -n "$n" "$build_dir/bench/collectives/bench_collectives_mpi" \
    >> "$tmp/mpi.jsonl"
done
echo "bench/collectives: MLP step, 1 process x 2 devices and 2 processes x 1 device" >&2
MCX_CPU_THREADS=1 "$build_dir/bench/collectives/bench_mlp_step" --devices 2 --threads 1 > "$tmp/mlp.jsonl"
MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n 2 --cpu-devices 1 --no-prefix --timeout 900 -- \
  "$build_dir/bench/collectives/bench_mlp_step" --threads 1 >> "$tmp/mlp.jsonl"
/usr/bin/python3 - "$tmp/mcx.jsonl" "$tmp/mpi.jsonl" "$tmp/mlp.jsonl" "$tmp/transports.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
other = {(r["name"], r["bytes"], r["processes"], r["transport"]): r["mcx_ms"]
         for r in map(json.loads, (l for l in open(sys.argv[4]) if l.startswith("{")))}
mpi = {(r["name"], r["bytes"], r["processes"]): r["mpi_ms"] for r in map(json.loads, (l for l in open(sys.argv[2]) if l.startswith("{")))}
for r in rows:
    print(json.dumps(r))
    m = mpi.get((r["name"], r["bytes"], r["processes"]))
    if m is not None:
        print(json.dumps({"name": r["name"], "bytes": r["bytes"], "processes": r["processes"], "mcx_ms": r["mcx_ms"],
                          "peer": "openmpi", "peer_ms": m, "ratio": round(m / r["mcx_ms"], 3)}))
    if r.get("transport") not in ("tcp", None):
        continue
    g = other.get((r["name"], r["bytes"], r["processes"], "gloo"))
    if g is not None:
        print(json.dumps({"name": r["name"], "bytes": r["bytes"], "processes": r["processes"], "mcx_ms": r["mcx_ms"],
                          "peer": "mcx_on_gloo", "peer_ms": g, "ratio": round(g / r["mcx_ms"], 3)}))
    plain = other.get((r["name"], r["bytes"], r["processes"], "tcp_no_shm"))
    shm = other.get((r["name"], r["bytes"], r["processes"], "tcp"))
    if plain is not None and shm is not None:
        print(json.dumps({"name": r["name"] + "_alone", "bytes": r["bytes"], "processes": r["processes"],
                          "mcx_ms": shm, "peer": "mcx_loopback_tcp", "peer_ms": plain, "ratio": round(plain / shm, 3)}))
    t = other.get((r["name"], r["bytes"], r["processes"], "tls_no_shm"))
    if t is not None and plain is not None:
        print(json.dumps({"name": r["name"] + "_tls", "bytes": r["bytes"], "processes": r["processes"], "mcx_ms": t,
                          "peer": "mcx_tcp_plaintext", "peer_ms": plain, "ratio": round(plain / t, 3)}))
mlp = {(r["processes"], r["devices_per_process"]): r for r in map(json.loads, (l for l in open(sys.argv[3]) if l.startswith("{")))}
for r in mlp.values():
    print(json.dumps(r))
if (1, 2) in mlp and (2, 1) in mlp:
    a, b = mlp[(2, 1)], mlp[(1, 2)]
    print(json.dumps({"name": "mlp_step", "bytes": 0, "processes": 2, "mcx_ms": a["step_ms"], "peer": "mcx_1_process_x_2_devices",
                      "peer_ms": b["step_ms"], "ratio": round(b["step_ms"] / a["step_ms"], 3)}))
PY
