#!/usr/bin/env bash
# The compilation cache benchmark: the first call of a jitted program in a fresh process, on a cold cache
# (empty MCX_COMPILATION_CACHE_DIR: every kernel compiled and written), on a warm one (the same directory
# again: every kernel linked from its entry) and with code generation off (MCX_CODEGEN=0: the interpreter,
# nothing to compile). Programs: jit(value_and_grad) of a 20- and a 100-layer 256-wide ReLU MLP, and the
# 20-layer step partitioned over 4 CPU devices. Each measurement is the median of --reps fresh processes.
# Then 4 processes of one job (mcx-run -n 4) start together on one cold cache directory, with and without
# MCX_SHARE_COMPILED=1: line "cold_start_4_processes" counts the kernels compiled in the whole job.
# Installs dependencies, builds bench_cache (Release) in ${MCX_BENCH_BUILD_DIR:-build-bench} and prints JSON
# lines {name, mcx_ms (warm), peer, peer_ms, ratio = peer_ms / mcx_ms, ...}; see docs/compilation_cache.md.
#   bash bench/cache/run.sh [--reps 3]
set -euo pipefail
reps=3
if [[ "${1:-}" == "--reps" ]]; then reps=$2; fi
cd "$(dirname "$0")/../.."
build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
bash scripts/install-deps.sh >&2
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$build_dir" --target bench_cache mcx-run mcx-coordinator -j "${MCX_JOBS:-2}" >&2
bin="$build_dir/bench/cache/bench_cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each (program, part) on its own cache directory, so the "cold" process of each part starts empty.
for program in mlp20 mlp100 spmd4; do
  parts="call compile"
  for part in $parts; do
    for ((r = 0; r < reps; ++r)); do
      dir="$work/$program-$part-$r"
      for kind in cold warm; do
        MCX_COMPILATION_CACHE_DIR="$dir" "$bin" --program "$program" --part "$part" >> "$work/$program.$part.$kind" 2>/dev/null
      done
      MCX_CODEGEN=0 "$bin" --program "$program" --part "$part" >> "$work/$program.$part.interpreter" 2>/dev/null
    done
  done
done
for ((r = 0; r < reps; ++r)); do
  for share in 1 0; do
    MCX_SHARE_COMPILED=$share MCX_COMPILATION_CACHE_DIR="$work/job-$share-$r" \
      "$build_dir/bin/mcx-run" -n 4 -- "$bin" --program mlp20 --distributed 2>/dev/null |
      sed -n 's/^\[p[0-9]*\] //p' | grep '^{' >> "$work/job.$share" || true
  done
done
/usr/bin/python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def runs(program, part, kind):
    with open(f"{work}/{program}.{part}.{kind}") as f:
        return [json.loads(line) for line in f if line.strip()]
def med(rs, field):
    vals = [r[field] for r in rs if r.get(field) is not None]
    return statistics.median(vals) if vals else None
def line(name, what, warm, peers, extra):
    w = med(warm, what)
    for peer, rs in peers:
        p = med(rs, what)
        print(json.dumps({"name": name, "mcx_ms": w, "peer": peer, "peer_ms": p,
                          "ratio": round(p / w, 3) if w and p is not None else None, "what": what,
                          **extra, "reps": len(warm)}))
for program in ["mlp20", "mlp100", "spmd4"]:
    # The compile part: the backend's compile of the program alone (for spmd4 with partitioning), timed
    # without running it; warm, the executable (or SPMD entry) is read back instead.
    cold, warm, interp = (runs(program, "compile", k) for k in ("cold", "warm", "interpreter"))
    line(f"compile_{program}", "backend_compile_ms", warm, [("cold_cache", cold), ("interpreter", interp)],
         {"kernels_compiled_cold": med(cold, "kernels_compiled"), "kernels_loaded_warm": med(warm, "kernels_loaded"),
          "executables_loaded_warm": med(warm, "executables_loaded") + med(warm, "spmd_loaded"),
          "partitioned_warm": med(warm, "partitioned")})
    cold, warm, interp = (runs(program, "call", k) for k in ("cold", "warm", "interpreter"))
    line(f"first_call_{program}", "first_call_ms", warm, [("cold_cache", cold), ("interpreter", interp)],
         {"trace_ms": med(warm, "trace_ms"), "run_ms": med(warm, "run_ms")})
def job(share):
    rs = runs_file(f"{work}/job.{share}")
    return [rs[i:i + 4] for i in range(0, len(rs), 4)]
def runs_file(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
shared, alone = job(1), job(0)
if shared and alone:
    c_shared = statistics.median(sum(r["kernels_compiled"] for r in j) for j in shared)
    c_alone = statistics.median(sum(r["kernels_compiled"] for r in j) for j in alone)
    print(json.dumps({"name": "cold_start_4_processes", "mcx_kernels_compiled": c_shared,
                      "peer": "without_MCX_SHARE_COMPILED", "peer_kernels_compiled": c_alone,
                      "ratio": round(c_alone / c_shared, 3) if c_shared else None,
                      "kernels_from_peers": statistics.median(sum(r.get("kernels_from_peers", 0) for r in j) for j in shared),
                      "reps": len(shared)}))
PY
