#include "mcx/distributed/data_plane/data_plane.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"
#include "mcx/collectives/live_set.h"
#include "mcx/core/logging.h"
#include "mcx/collectives/peer_group.h"
#include "mcx/core/process_exit.h"
#include "mcx/distributed/data_plane/gloo/gloo_peer_group.h"
#include "mcx/distributed/data_plane/mpi/mpi_peer_group.h"
#include "mcx/distributed/data_plane/tcp/tcp_data_plane.h"

namespace mcx::distributed {
namespace {

// "host:port", "[v6]:port" -> host.
std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The local address of the route to host (connect() on a UDP socket sends nothing).
absl::StatusOr<std::string> local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("[data plane] cannot resolve the coordinator host '", host,
                                               "': ", gai_strerror(rc), "; set MCX_DATA_PLANE_ADDRESS"));
  }
  absl::StatusOr<std::string> out = absl::UnavailableError(
      absl::StrCat("[data plane] no route to the coordinator host '", host, "'; set MCX_DATA_PLANE_ADDRESS"));
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* src = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, src, buf, sizeof(buf)) != nullptr) {
        out = std::string(buf);
        close(fd);
        break;
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace

absl::StatusOr<std::string> data_plane_address(const std::string& coordinator_address) {
  MCX_ASSIGN_OR_RETURN(std::string configured, kDataPlaneAddressFlag.get());
  if (!configured.empty()) {
    if (configured == "0.0.0.0" || configured == "::" || configured == "[::]") {
      return absl::InvalidArgumentError(absl::StrCat(
          "[data plane] MCX_DATA_PLANE_ADDRESS='", configured,
          "' binds every interface; give the address of the interface the job uses (the data plane is plaintext)"));
    }
    return configured;
  }
  const std::string host = host_of(coordinator_address);
  if (host.empty() || is_loopback(host)) return std::string("127.0.0.1");
  return local_address_towards(host);
}

absl::Status start_data_plane(std::shared_ptr<JobKeyValue> kv, const DataPlaneConfig& config) {
  if (kv == nullptr) return absl::InvalidArgumentError("[data plane] start_data_plane needs the job's key-value store");
  MCX_ASSIGN_OR_RETURN(std::string backend, kCollectivesFlag.get());
  if (backend == "mpi") {
    MCX_RETURN_IF_ERROR(init_mpi(config.process_id, config.num_processes));
    static std::once_flag exit_step;
    std::call_once(exit_step, [] { run_at_exit(ExitStage::kDataPlane, finalize_mpi); });
    set_peer_group_factory("mpi", connect_mpi_peer_group);
    log_debug("[mcx.distributed] data plane: mpi");
    return absl::OkStatus();
  }
  MCX_ASSIGN_OR_RETURN(std::string address, data_plane_address(config.coordinator_address));
  MCX_ASSIGN_OR_RETURN(bool allow_plaintext, kAllowPlaintextDataPlaneFlag.get());
  MCX_ASSIGN_OR_RETURN(const bool tls_requested, kDataPlaneTlsFlag.get());
  // With mTLS required, tensors between hosts travel encrypted unless the operator accepts plaintext.
  const bool between_hosts = !is_loopback(address);
  const bool tls = tls_requested || (config.mtls.require && between_hosts && !allow_plaintext);
  if (backend == "auto") backend = "tcp";
  if (backend == "gloo") {
    if (tls) {
      return absl::FailedPreconditionError(absl::StrCat(
          "[data plane] MCX_COLLECTIVES=gloo has no TLS, but the data plane must be encrypted (",
          tls_requested ? "MCX_DATA_PLANE_TLS=1" : "MCX_REQUIRE_MTLS=1 between hosts, bound to " + address,
          "); use MCX_COLLECTIVES=tcp, or MCX_ALLOW_PLAINTEXT_DATA_PLANE=1 on a trusted network (docs/security.md)"));
    }
    MCX_RETURN_IF_ERROR(init_gloo_device(address));
    const int process_id = config.process_id;
    set_peer_group_factory("gloo", [kv, process_id](const PeerGroupRequest& request) {
      return connect_gloo_peer_group(request, process_id, *kv);
    });
    log_debug("[mcx.distributed] data plane: gloo on {}", address);
    return absl::OkStatus();
  }
  TcpDataPlane::Options o;
  o.process = config.process_id;
  o.address = address;
  MCX_ASSIGN_OR_RETURN(const bool shared_memory, kDataPlaneSharedMemoryFlag.get());
  if (shared_memory) o.host = config.host;
  o.kv = std::move(kv);
  if (tls) {
    MCX_ASSIGN_OR_RETURN(o.tls, DataPlaneTls::create(config.mtls));
  }
  MCX_ASSIGN_OR_RETURN(std::shared_ptr<TcpDataPlane> dp, TcpDataPlane::start(std::move(o)));
  set_peer_group_factory(tls ? "tls" : "tcp",
                         [dp](const PeerGroupRequest& request) { return dp->connect(request); });
  log_debug("[mcx.distributed] data plane: {} on {}", tls ? "tcp+tls" : "tcp", dp->address());
  return absl::OkStatus();
}

void stop_data_plane() {
  const bool mpi = peer_group_backend() == "mpi";
  set_peer_group_factory("", nullptr);
  if (mpi) finalize_mpi();
}

}  // namespace mcx::distributed
