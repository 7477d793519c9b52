#!/usr/bin/env bash
# kill_anywhere.sh MCX_RUN TRAIN DATA_DIR [RUNS]: the main job's MLP on 3 processes x 1 device under
# `mcx-run --recoverable`, 120 steps (about 4 s on 2 idle cores) with a checkpoint every 10, and one process
# (chosen at random) killed with kill -9 from outside at a random moment 0-4 s after the start (before it
# registers, which mcx-run answers by starting it once more; during the first steps, a step, a save, the
# evaluation; or after the job ended), RUNS times (default 10). Every run must end with exit 0 within its
# 100 s and commit the last checkpoint (step 120); every save of a step from the one the survivors resumed at
# on the live set without the victim must commit (the save in flight at the kill, and one issued before the
# survivors' next agreement, fail at once); at least two processes print a summary over all 10,000 held-out
# images. Prints one line per run (with how many summaries count the failure) and a count.
# Exits 77 (skipped) when DATA_DIR has no Fashion-MNIST (scripts/fetch-fashion-mnist.sh).
set -uo pipefail
mcx_run=$1 train=$2 data=$3 runs=${4:-10}
[ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "kill_anywhere.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for run in $(seq 1 "$runs"); do
  victim=$((RANDOM % 3))
  delay=$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", r / 32767 * 4 }')
  rm -rf "$tmp/ckpt"
  start=$(date +%s.%N)
  "$mcx_run" -n 3 --cpu-devices 1 --recoverable --timeout 100 -- "$train" --model mlp --data "$data" --batch 96 \
    --steps 120 --save-every 10 --threads 1 --min-accuracy 0.5 --checkpoint-dir "$tmp/ckpt" > "$tmp/job.log" 2>&1 &
  launcher=$!
  sleep "$delay"
  pid=
  for child in $(pgrep -P "$launcher"); do
    tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "MCX_PROCESS_ID=$victim" && pid=$child
  done
  [ -n "$pid" ] && kill -9 "$pid"
  wait "$launcher"
  rc=$?
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  unsaved=$(sed -n "s/.*checkpoint of step \([0-9]*\) not saved.*/\1/p" "$tmp/job.log" | sort -u | wc -l)  # saves, not lines
  # Saves of the steps from the one a survivor resumed at on the live set without the victim must all commit
  # (the save in flight at the kill, or one issued before the survivors' next agreement, fails at once).
  late_unsaved=0
  for p in 0 1 2; do
    resumed=$(sed -n "s/^\[p$p\] .*the loader resumes at step \([0-9]*\) .*/\1/p" "$tmp/job.log" | head -1)
    [ -n "$resumed" ] || continue
    for step in $(sed -n "s/^\[p$p\] .*checkpoint of step \([0-9]*\) not saved.*/\1/p" "$tmp/job.log"); do
      [ "$step" -ge "$resumed" ] && late_unsaved=$((late_unsaved + 1))
    done
  done
  survivors=$(grep -c "summary: .* on 10000 held-out images; 120 steps" "$tmp/job.log")
  counted=$(grep -c "summary: .*1 process failure survived (lost {$victim})" "$tmp/job.log")
  verdict=OK
  if [ "$rc" -ne 0 ] || [ ! -f "$tmp/ckpt/120/COMMIT" ] || [ "$late_unsaved" -gt 0 ] || [ "$survivors" -lt 2 ]; then
    verdict=FAILED
    failed=$((failed + 1))
    cp "$tmp/job.log" "${TMPDIR:-/tmp}/kill_anywhere_run$run.log"
  fi
  echo "kill_anywhere.sh: run $run: process $victim killed ${pid:+(pid $pid) }at ${delay} s; exit $rc in $took s;" \
       "step 120 $([ -f "$tmp/ckpt/120/COMMIT" ] && echo committed || echo MISSING); $unsaved saves not saved" \
       "($late_unsaved after the new live set);" \
       "$counted of $survivors summaries count the failure: $verdict"
done
echo "kill_anywhere.sh: $((runs - failed)) of $runs runs OK"
[ "$failed" -eq 0 ]
