#include "mcx/distributed/tcp_peer_group.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"

namespace mcx::distributed {
namespace {

constexpr size_t kHeaderBytes = 16;
constexpr uint64_t kCoalesceBytes = 64 * 1024;  // smaller payloads go out in the header's write

void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// One connection's state across exchanges.
struct Peer {
  std::unique_ptr<DataPlaneStream> stream;

  struct Out {
    std::string head;  // header, and the payload when it is small
    const char* data = nullptr;
    uint64_t data_bytes = 0;  // payload written from `data` (0 when it rode in `head`)
    size_t head_off = 0;
    uint64_t data_off = 0;
  };
  std::deque<Out> out;

  // The message being read: its header, then its body into `dst`.
  std::array<char, kHeaderBytes> header{};
  size_t header_got = 0;
  bool in_body = false;
  uint64_t tag = 0, bytes = 0, got = 0;
  char* dst = nullptr;
  int recv_index = -1;  // the posted receive it completes, or -1 (kept in `early`)

  std::map<uint64_t, size_t> posted;                         // tag -> receive index, this exchange
  std::map<uint64_t, std::deque<std::vector<char>>> early;  // messages that came before their receive
};

class TcpPeerGroup final : public PeerGroup {
 public:
  TcpPeerGroup(std::vector<std::unique_ptr<DataPlaneStream>> streams, std::vector<int> processes, int rank,
               std::string key, bool tls)
      : processes_(std::move(processes)), rank_(rank), key_(std::move(key)), tls_(tls),
        wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    peers_.resize(streams.size());
    for (size_t r = 0; r < streams.size(); ++r) peers_[r].stream = std::move(streams[r]);
  }
  ~TcpPeerGroup() override {
    if (wake_fd_ >= 0) close(wake_fd_);
  }

  int size() const override { return static_cast<int>(processes_.size()); }
  int rank() const override { return rank_; }
  std::string description() const override {
    return absl::StrCat(tls_ ? "tls" : "tcp", " group '", key_, "' of processes {", absl::StrJoin(processes_, ","),
                        "}");
  }

  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) return poisoned();
      busy_ = true;
    }
    absl::Status status = run(sends, recvs, deadline, on_recv);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    if (!status.ok()) {
      if (poison_.ok()) poison_ = status;
      close_locked();
    }
    return status;
  }

  void abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (poison_.ok()) poison_ = why.ok() ? absl::AbortedError("[data plane] aborted") : why;
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    if (!busy_) close_locked();  // otherwise the exchange closes it on its way out
  }

  bool is_poisoned() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !poison_.ok();
  }

 private:
  std::string who(int peer) const {
    return absl::StrCat("process ", processes_[peer], " (peer ", peer, " of ", description(), ")");
  }

  absl::Status run(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                   const OnRecv& on_recv) {
    const int n = size();
    for (Peer& p : peers_) p.posted.clear();
    std::vector<bool> done(recvs.size(), false);
    for (size_t i = 0; i < recvs.size(); ++i) {
      const Recv& r = recvs[i];
      if (r.peer < 0 || r.peer >= n || r.peer == rank_) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] receive ", i, " names peer ", r.peer, " in ",
                                                       description(), "; expected another rank in [0, ", n, ")"));
      }
      if (r.bytes <= 0) {
        done[i] = true;
        continue;
      }
      Peer& p = peers_[r.peer];
      if (auto e = p.early.find(r.tag); e != p.early.end()) {
        std::vector<char> msg = std::move(e->second.front());
        e->second.pop_front();
        if (e->second.empty()) p.early.erase(e);
        MCX_RETURN_IF_ERROR(check_fits(r.peer, r.tag, msg.size(), r.bytes));
        if (!msg.empty()) std::memcpy(r.data, msg.data(), msg.size());
        done[i] = true;
        continue;
      }
      if (!p.posted.emplace(r.tag, i).second) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] two receives from peer ", r.peer,
                                                       " with tag ", r.tag, " in one exchange of ", description()));
      }
    }
    for (const Send& s : sends) {
      if (s.peer < 0 || s.peer >= n || s.peer == rank_) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] a send names peer ", s.peer, " in ", description(),
                                                       "; expected another rank in [0, ", n, ")"));
      }
      if (s.bytes <= 0) continue;
      Peer::Out o;
      o.head.resize(kHeaderBytes);
      put_u64(o.head.data(), s.tag);
      put_u64(o.head.data() + 8, static_cast<uint64_t>(s.bytes));
      if (static_cast<uint64_t>(s.bytes) <= kCoalesceBytes) {
        o.head.append(static_cast<const char*>(s.data), static_cast<size_t>(s.bytes));
      } else {
        o.data = static_cast<const char*>(s.data);
        o.data_bytes = static_cast<uint64_t>(s.bytes);
      }
      peers_[s.peer].out.push_back(std::move(o));
    }

    size_t next_notify = 0;
    std::vector<pollfd> fds;
    std::vector<int> fd_peer;
    bool first = true;
    while (true) {
      while (next_notify < recvs.size() && done[next_notify]) {
        if (on_recv && recvs[next_notify].bytes > 0) MCX_RETURN_IF_ERROR(on_recv(next_notify));
        ++next_notify;
      }
      bool sending = false;
      for (const Peer& p : peers_) sending = sending || !p.out.empty();
      if (next_notify == recvs.size() && !sending) return absl::OkStatus();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!poison_.ok()) return abort_reason_locked();
      }
      if (absl::Now() >= deadline) return deadline_error(recvs, done);
      fds.clear();
      fd_peer.clear();
      for (int r = 0; r < n; ++r) {
        Peer& p = peers_[r];
        if (!p.stream) continue;
        if (first) {  // start the sends and drain what is already here before waiting
          MCX_RETURN_IF_ERROR(pump(r, recvs, done));
        }
        const bool want_out = !p.out.empty() || p.stream->wants_write();
        fds.push_back({p.stream->fd(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0});
        fd_peer.push_back(r);
      }
      if (first) {
        first = false;
        continue;  // the pumps may have finished everything
      }
      fds.push_back({wake_fd_, POLLIN, 0});
      const absl::Duration left = deadline - absl::Now();
      const int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left) + 1, 0, 1000));
      const int rc = poll(fds.data(), fds.size(), ms);
      if (rc < 0 && errno != EINTR) {
        return absl::InternalError(absl::StrCat("[data plane] poll in ", description(), ": ", strerror(errno)));
      }
      if (rc <= 0) continue;
      if (fds.back().revents & POLLIN) {
        std::lock_guard<std::mutex> lock(mu_);
        return abort_reason_locked();
      }
      for (size_t k = 0; k + 1 < fds.size(); ++k) {
        if (fds[k].revents != 0) MCX_RETURN_IF_ERROR(pump(fd_peer[k], recvs, done));
      }
    }
  }

  // Moves what can move now on peer r's connection: reads until it would block, then writes.
  absl::Status pump(int r, std::span<const Recv> recvs, std::vector<bool>& done) {
    Peer& p = peers_[r];
    while (true) {
      if (!p.in_body) {
        DataPlaneStream::Result res = p.stream->read_some(p.header.data() + p.header_got, kHeaderBytes - p.header_got);
        p.header_got += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return closed(r, "receiving from", res.error);
        }
        p.header_got = 0;
        p.tag = get_u64(p.header.data());
        p.bytes = get_u64(p.header.data() + 8);
        p.got = 0;
        p.in_body = true;
        if (auto it = p.posted.find(p.tag); it != p.posted.end()) {
          const Recv& rv = recvs[it->second];
          MCX_RETURN_IF_ERROR(check_fits(r, p.tag, p.bytes, rv.bytes));
          p.dst = static_cast<char*>(rv.data);
          p.recv_index = static_cast<int>(it->second);
          p.posted.erase(it);
        } else {
          std::deque<std::vector<char>>& q = p.early[p.tag];
          q.emplace_back(p.bytes);
          p.dst = q.back().data();
          p.recv_index = -1;
        }
      }
      if (p.got < p.bytes) {
        DataPlaneStream::Result res = p.stream->read_some(p.dst + p.got, p.bytes - p.got);
        p.got += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return closed(r, "receiving from", res.error);
        }
      }
      p.in_body = false;
      if (p.recv_index >= 0) done[p.recv_index] = true;
    }
    while (!p.out.empty()) {
      Peer::Out& o = p.out.front();
      if (o.head_off < o.head.size()) {
        DataPlaneStream::Result res = p.stream->write_some(o.head.data() + o.head_off, o.head.size() - o.head_off);
        o.head_off += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return closed(r, "sending to", res.error);
        }
      }
      if (o.data_off < o.data_bytes) {
        DataPlaneStream::Result res = p.stream->write_some(o.data + o.data_off, o.data_bytes - o.data_off);
        o.data_off += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return closed(r, "sending to", res.error);
        }
      }
      p.out.pop_front();
    }
    return absl::OkStatus();
  }

  absl::Status check_fits(int peer, uint64_t tag, uint64_t bytes, int64_t capacity) const {
    if (bytes <= static_cast<uint64_t>(capacity)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("[data plane] ", who(peer), " sent ", bytes,
                                                   " bytes with tag ", tag, "; the receive posted for it holds ",
                                                   capacity));
  }

  absl::Status closed(int peer, const char* what, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) return poison_;  // an abort shut the connections under us
    }
    return mark_process_failure(
        absl::UnavailableError(absl::StrCat("[data plane] ", what, " ", who(peer),
                                            ": the connection closed (the process exited, was killed or aborted "
                                            "the group): ",
                                            why)),
        processes_[peer]);
  }

  absl::Status deadline_error(std::span<const Recv> recvs, const std::vector<bool>& done) const {
    std::vector<std::string> waiting;
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (!done[i]) waiting.push_back(absl::StrCat("receive from ", who(recvs[i].peer)));
    }
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (!peers_[r].out.empty()) waiting.push_back(absl::StrCat("send to ", who(static_cast<int>(r))));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("[data plane] deadline exceeded in ", description(), ": ", absl::StrJoin(waiting, "; ")));
  }

  absl::Status abort_reason_locked() const {
    return poison_.ok() ? absl::AbortedError(absl::StrCat("[data plane] ", description(), " was aborted")) : poison_;
  }

  absl::Status poisoned() const {
    return with_payloads_of(
        absl::AbortedError(
            absl::StrCat("[data plane] ", description(), " is unusable after an earlier error: ", poison_.message())),
        poison_);
  }

  void close_locked() {
    for (Peer& p : peers_) {
      if (p.stream) p.stream->shutdown();
    }
  }

  const std::vector<int> processes_;
  const int rank_;
  const std::string key_;
  const bool tls_;
  const int wake_fd_;
  std::vector<Peer> peers_;  // used by the exchanging thread only; streams shut down under mu_

  mutable std::mutex mu_;
  absl::Status poison_;  // guarded by mu_
  bool busy_ = false;    // guarded by mu_
};

}  // namespace

std::unique_ptr<PeerGroup> make_tcp_peer_group(std::vector<std::unique_ptr<DataPlaneStream>> streams,
                                               std::vector<int> processes, int rank, std::string key, bool tls) {
  return std::make_unique<TcpPeerGroup>(std::move(streams), std::move(processes), rank, std::move(key), tls);
}

}  // namespace mcx::distributed
