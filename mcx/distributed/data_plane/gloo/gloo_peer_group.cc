#include "mcx/distributed/data_plane/gloo/gloo_peer_group.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/data_plane/gloo/gloo_kv_store.h"

namespace mcx::distributed {
namespace {

struct DeviceHolder {
  std::mutex mu;
  std::shared_ptr<gloo::transport::Device> device;  // guarded by mu
  std::string address;                              // guarded by mu
};

DeviceHolder& device_holder() {
  static DeviceHolder* h = new DeviceHolder();  // never destroyed: groups may be used until exit
  return *h;
}

std::chrono::milliseconds until(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(std::min(left, absl::Hours(24 * 365))));
}

// Key names in the store may not contain '/' inside the group part.
std::string sanitize_key(const std::string& key) {
  std::string out;
  for (char c : key) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',') ? c : '_';
  return out;
}

class GlooPeerGroup final : public PeerGroup {
 public:
  GlooPeerGroup(std::shared_ptr<gloo::rendezvous::Context> context, std::vector<int> processes, int rank,
                std::string key)
      : context_(std::move(context)), processes_(std::move(processes)), rank_(rank), key_(std::move(key)) {}

  ~GlooPeerGroup() override {
    std::lock_guard<std::mutex> lock(mu_);
    close_locked();
  }

  int size() const override { return static_cast<int>(processes_.size()); }
  int rank() const override { return rank_; }
  std::string description() const override {
    return absl::StrCat("gloo group '", key_, "' of processes {", absl::StrJoin(processes_, ","), "}");
  }

  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> send_bufs, recv_bufs;
    std::vector<int> send_peer, recv_peer;
    std::vector<size_t> recv_index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) return poisoned();
      busy_ = true;
    }
    absl::Status status;
    int at_peer = -1;
    const char* at_what = "posting";
    try {
      // Receives first, so a message that arrives early finds its buffer.
      for (size_t i = 0; i < recvs.size(); ++i) {
        if (recvs[i].bytes <= 0) continue;
        at_peer = recvs[i].peer;
        recv_bufs.push_back(context_->createUnboundBuffer(recvs[i].data, static_cast<size_t>(recvs[i].bytes)));
        recv_bufs.back()->recv(recvs[i].peer, recvs[i].tag);
        recv_peer.push_back(recvs[i].peer);
        recv_index.push_back(i);
      }
      for (const Send& s : sends) {
        if (s.bytes <= 0) continue;
        at_peer = s.peer;
        send_bufs.push_back(context_->createUnboundBuffer(const_cast<void*>(s.data), static_cast<size_t>(s.bytes)));
        send_bufs.back()->send(s.peer, s.tag);
        send_peer.push_back(s.peer);
      }
      publish_active(&send_bufs, &recv_bufs);
      at_what = "receiving from";
      for (size_t k = 0; k < recv_bufs.size() && status.ok(); ++k) {
        at_peer = recv_peer[k];
        if (!recv_bufs[k]->waitRecv(until(deadline))) {
          status = abort_reason();
        } else if (on_recv) {
          status = on_recv(recv_index[k]);
        }
      }
      at_what = "sending to";
      for (size_t k = 0; k < send_bufs.size() && status.ok(); ++k) {
        at_peer = send_peer[k];
        if (!send_bufs[k]->waitSend(until(deadline))) status = abort_reason();
      }
    } catch (const std::exception& e) {
      status = from_exception(e, at_what, at_peer, deadline);
    }
    std::lock_guard<std::mutex> lock(mu_);
    active_sends_ = nullptr;
    active_recvs_ = nullptr;
    busy_ = false;
    if (!status.ok()) {
      if (poison_.ok()) poison_ = status;
      close_locked();
      // Buffers may still be registered with the (now closed) pairs: keep them until the group dies.
      for (auto& b : send_bufs) graveyard_.push_back(std::move(b));
      for (auto& b : recv_bufs) graveyard_.push_back(std::move(b));
    }
    return status;
  }

  void abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (poison_.ok()) poison_ = why.ok() ? absl::AbortedError("[data plane] aborted") : why;
    if (active_recvs_) {
      for (auto& b : *active_recvs_) b->abortWaitRecv();
    }
    if (active_sends_) {
      for (auto& b : *active_sends_) b->abortWaitSend();
    }
    if (!busy_) close_locked();  // otherwise the exchange closes it on its way out
  }

 private:
  void publish_active(std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>* sends,
                      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>* recvs) {
    std::lock_guard<std::mutex> lock(mu_);
    active_sends_ = sends;
    active_recvs_ = recvs;
    if (!poison_.ok()) {  // aborted while posting
      for (auto& b : *recvs) b->abortWaitRecv();
      for (auto& b : *sends) b->abortWaitSend();
    }
  }

  absl::Status abort_reason() {
    std::lock_guard<std::mutex> lock(mu_);
    return poison_.ok() ? absl::AbortedError(absl::StrCat("[data plane] ", description(), " was aborted")) : poison_;
  }

  absl::Status poisoned() const { return peer_group_unusable(description(), poison_); }

  absl::Status from_exception(const std::exception& e, const char* what, int peer, absl::Time deadline) {
    const std::string msg = e.what();
    const std::string who =
        peer >= 0 ? absl::StrCat("process ", processes_[peer], " (peer ", peer, " of ", description(), ")")
                  : description();
    if (absl::StrContains(msg, "Timed out") || absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("[data plane] deadline exceeded ", what, " ", who, ": ", msg));
    }
    if (absl::StrContains(msg, "closed") || absl::StrContains(msg, "reset") || absl::StrContains(msg, "Broken pipe")) {
      absl::Status closed = absl::UnavailableError(absl::StrCat(
          "[data plane] ", what, " ", who,
          ": the connection closed (the process exited, was killed or aborted the group): ", msg));
      return peer >= 0 ? mark_process_failure(closed, processes_[peer]) : closed;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) return poison_;  // the abort closed the pairs under us
    }
    return absl::UnavailableError(absl::StrCat("[data plane] ", what, " ", who, " failed: ", msg));
  }

  void close_locked() {
    if (closed_) return;
    closed_ = true;
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // already broken: nothing left to close
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::vector<int> processes_;
  const int rank_;
  const std::string key_;

  std::mutex mu_;
  absl::Status poison_;  // guarded by mu_
  bool busy_ = false;    // guarded by mu_: an exchange is in flight
  bool closed_ = false;  // guarded by mu_
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>* active_sends_ = nullptr;  // guarded by mu_
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>* active_recvs_ = nullptr;  // guarded by mu_
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> graveyard_;                // guarded by mu_
};

}  // namespace

absl::Status init_gloo_device(const std::string& address) {
  DeviceHolder& h = device_holder();
  std::lock_guard<std::mutex> lock(h.mu);
  if (h.device) {
    if (h.address == address) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("[data plane] the Gloo device is bound to ", h.address,
                                                      " already; cannot rebind to ", address));
  }
  // Gloo writes to sockets without MSG_NOSIGNAL: a peer that died would kill this process with SIGPIPE instead
  // of failing the exchange with an error. Ignore it unless the program installed its own handler.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = address;
    h.device = gloo::transport::tcp::CreateDevice(attr);
    h.address = address;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("[data plane] cannot create the Gloo TCP device on ", address, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PeerGroup>> connect_gloo_peer_group(const PeerGroupRequest& request, int process_index,
                                                                   JobKeyValue& kv) {
  std::shared_ptr<gloo::transport::Device> device;
  {
    DeviceHolder& h = device_holder();
    std::lock_guard<std::mutex> lock(h.mu);
    device = h.device;
  }
  if (!device) return absl::FailedPreconditionError("[data plane] the Gloo device was not initialized");
  auto it = std::find(request.processes.begin(), request.processes.end(), process_index);
  if (it == request.processes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] process ", process_index, " is not in the group {",
                                                   absl::StrJoin(request.processes, ","), "}"));
  }
  const int rank = static_cast<int>(it - request.processes.begin());
  const int size = static_cast<int>(request.processes.size());
  const std::string prefix =
      absl::StrCat("data_plane/", sanitize_key(request.key), "/", request.live_set, ".", request.generation, "/");
  try {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::max(std::chrono::milliseconds(1), until(request.deadline)));
    GlooKvStore store(kv, prefix, request.deadline, request.processes);
    context->connectFullMesh(store, device);
    return std::unique_ptr<PeerGroup>(new GlooPeerGroup(std::move(context), request.processes, rank, request.key));
  } catch (const std::exception& e) {
    const bool timed_out = absl::Now() >= request.deadline || absl::StrContains(e.what(), "Timed out") ||
                           absl::StrContains(e.what(), "DEADLINE");
    const std::string msg =
        absl::StrCat("[data plane] process ", process_index, " could not connect ", request.key, " with processes {",
                     absl::StrJoin(request.processes, ","), "} (live set ", request.live_set, ", generation ", request.generation, "): ", e.what());
    return timed_out ? absl::DeadlineExceededError(msg) : absl::UnavailableError(msg);
  }
}

}  // namespace mcx::distributed
