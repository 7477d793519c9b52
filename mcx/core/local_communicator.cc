#include "mcx/core/local_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/collective_call.h"
#include "mcx/core/reduce_kernels.h"

namespace mcx {

namespace {

using Kind = CollectiveKind;
using Call = CollectiveCall;

absl::Status negative(const char* what, const char* arg, int64_t v) {
  return absl::InvalidArgumentError(absl::StrCat("[", what, "] ", arg, " is ", v, ", expected >= 0"));
}

}  // namespace

// Shared by the members. Every collective is one or two rendezvous: members publish their Call and
// wait until all have arrived (phase 1); then each computes its part reading the others' inputs; a
// second rendezvous (phase 2) keeps inputs and the shared result alive until everyone is done with
// them. A round ends when the last member arrives, which advances `generation`.
struct LocalGroup::State {
  int size = 1;
  std::vector<std::string> names;

  std::mutex mu;
  std::condition_variable cv;
  uint64_t generation = 0;           // completed rendezvous
  std::vector<bool> arrived;         // for the rendezvous in progress
  int num_arrived = 0;
  std::vector<Call> calls;           // per rank, valid from phase 1 to phase 2 of one collective
  absl::Status round_status;         // outcome of the last completed rendezvous (mismatch)
  absl::Status poison;               // first error; every later call fails with it
  std::vector<char> scratch;         // a reduction's shared result (size count * dtype)
  Buffer shared_result;              // all_reduce_shared's result of the round in progress

  std::string member_name(int r) const {
    return names.empty() || names[r].empty() ? absl::StrCat("rank ", r) : names[r];
  }
  std::string description() const {
    std::vector<std::string> n;
    for (int r = 0; r < size; ++r) n.push_back(member_name(r));
    return absl::StrCat("local group {", absl::StrJoin(n, ","), "}");
  }

  absl::Status aborted(const char* what) const {
    return absl::AbortedError(absl::StrCat("[", what, "] ", description(),
                                           " is unusable after an earlier error: ", poison.message()));
  }

  // Waits until every member arrived at this rendezvous. `publish` (under the lock, before arriving)
  // records this member's call; `check` (under the lock, by the last member) may fail the round.
  absl::Status rendezvous(int rank, const char* what, absl::Time deadline, const Call* publish, bool check) {
    std::unique_lock<std::mutex> lk(mu);
    if (!poison.ok()) return aborted(what);
    if (publish) calls[rank] = *publish;
    const uint64_t gen = generation;
    arrived[rank] = true;
    if (++num_arrived == size) {
      round_status = check ? check_calls(what) : absl::OkStatus();
      if (!round_status.ok()) poison = round_status;
      std::fill(arrived.begin(), arrived.end(), false);
      num_arrived = 0;
      ++generation;
      cv.notify_all();
      return round_status;
    }
    while (generation == gen && poison.ok()) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        std::vector<std::string> missing;
        for (int r = 0; r < size; ++r)
          if (!arrived[r]) missing.push_back(member_name(r));
        poison = absl::DeadlineExceededError(
            absl::StrCat("[", what, "] ", description(), ": deadline exceeded on ", member_name(rank),
                         " waiting for ", absl::StrJoin(missing, ", "), " (", missing.size(), " of ", size,
                         " members had not arrived)"));
        cv.notify_all();
        return poison;
      }
      // Chunked waits: an infinite deadline never reaches the chrono conversion.
      cv.wait_for(lk, absl::ToChronoNanoseconds(std::min(left, absl::Seconds(1))));
    }
    if (generation != gen) return round_status;
    return poison.code() == absl::StatusCode::kDeadlineExceeded ? poison : aborted(what);
  }

  absl::Status check_calls(const char* what) {
    for (int r = 1; r < size; ++r) {
      if (!calls[r].agrees_with(calls[0]))
        return absl::InvalidArgumentError(absl::StrCat(
            "[", what, "] arguments differ between members of ", description(), ": ", member_name(0), " called ",
            calls[0].to_string(), ", ", member_name(r), " called ", calls[r].to_string()));
    }
    if (calls[0].kind == Kind::kPermute) {
      for (int r = 0; r < size; ++r) {
        const Call& c = calls[r];
        if (c.send_to < -1 || c.send_to >= size || c.recv_from < -1 || c.recv_from >= size)
          return absl::InvalidArgumentError(absl::StrCat("[permute] ", member_name(r), " of ", description(),
                                                         " called ", c.to_string(), ", expected ranks in [-1, ",
                                                         size, ")"));
        if (c.send_to >= 0 && calls[c.send_to].recv_from != r)
          return absl::InvalidArgumentError(absl::StrCat(
              "[permute] ", member_name(r), " sends to ", member_name(c.send_to), " which receives from ",
              calls[c.send_to].recv_from, " in ", description()));
        if (c.recv_from >= 0 && calls[c.recv_from].send_to != r)
          return absl::InvalidArgumentError(absl::StrCat(
              "[permute] ", member_name(r), " receives from ", member_name(c.recv_from), " which sends to ",
              calls[c.recv_from].send_to, " in ", description()));
      }
    }
    if (calls[0].kind == Kind::kAllReduce && calls[0].shared) {
      // A fresh buffer per round: members keep it as their result after the round.
      shared_result = Buffer::uninitialized(calls[0].dtype, {calls[0].count});
    } else if (calls[0].kind == Kind::kAllGather && calls[0].shared) {
      const int64_t w = static_cast<int64_t>(dtype_size(calls[0].dtype));
      shared_result = Buffer::uninitialized(calls[0].dtype, {calls[0].count * size / w});
    } else if (calls[0].kind == Kind::kAllReduce) {
      scratch.resize(static_cast<size_t>(calls[0].count) * dtype_size(calls[0].dtype));
    }
    return absl::OkStatus();
  }
};

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}

  int size() const override { return s_->size; }
  int rank() const override { return rank_; }
  std::string description() const override { return s_->description(); }

  absl::Status all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                          absl::Time deadline) override {
    if (count < 0) return negative("all_reduce", "count", count);
    Call c{Kind::kAllReduce, count, dtype, op, -1, -1, in};
    if (s_->size == 1) return single(c, out, count * static_cast<int64_t>(dtype_size(dtype)));
    absl::Status st = s_->rendezvous(rank_, "all_reduce", deadline, &c, true);
    if (!st.ok()) return st;
    // This member's slice of the elements, reduced in rank order into the shared result.
    const int64_t lo = count * rank_ / s_->size, hi = count * (rank_ + 1) / s_->size;
    const size_t w = dtype_size(dtype);
    reduce_into(dtype, inputs(), lo, hi - lo, op, s_->scratch.data() + lo * w);
    st = s_->rendezvous(rank_, "all_reduce", deadline, nullptr, false);
    if (!st.ok()) return st;
    if (count > 0) std::memcpy(out, s_->scratch.data(), count * w);
    // The next collective's first rendezvous ensures every member copied before scratch is reused.
    return absl::OkStatus();
  }

  absl::StatusOr<Buffer> all_reduce_shared(const void* in, const std::vector<int64_t>& dims, DType dtype,
                                           ReduceOp op, absl::Time deadline) override {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    if (count < 0) return negative("all_reduce", "count", count);
    if (s_->size == 1) return Communicator::all_reduce_shared(in, dims, dtype, op, deadline);
    Call c{Kind::kAllReduce, count, dtype, op, -1, -1, in, /*shared=*/true};
    absl::Status st = s_->rendezvous(rank_, "all_reduce", deadline, &c, true);
    if (!st.ok()) return st;
    // Read before the next round can start: that needs this member at its first rendezvous.
    Buffer result = s_->shared_result;
    const int64_t lo = count * rank_ / s_->size, hi = count * (rank_ + 1) / s_->size;
    const size_t w = dtype_size(dtype);
    reduce_into(dtype, inputs(), lo, hi - lo, op, static_cast<char*>(result.mutable_data()) + lo * w);
    st = s_->rendezvous(rank_, "all_reduce", deadline, nullptr, false);
    if (!st.ok()) return st;
    return result.reshaped(dims);
  }

  absl::StatusOr<Buffer> all_gather_shared(const void* in, int64_t bytes, const std::vector<int64_t>& dims,
                                           DType dtype, absl::Time deadline) override {
    if (bytes < 0) return negative("all_gather", "bytes", bytes);
    if (s_->size == 1) return Communicator::all_gather_shared(in, bytes, dims, dtype, deadline);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (n * static_cast<int64_t>(dtype_size(dtype)) != bytes * s_->size) {
      return absl::InvalidArgumentError(absl::StrCat("[all_gather] result of ", n, " elements does not hold ",
                                                     s_->size, " blocks of ", bytes, " bytes"));
    }
    if (bytes % static_cast<int64_t>(dtype_size(dtype)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("[all_gather] ", bytes, " bytes is not a whole number of ",
                                                     std::string(dtype_short_name(dtype)), " elements"));
    }
    Call c{Kind::kAllGather, bytes, dtype, ReduceOp::kSum, -1, -1, in, /*shared=*/true};
    absl::Status st = s_->rendezvous(rank_, "all_gather", deadline, &c, true);
    if (!st.ok()) return st;
    Buffer result = s_->shared_result;  // read before the next round can start (see all_reduce_shared)
    copy(static_cast<char*>(result.mutable_data()) + rank_ * bytes, static_cast<const char*>(in), bytes);
    st = s_->rendezvous(rank_, "all_gather", deadline, nullptr, false);
    if (!st.ok()) return st;
    return result.reshaped(dims);
  }

  absl::Status all_gather(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    if (bytes < 0) return negative("all_gather", "bytes", bytes);
    Call c{Kind::kAllGather, bytes, DType::kUInt8, ReduceOp::kSum, -1, -1, in};
    if (s_->size == 1) return single(c, out, bytes);
    return exchange(c, "all_gather", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes * s_->size);
      for (int r = 0; r < s_->size; ++r) copy(tmp.data() + r * bytes, ins[r], bytes);
    }, out);
  }

  absl::Status reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                              absl::Time deadline) override {
    if (count < 0) return negative("reduce_scatter", "count", count);
    Call c{Kind::kReduceScatter, count, dtype, op, -1, -1, in};
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
    if (s_->size == 1) return single(c, out, bytes);
    return exchange(c, "reduce_scatter", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes);
      reduce_into(dtype, ins, count * rank_, count, op, tmp.data());
    }, out);
  }

  absl::Status all_to_all(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    if (bytes < 0) return negative("all_to_all", "bytes", bytes);
    Call c{Kind::kAllToAll, bytes, DType::kUInt8, ReduceOp::kSum, -1, -1, in};
    if (s_->size == 1) return single(c, out, bytes);
    return exchange(c, "all_to_all", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes * s_->size);
      for (int r = 0; r < s_->size; ++r) copy(tmp.data() + r * bytes, ins[r] + rank_ * bytes, bytes);
    }, out);
  }

  absl::Status permute(const void* in, void* out, int64_t bytes, int send_to, int recv_from,
                       absl::Time deadline) override {
    if (bytes < 0) return negative("permute", "bytes", bytes);
    Call c{Kind::kPermute, bytes, DType::kUInt8, ReduceOp::kSum, send_to, recv_from, in};
    if (s_->size == 1) {
      if ((send_to != -1 && send_to != 0) || (recv_from != -1 && recv_from != 0) || (send_to == 0) != (recv_from == 0))
        return absl::InvalidArgumentError(absl::StrCat("[permute] ", description(), " has one member; called ",
                                                       c.to_string()));
      if (recv_from == 0) return single(c, out, bytes);
      return single(c, nullptr, 0);
    }
    if (recv_from < 0) {  // nothing to receive: only take part in the rendezvous
      return exchange(c, "permute", deadline, [](const std::vector<const char*>&, std::vector<char>& tmp) { tmp.clear(); },
                      nullptr);
    }
    return exchange(c, "permute", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes);
      copy(tmp.data(), ins[recv_from], bytes);
    }, out);
  }

  absl::Status barrier(absl::Time deadline) override {
    Call c{Kind::kBarrier, 0, DType::kUInt8, ReduceOp::kSum, -1, -1, nullptr};
    if (s_->size == 1) return single(c, nullptr, 0);
    return s_->rendezvous(rank_, "barrier", deadline, &c, true);
  }

 private:
  static void copy(char* dst, const char* src, int64_t n) {
    if (n > 0) std::memcpy(dst, src, n);
  }

  std::vector<const char*> inputs() const {
    std::vector<const char*> ins(s_->size);
    for (int r = 0; r < s_->size; ++r) ins[r] = static_cast<const char*>(s_->calls[r].in);
    return ins;
  }

  // Group of one: the result is the input (still fails once poisoned).
  absl::Status single(const Call& c, void* out, int64_t bytes) {
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      if (!s_->poison.ok()) return s_->aborted(collective_kind_name(c.kind));
    }
    if (out && bytes > 0 && out != c.in) std::memmove(out, c.in, bytes);
    return absl::OkStatus();
  }

  // Phase 1, compute this member's result into a private buffer from everyone's inputs, phase 2 (all
  // inputs read), then write out (out may alias in).
  template <typename F>
  absl::Status exchange(const Call& c, const char* what, absl::Time deadline, F&& compute, void* out) {
    absl::Status st = s_->rendezvous(rank_, what, deadline, &c, true);
    if (!st.ok()) return st;
    std::vector<char> tmp;
    compute(inputs(), tmp);
    st = s_->rendezvous(rank_, what, deadline, nullptr, false);
    if (!st.ok()) return st;
    if (out && !tmp.empty()) std::memcpy(out, tmp.data(), tmp.size());
    return absl::OkStatus();
  }

  std::shared_ptr<LocalGroup::State> s_;
  int rank_;
};

}  // namespace

LocalGroup::LocalGroup(int size, std::vector<std::string> member_names) : state_(std::make_shared<State>()) {
  if (size < 1) size = 1;  // documented precondition; a group of one is the harmless reading
  state_->size = size;
  member_names.resize(member_names.empty() ? 0 : size);
  state_->names = std::move(member_names);
  state_->arrived.assign(size, false);
  state_->calls.resize(size);
  for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<LocalCommunicator>(state_, r));
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return state_->size; }

Communicator& LocalGroup::member(int rank) { return *members_.at(rank); }

}  // namespace mcx
