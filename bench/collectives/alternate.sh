#!/usr/bin/env bash
# mcx's collectives against OpenMPI's, job after job: R runs, each one mcx job (bench_collectives --mcx-only,
# the default data plane) then one OpenMPI job (bench_collectives_mpi), placed alike (each process bound to a core
# of its own when there are enough, as mpirun does by default; unbound otherwise). On a shared VM one job's timings
# move with the host (measured here: a 4 KiB all-reduce between two processes at 1.2, 1.3 or 1.8 us for seconds at
# a time, and now and then 4-5 us for a whole job, OpenMPI's too), so a single pair of jobs compares moments, not
# implementations; the medians over alternating runs compare the implementations.
# Prints one JSON line per case: {name, bytes, processes, runs, mcx_ms (median), mcx_min_ms, mcx_max_ms, peer:
# "openmpi", peer_ms (median), peer_min_ms, peer_max_ms, ratio = peer_ms / mcx_ms (above 1: mcx is faster)}.
#   bash bench/collectives/alternate.sh [--procs 2] [--runs 6] [--bytes 4096,65536,...] --built DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
procs=2
runs=6
bytes=4096,65536,1048576,16777216,67108864
built=""
while [ $# -gt 0 ]; do
  case "$1" in
    --procs) procs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --built) built=$2; shift 2 ;;
    *) echo "alternate.sh: unknown argument '$1' (expected --procs N, --runs R, --bytes LIST or --built DIR)" >&2
       exit 2 ;;
  esac
done
[ -n "$built" ] || { echo "alternate.sh: --built DIR is required (a build with the benchmarks)" >&2; exit 2; }
for binary in bin/mcx-run bench/collectives/bench_collectives bench/collectives/bench_collectives_mpi; do
  [ -x "$built/$binary" ] || { echo "alternate.sh: $built/$binary is not built" >&2; exit 2; }
done
bind=()
[ "$procs" -le "$(nproc)" ] && bind=(--cpu-bind cores)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in $(seq "$runs"); do
  echo "alternate.sh: run $run of $runs ($procs processes)" >&2
  MCX_CPU_THREADS=1 "$built/bin/mcx-run" -n "$procs" "${bind[@]}" --cpu-devices 1 --no-prefix --timeout 600 -- \
    "$built/bench/collectives/bench_collectives" --bytes "$bytes" --mcx-only 2>/dev/null | grep '^{' >> "$tmp/mcx.jsonl"
  mpirun --allow-run-as-root --oversubscribe -n "$procs" "$built/bench/collectives/bench_collectives_mpi" \
    2>/dev/null | grep '^{' >> "$tmp/mpi.jsonl"
done
/usr/bin/python3 - "$tmp/mcx.jsonl" "$tmp/mpi.jsonl" "$bytes" <<'PY'
import json, statistics, sys
wanted = {int(b) for b in sys.argv[3].split(",")}
def load(path, key):
    times = {}
    for r in map(json.loads, open(path)):
        if r["bytes"] in wanted:
            times.setdefault((r["name"], r["bytes"], r["processes"]), []).append(r[key])
    return times
mcx, mpi = load(sys.argv[1], "mcx_ms"), load(sys.argv[2], "mpi_ms")
for case in sorted(mcx, key=lambda c: (c[0], c[1])):
    if case not in mpi:
        continue
    m, o = mcx[case], mpi[case]
    print(json.dumps({"name": case[0], "bytes": case[1], "processes": case[2], "runs": len(m),
                      "mcx_ms": statistics.median(m), "mcx_min_ms": min(m), "mcx_max_ms": max(m), "peer": "openmpi",
                      "peer_ms": statistics.median(o), "peer_min_ms": min(o), "peer_max_ms": max(o),
                      "ratio": round(statistics.median(o) / statistics.median(m), 3)}))
PY
