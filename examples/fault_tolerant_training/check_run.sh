#!/usr/bin/env bash
# check_survivors.sh VICTIM MCX_RUN PROGRAM ARGS...: runs PROGRAM on 3 processes under `MCX_RUN --recoverable`
# (process VICTIM kills itself per ARGS) and checks what the survivors printed: the job succeeded, each survivor
# retried a step after the failure and carried on with the two others, and their final parameter digests are
# equal (bitwise identical replicas). Exits 77 (skipped) when the program skips itself (no data).
set -uo pipefail
victim=$1 mcx_run=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mcx_run" -n 3 --cpu-devices 1 --recoverable --timeout 100 -- "$@" > "$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 77 ] && grep -q "not found (run scripts/fetch-digits.sh); skipping" "$out" && exit 77
fail() { echo "check_survivors.sh: FAILED: $*" >&2; exit 1; }
[ $rc -eq 0 ] || fail "mcx-run exited $rc"
survivors=()
for p in 0 1 2; do [ "$p" != "$victim" ] && survivors+=("$p"); done
expected="{${survivors[0]},${survivors[1]}}"
digests=()
for p in "${survivors[@]}"; do
  grep -q "^\[p$p\] .*step 40 failed: process $victim is gone" "$out" || fail "process $p did not see process $victim fail at step 40"
  grep -q "^\[p$p\] .*carrying on with processes $expected" "$out" || fail "process $p did not carry on with $expected"
  grep -q "^\[p$p\] .*OK: final test accuracy" "$out" || fail "process $p did not reach the accuracy"
  digests+=("$(grep "^\[p$p\] .*parameters digest" "$out" | sed 's/.*parameters digest //')")
done
[ -n "${digests[0]}" ] && [ "${digests[0]}" = "${digests[1]}" ] ||
  fail "the survivors' parameters differ: ${digests[0]} vs ${digests[1]}"
echo "check_survivors.sh: OK: processes ${survivors[*]} carried on without process $victim; parameters ${digests[0]}"
