#!/usr/bin/env bash
# Clang's thread-safety analysis over every source file of the library (mcx/): a compile-only pass
# (clang++-19 -fsyntax-only: no objects, no link) that fails on any access to a field marked ABSL_GUARDED_BY(mu)
# without holding mu, on a call of a function marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) without mu, and on a lock
# released twice or held at a function's end. Only these diagnostics are reported: every other warning is
# left to the GCC build. CI runs it (.ci/run); docs/testing.md ("Thread-safety analysis") says what it covers.
#   bash scripts/thread_safety.sh          # the whole library
#   bash scripts/thread_safety.sh FILE...  # some sources (paths under mcx/)
# Only the sources that can hold such an access are compiled: those whose own text or whose mcx headers (followed
# through their #include "mcx/..." lines) use an annotation or mcx::Mutex. Any other file names no annotated
# lock, field or function, so the analysis has nothing to check there (about a quarter of the library, so the
# pass takes about a minute and a half instead of five).
# Build dir: build-tsa (configured with clang, without precompiled headers; only the generated headers are built).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-tsa
jobs=${MCX_JOBS:-2}
start=$(date +%s)
cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON -DMCX_BUILD_TESTS=OFF \
  -DMCX_BUILD_EXAMPLES=OFF -DMCX_BUILD_BENCH=OFF -DMCX_CCACHE=OFF > /dev/null
# The headers generated from the protobuf and FlatBuffers schemas, which the sources include.
cmake --build "$dir" --target mcx_export_schema mcx/distributed/rpc/coordination.pb.h > /dev/null
python3 - "$dir" "$jobs" "$@" <<'PY'
import json, os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
build, jobs, only = sys.argv[1], int(sys.argv[2]), [os.path.abspath(f) for f in sys.argv[3:]]
root = os.path.abspath("mcx") + os.sep
include = re.compile(r'#include "(mcx/[^"]+)"')
# The thread-safety attributes (absl/base/thread_annotations.h), absl::Mutex and mcx::Mutex (mcx/core/mutex.h).
annotated = re.compile(r"ABSL_[A-Z_]*(GUARDED_BY|LOCKS?_[A-Z_]*|LOCKABLE|ACQUIRE[A-Z_]*|RELEASE[A-Z_]*|"
                       r"LOCK_FUNCTION|ASSERT_[A-Z_]*LOCK[A-Z_]*|NO_THREAD_SAFETY_ANALYSIS|RETURN_CAPABILITY)|"
                       r"absl/synchronization/mutex\.h|mcx/core/mutex\.h")
texts = {}
def text(path):
    if path not in texts:
        texts[path] = open(path).read() if os.path.isfile(path) else ""
    return texts[path]
def uses_annotations(path, seen):
    if path in seen:
        return False
    seen.add(path)
    t = text(path)
    return bool(annotated.search(t)) or any(uses_annotations(h, seen) for h in include.findall(t))
checks = ["-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
entries = []
skipped = 0
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    f = os.path.abspath(os.path.join(e["directory"], e["file"]))
    if not f.startswith(root) or not f.endswith(".cc") or (only and f not in only):
        continue
    if not uses_annotations(os.path.relpath(f), set()):
        skipped += 1
        continue
    args = shlex.split(e["command"])
    out = []
    skip = False
    for a in args:  # drop the object output: -fsyntax-only writes nothing
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        out.append("-fsyntax-only" if a == "-c" else a)
    entries.append((f, e["directory"], out + checks))  # last: they override the build's warning flags
def run(entry):
    f, cwd, cmd = entry
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return f, p.returncode, p.stderr
failed = 0
with ThreadPoolExecutor(jobs) as pool:
    for f, rc, err in pool.map(run, entries):
        if rc != 0:
            failed += 1
            sys.stderr.write(err)
print(f"thread_safety.sh: {len(entries)} files checked, {failed} with errors ({skipped} without annotations skipped)")
sys.exit(1 if failed else 0)
PY
echo "thread_safety.sh: $(( $(date +%s) - start )) s"
