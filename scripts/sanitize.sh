#!/usr/bin/env bash
# Builds the unit tests under sanitizers and runs them:
#   bash scripts/sanitize.sh            # address,undefined then thread
#   bash scripts/sanitize.sh thread     # one of them
# Build dirs: build-asan, build-tsan (-O1 -g1: fast enough to run, line tables for reports).
#  - address,undefined: every unit test (halt_on_error, leaks detected); UBSan without its null and alignment
#    checks unless MCX_UBSAN_FULL=1 (they double the compile time; ASan reports null dereferences).
#  - thread: the concurrent layers only (core, collectives, platform (its registry), backend (the CUDA backend's
#    allocator where it is built), runtime, trace, distributed, multihost, checkpoint (its
#    save_async writer and parallel hashing/file I/O threads), the exit tests). The ir,
#    spmd and export layers are single-threaded code (passes, partitioner, codecs): ThreadSanitizer has
#    nothing to check there, and leaving them out keeps the CI run inside its time budget.
# .ci/run calls this after the README's test command; docs/testing.md lists what each part takes.
set -euo pipefail
cd "$(dirname "$0")/.."
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(address,undefined thread)
jobs=${MCX_JOBS:-2}
for mode in "${modes[@]}"; do
  targets=()
  exclude='_NOT_BUILT$'
  exclude_checks=
  case "$mode" in
    address,undefined)
      dir=build-asan
      # UBSan's null and alignment checks double the build's compile time; AddressSanitizer reports null
      # dereferences itself (docs/testing.md). MCX_UBSAN_FULL=1 keeps every check.
      [ "${MCX_UBSAN_FULL:-0}" = 1 ] && exclude_checks="" || exclude_checks=null,alignment
      ;;
    thread)
      dir=build-tsan
      targets=(mcx_core_tests mcx_collectives_tests mcx_platform_tests mcx_backend_tests mcx_runtime_tests mcx_trace_tests mcx_distributed_tests
               mcx_multihost_tests mcx_checkpoint_tests mcx_data_tests exit_with_queued_work)
      # install_find_package (a packaging check), mcx_export_cli (a command-line check of mcx-export) and
      # idx_numpy_check (the IDX reader against numpy; its idx_dump is not among the targets) test no
      # concurrency; the gRPC transport tests are out because TSan cannot see gRPC's own synchronisation
      # (tests/tsan.supp explains; the service and agent run under TSan through the in-process transport and
      # the fast path). The second run of the tests on the test-only platform (test_platform/...) goes through the
      # same runtime threads and locks as the first, so it runs under AddressSanitizer only.
      exclude='_NOT_BUILT$|^install_find_package$|^mcx_export_cli$|^idx_numpy_check$|Grpc[A-Za-z]*\.|^MtlsTest\.|^DistributedTest\.|^test_platform/'
      echo "sanitize.sh: thread: building ${targets[*]} (ir, spmd and export tests are single-threaded;" \
           "install_find_package, mcx_export_cli and idx_numpy_check check packaging, a command line and a file" \
           "reader against numpy; the Grpc*, MtlsTest and DistributedTest tests go through gRPC, whose" \
           "synchronisation TSan cannot see)"
      ;;
    *) echo "sanitize.sh: unknown mode '$mode' (expected address,undefined or thread)" >&2; exit 2 ;;
  esac
  start=$(date +%s)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DMCX_SANITIZE="$mode" -DMCX_SANITIZE_EXCLUDE="${exclude_checks:-}" -DMCX_BUILD_EXAMPLES=OFF \
    -DMCX_BUILD_BENCH=OFF > /dev/null
  # The CUDA backend's allocator tests exist where the backend is built.
  if [ "$mode" = thread ] && grep -q "mcx_cuda_allocator_tests" "$dir/build.ninja"; then
    targets+=(mcx_cuda_allocator_tests)
  fi
  if [ ${#targets[@]} -gt 0 ]; then
    cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  else
    cmake --build "$dir" -j "$jobs"
  fi
  built=$(date +%s)
  # halt_on_error: a sanitizer report fails the test instead of scrolling past.
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0 \
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "$dir" -L unit -E "$exclude" --output-on-failure -j "$jobs" --timeout 900
  echo "sanitize.sh: $mode: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
done
