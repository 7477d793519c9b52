#!/usr/bin/env bash
# A /dev/shm too small for the data plane's shared memory (a container's default is 64 MB, which a job of many
# processes per host can outgrow; here 64 KiB): the connections between the processes of this host stay on TCP,
# each saying why, and every collective across 3 processes still matches its reference (collectives_worker all).
# Needs root for a private mount namespace; exits 77 (CTest "skipped") saying why otherwise.
#   small_dev_shm_test.sh MCX_RUN COLLECTIVES_WORKER
set -uo pipefail
mcx_run=$1 worker=$2
skip() { echo "small_dev_shm_test: skipped: $*"; exit 77; }
fail() { echo "small_dev_shm_test: FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root for a private mount namespace"
if [ -z "${MCX_SMALL_SHM_INNER:-}" ]; then
  unshare --mount true 2> /dev/null || skip "cannot create a mount namespace here"
  MCX_SMALL_SHM_INNER=1 exec unshare --mount bash "$0" "$@"
fi
mount -t tmpfs -o size=64k mcx-small-shm /dev/shm || skip "cannot mount a small tmpfs on /dev/shm"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
MCX_DEVICE_TIMEOUT_S=30 timeout 120 "$mcx_run" -n 3 --cpu-devices 1 --timeout 100 -- "$worker" all > "$log" 2>&1
status=$?
done_lines=$(grep -c "DONE 0 failed" "$log")
if [ $status -ne 0 ] || [ "$done_lines" -ne 3 ]; then
  cat "$log"
  fail "the job exited with $status and $done_lines of 3 processes passed every check"
fi
# A process warns once, the first time a segment it creates does not fit (later ones are said at debug level);
# the connecting end creates it, so processes 1 and 2 (rank 0 only accepts) warn, once each.
warnings=$(grep -c "cannot reserve .* bytes of shared memory .*; this connection stays on TCP" "$log")
if [ "$warnings" -ne 2 ]; then
  cat "$log"
  fail "expected one warning from each of processes 1 and 2 that a connection stays on TCP, found $warnings"
fi
grep -m1 "stays on TCP" "$log"
echo "small_dev_shm_test: every collective passed on TCP with /dev/shm of 64 KiB"
