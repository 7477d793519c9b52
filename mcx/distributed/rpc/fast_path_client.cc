#include "mcx/distributed/rpc/fast_path_client.h"

#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "mcx/core/mutex.h"
#include "mcx/distributed/rpc/fast_path_channel.h"
#include "mcx/distributed/rpc/fast_path_wire.h"
#include "mcx/distributed/rpc/proto_convert.h"
#include "mcx/distributed/rpc/proto_client.h"

namespace mcx::distributed {
namespace {

// A channel error ("[coordination] ...") as this call's ("[api] ...").
absl::Status as_call(std::string_view api, const absl::Status& s) {
  absl::string_view m = s.message();
  absl::ConsumePrefix(&m, "[coordination] ");
  return absl::Status(s.code(), absl::StrCat("[", absl::string_view(api.data(), api.size()), "] ", m));
}

// The watch stream on a connection of its own: next() reads the frames itself and applies each (a whole state or
// the tasks changed since the one before) to the state it holds.
class FastPathWatchStream final : public WatchStream {
 public:
  FastPathWatchStream(std::unique_ptr<FastPathConnection> c, uint64_t id, std::string target)
      : c_(std::move(c)), id_(id), target_(std::move(target)) {}
  ~FastPathWatchStream() override = default;  // closing the connection ends the stream

  absl::StatusOr<JobState> next(absl::Duration timeout) override {
    MutexLock lock(&read_mu_);
    if (!end_.ok()) return end_;
    const absl::Time deadline = absl::Now() + timeout;
    bool newest = false;  // a frame was applied in this call
    // Blocks for the first frame only; then applies whatever else has arrived.
    while (true) {
      absl::StatusOr<std::optional<Frame>> f = c_->read_frame(deadline, /*block=*/!newest);
      if (!f.ok()) {
        if (f.status().code() == absl::StatusCode::kDeadlineExceeded && !newest) {
          return absl::DeadlineExceededError("[watch] no job state change within the timeout");
        }
        end_ = cancelled_.load() ? absl::CancelledError("[watch] the stream was cancelled")
                                 : absl::UnavailableError(absl::StrCat("[watch] lost the coordination service at ",
                                                                       target_, " (", f.status().message(), ")"));
        if (newest) return state_;
        return end_;
      }
      if (!f->has_value()) return state_;
      Frame& frame = **f;
      if (frame.header.id != id_ || (frame.header.flags & kFlagTransportError)) {
        proto::StatusProto p;
        absl::Status why = (frame.header.flags & kFlagTransportError) && p.ParseFromString(frame.payload)
                               ? from_proto(p)
                               : absl::UnavailableError(absl::StrCat("[watch] an unexpected frame on the stream (id ",
                                                                     frame.header.id, ")"));
        end_ = absl::Status(why.code(), absl::StrCat("[watch] ", why.message()));
        c_->shutdown();
        return end_;
      }
      proto::JobStateProto msg;
      absl::Status applied = msg.ParseFromString(frame.payload)
                                 ? apply_proto(msg, &state_)
                                 : absl::DataLossError("[watch] a malformed job state from the coordination service");
      if (!applied.ok()) {
        end_ = absl::UnavailableError(applied.message());
        c_->shutdown();
        return end_;
      }
      newest = true;
    }
  }

  void cancel() override {
    if (cancelled_.exchange(true)) return;
    c_->shutdown();  // a blocked next() returns CANCELLED
  }

 private:
  std::unique_ptr<FastPathConnection> c_;
  const uint64_t id_;
  const std::string target_;
  std::atomic<bool> cancelled_{false};
  Mutex read_mu_;
  absl::Status end_ ABSL_GUARDED_BY(read_mu_);
  JobState state_ ABSL_GUARDED_BY(read_mu_);  // the frames applied so far
};

class FastPathCoordinationClient final : public ProtoCoordinationClient {
 public:
  explicit FastPathCoordinationClient(std::string address) : channel_(std::move(address)) {}

  std::string target() const override { return channel_.address(); }

  absl::StatusOr<std::unique_ptr<WatchStream>> watch(TaskId task, Incarnation incarnation,
                                                     absl::Duration connect_timeout) override {
    const absl::Time deadline = absl::Now() + connect_timeout;
    absl::StatusOr<std::unique_ptr<FastPathConnection>> c = FastPathConnection::open(channel_.address(), deadline);
    if (!c.ok()) return as_call("watch", c.status());
    proto::WatchRequest req;
    req.set_task(task);
    req.set_incarnation(incarnation);
    const uint64_t id = channel_.next_id();
    if (absl::Status s = (*c)->write_frame(static_cast<uint16_t>(Rpc::kWatch), id, req, deadline);
        !s.ok()) {
      return as_call("watch", s);
    }
    return std::unique_ptr<WatchStream>(new FastPathWatchStream(std::move(*c), id, channel_.address()));
  }

  absl::Status kv_insert_async(std::string_view key, std::string_view value, bool allow_overwrite,
                                   absl::Duration timeout) override {
    proto::KvInsertRequest req;
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    req.set_allow_overwrite(allow_overwrite);
    return channel_.insert_pipelined(req, timeout);
  }

  absl::Status kv_flush(absl::Duration timeout) override { return channel_.flush(timeout); }

 protected:
  absl::Status unary(Rpc rpc, std::string_view api, const google::protobuf::MessageLite& req,
                     google::protobuf::MessageLite* resp, absl::Duration timeout, bool wait_for_ready) override {
    const absl::Time deadline = absl::Now() + timeout;
    absl::Duration backoff = absl::Milliseconds(20);
    while (true) {
      absl::Status s = channel_.call(rpc, req, resp, std::max(absl::ZeroDuration(), deadline - absl::Now()));
      if (s.ok()) return s;
      // wait_for_ready: a coordinator that is starting again refuses connections for a while.
      if (!wait_for_ready || s.code() != absl::StatusCode::kUnavailable || absl::Now() + backoff >= deadline) {
        return as_call(api, s);
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(500));
    }
  }

 private:
  FastPathChannel channel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationClient>> make_fast_path_client(const std::string& address) {
  if (address_host(address).empty() || address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("[coordination] expected the coordinator address as host:port, found '", address, "'"));
  }
  return std::unique_ptr<CoordinationClient>(new FastPathCoordinationClient(address));
}

}  // namespace mcx::distributed
