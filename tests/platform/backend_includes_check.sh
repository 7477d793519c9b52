#!/usr/bin/env bash
# The runtime and everything above it reach a backend only through the platform interface (mcx/platform/):
# no file outside mcx/backend/ includes a backend header, except the two files where the CPU platform meets
# the runtime: its registration (runtime/builtin_platforms.cc) and its public thread settings
# (runtime/cpu_backend.cc). Usage: backend_includes_check.sh SOURCE_DIR
set -euo pipefail
cd "$1"
allowed='^mcx/runtime/(builtin_platforms|cpu_backend)\.cc$'
found=$(grep -rlE '#include +"mcx/backend/' mcx tools examples --include='*.h' --include='*.cc' \
          | grep -v '^mcx/backend/' | grep -Ev "$allowed" || true)
if [[ -n "$found" ]]; then
  echo "expected no backend header outside mcx/backend/ (besides the CPU platform's registration); found in:"
  for f in $found; do grep -nE '#include +"mcx/backend/' "$f" | sed "s|^|  $f:|"; done
  exit 1
fi
# The check itself must see the includes it allows, or it checks nothing.
for f in mcx/runtime/builtin_platforms.cc mcx/runtime/cpu_backend.cc; do
  grep -qE '#include +"mcx/backend/' "$f" || { echo "expected $f to include the CPU backend; the check is stale"; exit 1; }
done
echo "no backend header above the backend outside the CPU platform's registration"
