#!/usr/bin/env bash
# check_run.sh MODE VICTIM MCX_RUN PROGRAM ARGS...: runs PROGRAM on 3 processes under MCX_RUN, process VICTIM
# killing itself per ARGS, and checks what the processes printed.
#   MODE survivors: `--recoverable` (no restart). The job succeeds; each survivor saw the failed step, the two
#                   survivors agreed on the live set of the two of them, reached the accuracy, and their final
#                   parameter digests are equal (bitwise identical replicas).
#   MODE rejoin:    `--max-restarts 1`. The job succeeds; the survivors saw the failed step; the restarted process
#                   joined, was sent the state by a process other than itself, and all three end on the full
#                   live set with equal digests.
# Exits 77 (skipped) when the program skips itself (no data).
set -uo pipefail
mode=$1 victim=$2 mcx_run=$3
shift 3
case "$mode" in
  survivors) launch=(--recoverable) ;;
  rejoin) launch=(--max-restarts 1) ;;
  *) echo "check_run.sh: unknown mode '$mode' (survivors|rejoin)" >&2; exit 2 ;;
esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mcx_run" -n 3 --cpu-devices 1 "${launch[@]}" --timeout 100 -- "$@" > "$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 77 ] && grep -q "not found (run scripts/fetch-digits.sh); skipping" "$out" && exit 77
fail() { echo "check_run.sh: FAILED: $*" >&2; exit 1; }
[ $rc -eq 0 ] || fail "mcx-run exited $rc"
survivors=()
for p in 0 1 2; do [ "$p" != "$victim" ] && survivors+=("$p"); done
for p in "${survivors[@]}"; do
  grep -q "^\[p$p\] .*step [0-9]* failed: process $victim is gone" "$out" || fail "process $p did not see process $victim fail"
done
if [ "$mode" = survivors ]; then
  finishers=("${survivors[@]}")
  live="{${survivors[0]},${survivors[1]}}"
  for p in "${finishers[@]}"; do
    grep -q "^\[p$p\] .*live processes $live .* agree on step" "$out" || fail "process $p did not carry on with $live"
  done
else
  finishers=(0 1 2)
  live="{0,1,2}"
  grep -q "^\[p$victim\] .*(restarted)" "$out" || fail "process $victim was not restarted"
  sent=$(grep "^\[p$victim\] .*live processes $live .*state sent by process" "$out" | head -1 | sed 's/.*state sent by process //')
  [ -n "$sent" ] || fail "the restarted process $victim was not sent the state"
  [ "$sent" != "$victim" ] || fail "the restarted process sent the state to itself"
  echo "check_run.sh: the restarted process $victim got the state from process $sent"
fi
digests=()
for p in "${finishers[@]}"; do
  grep -q "^\[p$p\] .*OK: final test accuracy" "$out" || fail "process $p did not reach the accuracy"
  grep -q "^\[p$p\] .*final live processes $live" "$out" || fail "process $p did not end on the live set $live"
  digests+=("$(grep "^\[p$p\] .*parameters digest" "$out" | sed 's/.*parameters digest //')")
done
for d in "${digests[@]}"; do
  [ -n "$d" ] && [ "$d" = "${digests[0]}" ] || fail "the replicas' parameters differ: ${digests[*]}"
done
echo "check_run.sh: OK ($mode): processes ${finishers[*]} ended with equal parameters ${digests[0]}"
