// single_copy_probe: would single-copy transfers between processes of one host (Linux cross-memory attach,
// process_vm_readv, as OpenMPI's shared-memory transport uses for messages above 32 KiB) beat copying through a
// shared ring (a memcpy in the sender and one in the receiver, which run at the same time on two cores)? It
// times, in chunks of 64 KiB to 16 MiB, process_vm_readv from a forked sibling's memory against memcpy within
// one process, over 4 MiB (cache-resident) and 64 MiB (memory-bound) totals, best of 5, and prints one JSON
// line per case: {"chunk_bytes", "total_bytes", "cma_gbps", "memcpy_gbps"}. A machine whose kernel refuses
// cross-memory attach (Yama's ptrace_scope, a seccomp filter) prints the error and exits 1.
//   build/bench/collectives/single_copy_probe
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main() {
  constexpr size_t kMaxTotal = size_t{64} << 20;
  std::vector<char> source(kMaxTotal, 7), target(kMaxTotal, 0);
  const pid_t sibling = fork();
  if (sibling < 0) {
    std::perror("single_copy_probe: fork");
    return 1;
  }
  if (sibling == 0) {  // holds its copy of `source` (written, so its own pages) until killed
    std::memset(source.data(), 8, source.size());
    pause();
    _exit(0);
  }
  usleep(300'000);  // lets the sibling write its pages
  int rc = 0;
  for (size_t chunk = size_t{64} << 10; chunk <= (size_t{16} << 20) && rc == 0; chunk *= 4) {
    for (size_t total : {size_t{4} << 20, kMaxTotal}) {
      if (total < chunk) continue;
      double cma = 1e9, copy = 1e9;
      for (int rep = 0; rep < 5 && rc == 0; ++rep) {
        auto start = std::chrono::steady_clock::now();
        for (size_t off = 0; off < total; off += chunk) {
          iovec local{target.data() + off, chunk}, remote{source.data() + off, chunk};
          if (process_vm_readv(sibling, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(chunk)) {
            std::fprintf(stderr, "single_copy_probe: process_vm_readv: %s\n", std::strerror(errno));
            rc = 1;
            break;
          }
        }
        cma = std::min(cma, seconds_since(start));
        start = std::chrono::steady_clock::now();
        for (size_t off = 0; off < total; off += chunk) std::memcpy(target.data() + off, source.data() + off, chunk);
        copy = std::min(copy, seconds_since(start));
      }
      if (rc == 0) {
        std::printf("{\"chunk_bytes\":%zu,\"total_bytes\":%zu,\"cma_gbps\":%.2f,\"memcpy_gbps\":%.2f}\n", chunk, total,
                    static_cast<double>(total) / cma / 1e9, static_cast<double>(total) / copy / 1e9);
      }
    }
  }
  kill(sibling, SIGKILL);
  waitpid(sibling, nullptr, 0);
  return rc;
}
