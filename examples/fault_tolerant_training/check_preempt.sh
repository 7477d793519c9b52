#!/usr/bin/env bash
# check_preempt.sh MCX_RUN PROGRAM ARGS...: three runs of PROGRAM on 3 processes under `MCX_RUN --recoverable`:
#   1. with --preempt-at-step 40: every process must stop at the same step (after 40), one saves the state;
#   2. with --resume from that state: it must start at that step and finish;
#   3. uninterrupted: its final parameters must equal run 2's bit for bit.
# Exits 77 (skipped) when the program skips itself (no data).
set -uo pipefail
mcx_run=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_preempt.sh: FAILED: $*" >&2; exit 1; }
run() {  # run NAME ARGS...: output in $work/NAME
  local name=$1
  shift
  "$mcx_run" -n 3 --cpu-devices 1 --recoverable --timeout 100 -- "$@" > "$work/$name" 2>&1
  local rc=$?
  sed "s/^/[$name] /" "$work/$name"
  [ $rc -eq 77 ] && grep -q "not found (run scripts/fetch-digits.sh); skipping" "$work/$name" && exit 77
  [ $rc -eq 0 ] || fail "run '$name' exited $rc"
}
run preempted "$@" --preempt-at-step 40 --state-dir "$work/state"
steps=$(grep -o "preempted: stopping at step [0-9]*" "$work/preempted" | awk '{print $NF}' | sort -u)
[ "$(grep -c "preempted: stopping at step" "$work/preempted")" -eq 3 ] || fail "not every process stopped"
[ "$(echo "$steps" | wc -l)" -eq 1 ] || fail "the processes stopped at different steps: $steps"
[ "$steps" -gt 40 ] || fail "stopped at step $steps, before the notice after step 40"
[ "$(grep -c "state saved to" "$work/preempted")" -eq 1 ] || fail "the state was not saved exactly once"
[ -f "$work/state/$steps/COMMIT" ] && [ -f "$work/state/$steps/manifest.json" ] || fail "no committed checkpoint of step $steps"
run resumed "$@" --resume --state-dir "$work/state"
[ "$(grep -c "resuming from $work/state at step $steps" "$work/resumed")" -eq 3 ] || fail "not every process resumed at step $steps"
run whole "$@" --state-dir "$work/unused"
digest() { grep "parameters digest" "$work/$1" | grep -v " at step " | sed 's/.*parameters digest //' | sort -u; }
[ "$(digest resumed | wc -l)" -eq 1 ] || fail "the resumed replicas differ: $(digest resumed)"
[ "$(digest resumed)" = "$(digest whole)" ] || fail "resumed $(digest resumed) != uninterrupted $(digest whole)"
echo "check_preempt.sh: OK: stopped at step $steps, resumed, and ended equal to the uninterrupted run ($(digest whole))"
