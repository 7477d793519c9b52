// DataPlaneListener: the one listening socket of a process's data-plane transport (tcp_peer_group.h).
//
// It binds the data-plane address (an ephemeral port; never all interfaces), accepts connections on its own
// thread and runs each one's handshake on a short-lived thread of its own (TLS when configured, then the job
// secret proof of tcp/handshake.h, then the certificate-to-process check), so a slow or hostile client
// delays nobody else. An accepted connection waits, keyed by (group, sender rank), until the group being built
// here takes it; one never taken is closed after kUnclaimedTtl.
//
// A connection that fails any check is closed and logged at WARN ("[data plane] refused a connection from
// ADDR: reason"), and counted (refused()). At most max_handshakes handshakes run at once; more connections are
// closed at once (counted too). Every handshake has handshake_timeout.
//
// Errors: start() Unavailable when the address cannot be bound; take() DeadlineExceeded naming the group and
// rank that did not connect, the reported failure of that process (collectives/live_set.h, marked as its failure)
// within 200 ms of the coordination service declaring it dead, Cancelled once the listener stops.
// Thread-safety: thread-safe. The destructor stops accepting, wakes and joins every handshake.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/data_plane/tcp/handshake.h"
#include "mcx/distributed/data_plane/tcp/stream.h"
#include "mcx/distributed/data_plane/tcp/tls.h"

namespace mcx::distributed {

class DataPlaneListener {
 public:
  struct Options {
    std::string address;                // the IP to bind (port chosen by the kernel)
    int process = 0;                    // this process (hellos for another are refused)
    std::shared_ptr<DataPlaneTls> tls;  // null: plaintext
    SecretSource secret;                // the job's data-plane secret
    absl::Duration handshake_timeout = absl::Seconds(10);
    int max_handshakes = 64;
  };
  static constexpr absl::Duration kUnclaimedTtl = absl::Minutes(5);

  static absl::StatusOr<std::unique_ptr<DataPlaneListener>> start(Options options);
  ~DataPlaneListener();
  DataPlaneListener(const DataPlaneListener&) = delete;
  DataPlaneListener& operator=(const DataPlaneListener&) = delete;

  // "ip:port" ("[ip6]:port"), what peers connect to.
  const std::string& address() const { return address_; }

  // The accepted connection from rank `from_rank` (process `from_process`) of `group`, waiting until it arrives.
  absl::StatusOr<std::unique_ptr<DataPlaneStream>> take(const std::string& group, int from_rank, int from_process,
                                                        absl::Time deadline);

  int64_t refused() const { return refused_.load(); }

 private:
  struct Arrival {
    std::unique_ptr<DataPlaneStream> stream;
    int from_process = -1;
    absl::Time at;
  };
  struct Handshake {
    std::thread thread;
    int fd = -1;
    bool done = false;  // guarded by mu_
  };
  explicit DataPlaneListener(Options options) : options_(std::move(options)) {}
  void accept_loop();
  void run_handshake(Handshake* h, std::string from);
  void reap_locked(std::list<Handshake>& finished);

  const Options options_;
  std::string address_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: wakes the accept loop to stop
  std::thread acceptor_;
  std::atomic<int64_t> refused_{0};

  std::mutex mu_;
  std::condition_variable arrived_;
  bool stopping_ = false;                                    // guarded by mu_
  std::map<std::pair<std::string, int>, Arrival> arrivals_;  // guarded by mu_
  std::list<Handshake> handshakes_;                          // guarded by mu_
};

}  // namespace mcx::distributed
