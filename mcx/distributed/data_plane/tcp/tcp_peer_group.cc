#include "mcx/distributed/data_plane/tcp/tcp_peer_group.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/error.h"
#include "mcx/distributed/data_plane/tcp/little_endian.h"

namespace mcx::distributed {
namespace {

constexpr size_t kHeaderBytes = 16;
// Smaller payloads are not parked on arrival (see parked()); on TLS they are joined to their header, so that
// header and payload go out as one record.
constexpr uint64_t kCoalesceBytes = 64 * 1024;
// The last frame of a process that leaves a poisoned group: {i32 failed process or -1, the reason}. So a peer
// blocked on that process learns why instead of seeing a bare closed connection (and blames the process that
// failed, not the one that left because of it). No message uses this tag.
constexpr uint64_t kGoodbyeTag = ~uint64_t{0};
constexpr size_t kMaxGoodbyeBytes = 2048;
constexpr int64_t kSpinNanos = 50'000;  // how long an exchange looks at its shared-memory links before it sleeps
// The busy part of that look (spin_on_shared_memory), adapted between these to the waits seen; it starts at the most.
constexpr int64_t kMaxBusySpinNanos = 4'000;
constexpr int64_t kMinBusySpinNanos = 250;

// One connection's state across exchanges.
struct Peer {
  std::unique_ptr<DataPlaneStream> stream;
  absl::Status closed;  // why the connection closed (the peer died or aborted the group); OK while open

  // A message being sent: its header, then its payload from the caller's buffer (on TLS a small one is joined to
  // its header in `joined` instead).
  struct Out {
    std::array<char, kHeaderBytes> header{};
    const char* data = nullptr;
    uint64_t data_bytes = 0;
    std::string joined;  // TLS, small payloads: header and payload as one buffer (then data_bytes is 0)
    uint64_t sent = 0;   // bytes of header + payload (or of `joined`) written
  };
  // The queue of messages to send, oldest first from out[out_front] (a vector reused across exchanges: no
  // allocation per message once it has grown).
  std::vector<Out> out;
  size_t out_front = 0;
  bool sending() const { return out_front < out.size(); }
  void pop_out() {
    if (++out_front == out.size()) {
      out.clear();
      out_front = 0;
    }
  }

  // The message being read: its header, then its body into `dst`.
  std::array<char, kHeaderBytes> header{};
  size_t header_got = 0;
  bool in_body = false;
  uint64_t tag = 0, bytes = 0, got = 0;
  char* dst = nullptr;        // null with in_body: parked (see pump)
  int recv_index = -1;        // the posted receive it completes, or -1: read into `unmatched`
  std::vector<char> unmatched;  // a message no receive was posted for when its header came

  std::vector<std::pair<uint64_t, size_t>> posted;          // (tag, receive index) posted this exchange, not begun
  // The receive posted for `tag` this exchange, removed from `posted`; -1 when none.
  int take_posted(uint64_t tag) {
    for (size_t k = 0; k < posted.size(); ++k) {
      if (posted[k].first != tag) continue;
      const int index = static_cast<int>(posted[k].second);
      posted.erase(posted.begin() + static_cast<std::ptrdiff_t>(k));
      return index;
    }
    return -1;
  }
  std::map<uint64_t, std::deque<std::vector<char>>> early;  // whole messages that came before their receive
};

class TcpPeerGroup final : public PeerGroup {
 public:
  TcpPeerGroup(std::vector<std::unique_ptr<DataPlaneStream>> streams, std::vector<int> processes, int rank,
               std::string key, bool tls)
      : processes_(std::move(processes)), rank_(rank), key_(std::move(key)), tls_(tls),
        wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    peers_.resize(streams.size());
    for (size_t r = 0; r < streams.size(); ++r) {
      if (streams[r] && streams[r]->uses_shared_memory()) shared_memory_peers_.push_back(static_cast<int>(r));
      peers_[r].stream = std::move(streams[r]);
    }
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
    if (!status.ok() && poison_.ok()) poison_ = status;
    if (!poison_.ok()) close_locked();  // (also after an exchange that completed although aborted meanwhile)
    return status;
  }

  void abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (poison_.ok()) poison_ = why.ok() ? absl::AbortedError("[data plane] aborted") : why;
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    if (!busy_) close_locked();  // otherwise the exchange closes it on its way out
  }

  bool failed() const override {
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
    std::vector<char>& done = done_;
    done.assign(recvs.size(), 0);
    for (size_t i = 0; i < recvs.size(); ++i) {
      const Recv& r = recvs[i];
      if (r.peer < 0 || r.peer >= n || r.peer == rank_) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] receive ", i, " names peer ", r.peer, " in ",
                                                       description(), "; expected another rank in [0, ", n, ")"));
      }
      if (r.tag == kGoodbyeTag) return absl::InvalidArgumentError("[data plane] tag 2^64-1 is reserved");
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
      if (p.in_body && p.dst == nullptr && p.tag == r.tag) {  // its header came, its body waits in the socket
        MCX_RETURN_IF_ERROR(check_fits(r.peer, r.tag, p.bytes, r.bytes));
        p.dst = static_cast<char*>(r.data);
        p.recv_index = static_cast<int>(i);
        continue;
      }
      const auto same_tag = [&](const std::pair<uint64_t, size_t>& posted) { return posted.first == r.tag; };
      if (std::any_of(p.posted.begin(), p.posted.end(), same_tag)) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] two receives from peer ", r.peer,
                                                       " with tag ", r.tag, " in one exchange of ", description()));
      }
      p.posted.emplace_back(r.tag, i);
    }
    for (const Send& s : sends) {
      if (s.peer < 0 || s.peer >= n || s.peer == rank_) {
        return absl::InvalidArgumentError(absl::StrCat("[data plane] a send names peer ", s.peer, " in ", description(),
                                                       "; expected another rank in [0, ", n, ")"));
      }
      if (s.tag == kGoodbyeTag) return absl::InvalidArgumentError("[data plane] tag 2^64-1 is reserved");
      if (s.bytes <= 0) continue;
      Peer& p = peers_[s.peer];
      Peer::Out& o = p.out.emplace_back();
      store_u64(o.header.data(), s.tag);
      store_u64(o.header.data() + 8, static_cast<uint64_t>(s.bytes));
      o.data = static_cast<const char*>(s.data);
      o.data_bytes = static_cast<uint64_t>(s.bytes);
      const bool tls_stream = p.stream && p.stream->ssl() != nullptr && !p.stream->uses_shared_memory();
      if (tls_stream && o.data_bytes <= kCoalesceBytes) {
        o.joined.assign(o.header.data(), kHeaderBytes);
        o.joined.append(o.data, static_cast<size_t>(o.data_bytes));
        o.data_bytes = 0;
      }
    }

    size_t next_notify = 0;
    std::vector<pollfd>& fds = fds_;
    std::vector<int>& fd_peer = fd_peer_;
    bool first = true;
    bool looked_after_abort = false;
    while (true) {
      while (next_notify < recvs.size() && done[next_notify]) {
        if (on_recv && recvs[next_notify].bytes > 0) MCX_RETURN_IF_ERROR(on_recv(next_notify));
        ++next_notify;
      }
      bool sending = false;
      for (const Peer& p : peers_) sending = sending || p.sending();
      if (next_notify == recvs.size() && !sending) return absl::OkStatus();
      absl::Status aborted;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!poison_.ok()) aborted = abort_reason_locked();
      }
      if (!aborted.ok()) {
        // What has already arrived still completes this exchange: a peer that sent its last message and died
        // at once is reported failed, and the report aborts the group, possibly before this thread read the
        // message (it waits in the ring or the socket). One last look at every connection, then the abort.
        if (looked_after_abort) return aborted;
        looked_after_abort = true;
        for (int r = 0; r < n; ++r) {
          if (peers_[r].stream && peers_[r].closed.ok()) MCX_RETURN_IF_ERROR(pump(r, recvs, done));
        }
        continue;
      }
      MCX_RETURN_IF_ERROR(needed_closed(recvs, done));
      if (absl::Now() >= deadline) return deadline_error(recvs, done);
      if (!first) {
        MCX_ASSIGN_OR_RETURN(const bool pumped, spin_on_shared_memory(recvs, done));
        if (pumped) continue;
      }
      fds.clear();
      fd_peer.clear();
      bool progressed = false;  // a shared-memory link had what it waits for: go round again without sleeping
      for (int r = 0; r < n; ++r) {
        Peer& p = peers_[r];
        if (!p.stream || !p.closed.ok()) continue;
        if (first) {  // start the sends and drain what is already here before waiting
          MCX_RETURN_IF_ERROR(pump(r, recvs, done));
          // No poll is prepared on this pass: for a shared-memory link that raises this side's waiting flags,
          // and the peer would ring a doorbell (a TCP send and, here, a receive) for a reply the spin below
          // would have seen anyway.
          continue;
        }
        const bool want_in = !parked(p);  // a parked peer still reports a hang-up (POLLHUP)
        bool ready = false;
        fds.push_back({p.stream->fd(), p.stream->prepare_poll(want_in, /*want_out=*/p.sending(), &ready), 0});
        fd_peer.push_back(r);
        if (ready) {
          MCX_RETURN_IF_ERROR(pump(r, recvs, done));
          progressed = true;
        }
      }
      if (first || progressed) {
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
      if (fds.back().revents & POLLIN) continue;  // aborted: the loop's top returns why
      for (size_t k = 0; k + 1 < fds.size(); ++k) {
        const bool hangup = (fds[k].revents & (POLLHUP | POLLERR)) != 0;
        if (fds[k].revents != 0) MCX_RETURN_IF_ERROR(pump(fd_peer[k], recvs, done, hangup));
      }
    }
  }

  // Before the loop sleeps in poll: looks at the shared-memory links it waits on, busily for busy_spin_nanos_ and
  // then yielding the core between looks until kSpinNanos have passed, and pumps the first that became ready
  // (true). A reply between processes of one host often comes within a microsecond or two; sleeping instead
  // costs the sender a doorbell and this thread a wake-up, and a yield is a trip through the scheduler (~0.5 us
  // here) that a reply arriving meanwhile waits out. Spinning pays only where replies come soon, from a peer
  // running on another core at the same time, so the busy part adapts to the waits seen: it doubles (up to
  // kMaxBusySpinNanos) after a wait shorter than that, and halves (down to kMinBusySpinNanos) after a longer one
  // (a peer that computes, or more processes than cores, where the peer may need this very core to answer). The
  // busy looks are plain loads, without x86's pause: under KVM a run of pauses is a pause-loop exit to the host,
  // and with pause the 2-process 4 KiB all-reduce here fell into runs of 4.5-4.8 us (1 MiB: 0.6-0.7 ms) in 2 of 4
  // jobs against 1 of 9 without (bench_collectives, alternating). Measured (bench_collective_layers, 2 processes on
  // 2 cores): a 4 KiB exchange 0.95-0.99 us against 1.10 us yielding from the first look (p50; mean 0.96-1.06
  // against 1.36).
  absl::StatusOr<bool> spin_on_shared_memory(std::span<const Recv> recvs, std::vector<char>& done) {
    auto open = [&](int r) { return peers_[r].closed.ok(); };
    if (std::none_of(shared_memory_peers_.begin(), shared_memory_peers_.end(), open)) return false;
    // The first link that has what this exchange waits for, or -1.
    auto ready_link = [&]() {
      for (int r : shared_memory_peers_) {
        const Peer& p = peers_[r];
        if (open(r) && p.stream->shared_memory_ready(!parked(p), p.sending())) return r;
      }
      return -1;
    };
    const int64_t start = absl::GetCurrentTimeNanos();
    auto adapt = [&](int64_t waited) {
      busy_spin_nanos_ = waited < kMaxBusySpinNanos ? std::min(2 * busy_spin_nanos_, kMaxBusySpinNanos)
                                                    : std::max(busy_spin_nanos_ / 2, kMinBusySpinNanos);
    };
    int64_t now = start;
    for (const int64_t busy_until = start + busy_spin_nanos_; now < busy_until; now = absl::GetCurrentTimeNanos()) {
      for (int k = 0; k < 16; ++k) {
        if (const int r = ready_link(); r >= 0) {
          adapt(now - start);
          MCX_RETURN_IF_ERROR(pump(r, recvs, done));
          return true;
        }
      }
    }
    for (const int64_t until = start + kSpinNanos; now < until; now = absl::GetCurrentTimeNanos()) {
      if (const int r = ready_link(); r >= 0) {
        adapt(now - start);
        MCX_RETURN_IF_ERROR(pump(r, recvs, done));
        return true;
      }
      sched_yield();
    }
    adapt(kSpinNanos);
    return false;
  }

  // A large message whose header came before any receive was posted for it waits in the socket ("parked": TCP,
  // or the shared-memory ring, holds it back) until an exchange posts its receive, which then gets it read
  // straight into its buffer; read into a temporary buffer instead, it would cost an allocation, page faults and
  // a second copy (a ring's next step routinely arrives early). It is read aside only when the exchange needs
  // what follows it on the connection (a receive from that peer is pending), or the peer hung up.
  static bool parked(const Peer& p) { return p.in_body && p.dst == nullptr && p.posted.empty(); }

  // Moves what can move now on peer r's connection: reads until it would block (or parks), then writes.
  absl::Status pump(int r, std::span<const Recv> recvs, std::vector<char>& done, bool hangup = false) {
    Peer& p = peers_[r];
    while (true) {
      if (p.in_body && p.dst == nullptr) {
        if (p.posted.empty() && !hangup) break;  // stays parked
        p.unmatched.resize(p.bytes);
        p.dst = p.unmatched.data();
      }
      if (!p.in_body) {
        DataPlaneStream::Result res = p.stream->read_some(p.header.data() + p.header_got, kHeaderBytes - p.header_got);
        p.header_got += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return mark_closed(r, "receiving from", res);
        }
        p.header_got = 0;
        p.tag = load_u64(p.header.data());
        p.bytes = load_u64(p.header.data() + 8);
        if (p.tag == kGoodbyeTag && p.bytes > kMaxGoodbyeBytes) {
          return absl::InvalidArgumentError(absl::StrCat("[data plane] ", who(r), " sent a goodbye of ", p.bytes,
                                                         " bytes; expected at most ", kMaxGoodbyeBytes));
        }
        p.got = 0;
        p.in_body = true;
        if (const int index = p.take_posted(p.tag); index >= 0) {
          const Recv& rv = recvs[static_cast<size_t>(index)];
          MCX_RETURN_IF_ERROR(check_fits(r, p.tag, p.bytes, rv.bytes));
          p.dst = static_cast<char*>(rv.data);
          p.recv_index = index;
        } else if (p.tag != kGoodbyeTag && p.bytes > kCoalesceBytes) {
          p.dst = nullptr;  // parked (above): read when its receive is posted, or when something behind it is
          p.recv_index = -1;
          continue;
        } else {
          p.unmatched.resize(p.bytes);
          p.dst = p.unmatched.data();
          p.recv_index = -1;
        }
      }
      if (p.got < p.bytes) {
        DataPlaneStream::Result res = p.stream->read_some(p.dst + p.got, p.bytes - p.got);
        p.got += res.bytes;
        if (res.io != DataPlaneStream::Io::kDone) {
          if (res.io == DataPlaneStream::Io::kWouldBlock) break;
          return mark_closed(r, "receiving from", res);
        }
      }
      p.in_body = false;
      if (p.recv_index >= 0) {
        done[p.recv_index] = true;
      } else if (p.tag == kGoodbyeTag) {
        p.closed = goodbye_status(r, p.unmatched);
        return absl::OkStatus();  // nothing follows a goodbye
      } else if (const int index = p.take_posted(p.tag); index >= 0) {
        // Its receive was posted while it was being read (by a later exchange): hand it over now.
        const Recv& rv = recvs[static_cast<size_t>(index)];
        MCX_RETURN_IF_ERROR(check_fits(r, p.tag, p.unmatched.size(), rv.bytes));
        if (!p.unmatched.empty()) std::memcpy(rv.data, p.unmatched.data(), p.unmatched.size());
        done[static_cast<size_t>(index)] = true;
        p.unmatched.clear();
      } else {
        p.early[p.tag].push_back(std::move(p.unmatched));
        p.unmatched = {};
      }
    }
    while (p.sending()) {
      Peer::Out& o = p.out[p.out_front];
      DataPlaneStream::Result res;
      if (!o.joined.empty()) {
        res = p.stream->write_some(o.joined.data() + o.sent, o.joined.size() - o.sent);
      } else {
        const size_t header_at = static_cast<size_t>(std::min<uint64_t>(o.sent, kHeaderBytes));
        const uint64_t data_at = o.sent - header_at;
        res = p.stream->write_some(o.header.data() + header_at, kHeaderBytes - header_at, o.data + data_at,
                                   o.data_bytes - data_at);
      }
      o.sent += res.bytes;
      if (res.io != DataPlaneStream::Io::kDone) {
        if (res.io == DataPlaneStream::Io::kWouldBlock) break;
        return mark_closed(r, "sending to", res);
      }
      p.pop_out();
    }
    return absl::OkStatus();
  }

  absl::Status check_fits(int peer, uint64_t tag, uint64_t bytes, int64_t capacity) const {
    if (bytes <= static_cast<uint64_t>(capacity)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("[data plane] ", who(peer), " sent ", bytes,
                                                   " bytes with tag ", tag, "; the receive posted for it holds ",
                                                   capacity));
  }

  // A connection that closed fails an exchange only once the exchange needs that peer (a receive not yet
  // complete, or a send not yet written): a process that aborted the group because a third one died closes its
  // connections too, and the exchange must blame the dead process it waits for, not the messenger. Transport
  // errors other than a closed connection fail at once.
  absl::Status mark_closed(int peer, const char* what, const DataPlaneStream::Result& res) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!poison_.ok()) return poison_;  // an abort shut the connections under us
    }
    if (res.io == DataPlaneStream::Io::kError) {
      return absl::UnavailableError(absl::StrCat("[data plane] ", what, " ", who(peer), " failed: ", res.error));
    }
    peers_[peer].closed = mark_process_failure(
        absl::UnavailableError(absl::StrCat("[data plane] ", what, " ", who(peer),
                                            ": the connection closed (the process exited, was killed or aborted "
                                            "the group): ",
                                            res.error)),
        processes_[peer]);
    return absl::OkStatus();
  }

  // The closed connection this exchange waits for, the earliest receive first.
  absl::Status needed_closed(std::span<const Recv> recvs, const std::vector<char>& done) const {
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (!done[i] && !peers_[recvs[i].peer].closed.ok()) return peers_[recvs[i].peer].closed;
    }
    for (const Peer& p : peers_) {
      if (p.sending() && !p.closed.ok()) return p.closed;
    }
    return absl::OkStatus();
  }

  absl::Status deadline_error(std::span<const Recv> recvs, const std::vector<char>& done) const {
    std::vector<std::string> waiting;
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (!done[i]) waiting.push_back(absl::StrCat("receive from ", who(recvs[i].peer)));
    }
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (peers_[r].sending()) waiting.push_back(absl::StrCat("send to ", who(static_cast<int>(r))));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("[data plane] deadline exceeded in ", description(), ": ", absl::StrJoin(waiting, "; ")));
  }

  absl::Status abort_reason_locked() const {
    return poison_.ok() ? absl::AbortedError(absl::StrCat("[data plane] ", description(), " was aborted")) : poison_;
  }

  absl::Status poisoned() const { return peer_group_unusable(description(), poison_); }

  // Says goodbye (poison_ as the reason) to every peer whose connection is between frames, then shuts the
  // connections down. Best effort: a goodbye that does not fit in the socket buffer now is dropped.
  void close_locked() {
    if (closed_) return;
    closed_ = true;
    std::string frame(kHeaderBytes + 4, '\0');
    const int failed = failed_process(poison_);
    for (int b = 0; b < 4; ++b) frame[kHeaderBytes + b] = static_cast<char>((static_cast<uint32_t>(failed) >> (8 * b)) & 0xff);
    frame.append(poison_.message().data(), std::min<size_t>(poison_.message().size(), kMaxGoodbyeBytes - 4));
    store_u64(frame.data(), kGoodbyeTag);
    store_u64(frame.data() + 8, frame.size() - kHeaderBytes);
    for (Peer& p : peers_) {
      if (!p.stream) continue;
      const bool between_frames = !p.sending() || p.out[p.out_front].sent == 0;
      if (between_frames && p.closed.ok()) (void)p.stream->write_some(frame.data(), frame.size());
      p.stream->shutdown();
    }
  }

  // The failure a goodbye from peer r reports: the failure of the process it names (mark_process_failure), else,
  // as a bare closed connection would be, the failure of peer r itself (with its reason in the message).
  absl::Status goodbye_status(int r, const std::vector<char>& body) const {
    int32_t failed = -1;
    std::string why;
    if (body.size() >= 4) {
      uint32_t v = 0;
      for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(static_cast<unsigned char>(body[b])) << (8 * b);
      failed = static_cast<int32_t>(v);
      why.assign(body.data() + 4, body.size() - 4);
    }
    const std::string msg = absl::StrCat("[data plane] ", who(r), " left the group: ", why);
    return mark_process_failure(absl::UnavailableError(msg), failed >= 0 ? failed : processes_[r]);
  }

  const std::vector<int> processes_;
  const int rank_;
  const std::string key_;
  const bool tls_;
  const int wake_fd_;
  std::vector<Peer> peers_;  // used by the exchanging thread only; streams shut down under mu_
  std::vector<int> shared_memory_peers_;  // the ranks whose connection runs through shared memory (fixed)
  // Reused by every exchange (the exchanging thread's only): which receives completed, what poll waits on.
  std::vector<char> done_;
  std::vector<pollfd> fds_;
  std::vector<int> fd_peer_;
  int64_t busy_spin_nanos_ = kMaxBusySpinNanos;  // spin_on_shared_memory's busy part, adapted as it goes

  mutable std::mutex mu_;
  absl::Status poison_;  // guarded by mu_
  bool busy_ = false;    // guarded by mu_
  bool closed_ = false;  // guarded by mu_: goodbyes sent, connections shut down
};

}  // namespace

std::unique_ptr<PeerGroup> make_tcp_peer_group(std::vector<std::unique_ptr<DataPlaneStream>> streams,
                                               std::vector<int> processes, int rank, std::string key, bool tls) {
  return std::make_unique<TcpPeerGroup>(std::move(streams), std::move(processes), rank, std::move(key), tls);
}

}  // namespace mcx::distributed
