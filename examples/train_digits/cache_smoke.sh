#!/usr/bin/env bash
# The digits example on a cold and then a warm persistent compilation cache (docs/compilation_cache.md): the
# warm run compiles no kernel, reads its executables back, and prints the same losses and accuracies to the
# last digit as the cold run.
#   cache_smoke.sh TRAIN_DIGITS DATA
set -euo pipefail
train=$1 data=$2
[ -f "$data" ] || { echo "cache_smoke: $data not found (run scripts/fetch-digits.sh); skipping"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for run in cold warm; do
  MCX_COMPILATION_CACHE_DIR="$dir/cache" MCX_LOG_LEVEL=info \
    "$train" --data "$data" --epochs 4 --threads 2 --min-accuracy 0 > "$dir/$run.log" 2>&1 ||
    { cat "$dir/$run.log"; exit 1; }
done
cat "$dir/warm.log"
# The epoch lines without their times.
results() { grep '^epoch' "$1" | sed 's/  [0-9.]* s$//'; }
if [ "$(results "$dir/cold.log")" != "$(results "$dir/warm.log")" ]; then
  echo "cache_smoke: the warm run's results differ from the cold run's"; diff <(results "$dir/cold.log") <(results "$dir/warm.log")
  exit 1
fi
stat_of() { sed -n "s/.*$2 \([0-9]*\).*/\1/p" "$1" | tail -1; }
compiled=$(stat_of "$dir/warm.log" 'kernels compiled')
loaded=$(stat_of "$dir/warm.log" 'executables loaded')
echo "cache_smoke: warm run: $compiled kernels compiled, $loaded executables read back; results equal the cold run's"
[ "$compiled" = 0 ] || { echo "cache_smoke: the warm run compiled kernels"; exit 1; }
[ -n "$loaded" ] && [ "$loaded" -gt 0 ] || { echo "cache_smoke: the warm run read no executable back"; exit 1; }
