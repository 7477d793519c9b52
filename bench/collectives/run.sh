#!/usr/bin/env bash
# Cross-process collectives on loopback, mcx against its peers in one run: for 2 and 4 processes, all-reduce
# (f32 sum) and all-gather from 4 KiB to 64 MiB through mcx's communicator, Gloo called directly with the same
# algorithm (ring, chunked) and OpenMPI. Prints JSON lines {name, bytes, processes, mcx_ms, peer, peer_ms, ratio}
# with ratio = peer_ms / mcx_ms (above 1: mcx is faster). Builds in ${MCX_BENCH_BUILD_DIR:-build-bench}.
#   bash bench/collectives/run.sh [--procs 2,4]
set -euo pipefail
cd "$(dirname "$0")/../.."
procs=2,4
[ "${1:-}" = "--procs" ] && procs=$2
bash scripts/install-deps.sh >&2
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_collectives bench_collectives_mpi mcx-run mcx-coordinator -j "${MCX_JOBS:-2}" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in ${procs//,/ }; do
  echo "bench/collectives: $n processes" >&2
  # One CPU thread per process: the processes share the 2 cores.
  MCX_CPU_THREADS=1 "$build_dir/bin/mcx-run" -n "$n" --cpu-devices 1 --no-prefix --timeout 900 -- \
    "$build_dir/bench/collectives/bench_collectives" >> "$tmp/mcx.jsonl"
  mpirun --allow-run-as-root --oversubscribe -n "$n" "$build_dir/bench/collectives/bench_collectives_mpi" \
    >> "$tmp/mpi.jsonl"
done
/usr/bin/python3 - "$tmp/mcx.jsonl" "$tmp/mpi.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
mpi = {(r["name"], r["bytes"], r["processes"]): r["mpi_ms"] for r in map(json.loads, (l for l in open(sys.argv[2]) if l.startswith("{")))}
for r in rows:
    print(json.dumps(r))
    m = mpi.get((r["name"], r["bytes"], r["processes"]))
    if m is not None:
        print(json.dumps({"name": r["name"], "bytes": r["bytes"], "processes": r["processes"], "mcx_ms": r["mcx_ms"],
                          "peer": "openmpi", "peer_ms": m, "ratio": round(m / r["mcx_ms"], 3)}))
PY
