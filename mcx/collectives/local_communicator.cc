#include "mcx/collectives/local_communicator.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/collectives/collective_call.h"
#include "mcx/collectives/member_rendezvous.h"
#include "mcx/collectives/reduce_kernels.h"
#include "mcx/core/error.h"

namespace mcx {

namespace {

using Kind = CollectiveKind;
using Call = CollectiveCall;

absl::Status negative(const char* what, const char* arg, int64_t v) {
  return absl::InvalidArgumentError(absl::StrCat("[", what, "] ", arg, " is ", v, ", expected >= 0"));
}

}  // namespace

// Shared by the members. Every collective is one or two rounds of the rendezvous: members publish their call
// and wait until all have arrived (phase 1, whose completion checks the calls and allocates the shared result);
// then each computes its part reading the others' inputs; a second round (phase 2) keeps inputs and the shared
// result alive until everyone is done with them.
struct LocalGroup::State {
  explicit State(MemberRendezvous::Options o) : meeting(std::move(o)) {}

  MemberRendezvous meeting;
  // Written by phase 1's completion, read by the members until phase 2 (the round protocol keeps them apart).
  std::vector<char> scratch;  // a reduction's shared result (size count * dtype)
  Buffer shared_result;       // all_reduce_shared's result of the round in progress

  int size() const { return meeting.size(); }
  const std::string& description() const { return meeting.description(); }

  // Phase 1 (publishing this member's call; the completion checks every call) or phase 2 (call == nullptr).
  absl::Status rendezvous(int rank, const char* what, absl::Time deadline, const Call* publish) {
    if (publish == nullptr) return meeting.arrive(rank, what, deadline, nullptr, nullptr);
    return meeting.arrive(rank, what, deadline, publish,
                          [this, what](const std::vector<Call>& calls) { return complete_phase_one(calls, what); });
  }

  absl::Status complete_phase_one(const std::vector<Call>& calls, const char* what) {
    MCX_RETURN_IF_ERROR(meeting.check_calls(calls, what, size()));
    if (calls[0].kind == Kind::kPermute) {
      for (int r = 0; r < size(); ++r) {  // every send meets its receive (all members are here to check)
        const Call& c = calls[r];
        if (c.send_to >= 0 && calls[c.send_to].recv_from != r)
          return absl::InvalidArgumentError(absl::StrCat(
              "[permute] ", meeting.name(r), " sends to ", meeting.name(c.send_to), " which receives from ",
              calls[c.send_to].recv_from, " in ", description()));
        if (c.recv_from >= 0 && calls[c.recv_from].send_to != r)
          return absl::InvalidArgumentError(absl::StrCat(
              "[permute] ", meeting.name(r), " receives from ", meeting.name(c.recv_from), " which sends to ",
              calls[c.recv_from].send_to, " in ", description()));
      }
    }
    if (calls[0].kind == Kind::kAllReduce && calls[0].shared) {
      // A fresh buffer per round: members keep it as their result after the round.
      shared_result = Buffer::uninitialized(calls[0].dtype, {calls[0].count});
    } else if (calls[0].kind == Kind::kAllGather && calls[0].shared) {
      const int64_t w = static_cast<int64_t>(dtype_size(calls[0].dtype));
      shared_result = Buffer::uninitialized(calls[0].dtype, {calls[0].count * size() / w});
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

  int size() const override { return s_->size(); }
  int rank() const override { return rank_; }
  std::string description() const override { return s_->description(); }
  absl::Status group_failure() const override { return s_->meeting.failure(); }
  void abort_group(const absl::Status& why) override { s_->meeting.abort(why); }

  absl::Status all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                          absl::Time deadline) override {
    if (count < 0) return negative("all_reduce", "count", count);
    Call c{Kind::kAllReduce, count, dtype, op, -1, -1, in};
    if (s_->size() == 1) return single(c, out, count * static_cast<int64_t>(dtype_size(dtype)));
    absl::Status st = s_->rendezvous(rank_, "all_reduce", deadline, &c);
    if (!st.ok()) return st;
    // This member's slice of the elements, reduced in rank order into the shared result.
    const int64_t lo = count * rank_ / s_->size(), hi = count * (rank_ + 1) / s_->size();
    const size_t w = dtype_size(dtype);
    reduce_into(dtype, inputs(), lo, hi - lo, op, s_->scratch.data() + lo * w);
    st = s_->rendezvous(rank_, "all_reduce", deadline, nullptr);
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
    if (s_->size() == 1) return Communicator::all_reduce_shared(in, dims, dtype, op, deadline);
    Call c{Kind::kAllReduce, count, dtype, op, -1, -1, in, /*shared=*/true};
    absl::Status st = s_->rendezvous(rank_, "all_reduce", deadline, &c);
    if (!st.ok()) return st;
    // Read before the next round can start: that needs this member at its first rendezvous.
    Buffer result = s_->shared_result;
    const int64_t lo = count * rank_ / s_->size(), hi = count * (rank_ + 1) / s_->size();
    const size_t w = dtype_size(dtype);
    reduce_into(dtype, inputs(), lo, hi - lo, op, static_cast<char*>(result.mutable_data()) + lo * w);
    st = s_->rendezvous(rank_, "all_reduce", deadline, nullptr);
    if (!st.ok()) return st;
    return result.reshaped(dims);
  }

  absl::StatusOr<Buffer> all_gather_shared(const void* in, int64_t bytes, const std::vector<int64_t>& dims,
                                           DType dtype, absl::Time deadline) override {
    if (bytes < 0) return negative("all_gather", "bytes", bytes);
    if (s_->size() == 1) return Communicator::all_gather_shared(in, bytes, dims, dtype, deadline);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (n * static_cast<int64_t>(dtype_size(dtype)) != bytes * s_->size()) {
      return absl::InvalidArgumentError(absl::StrCat("[all_gather] result of ", n, " elements does not hold ",
                                                     s_->size(), " blocks of ", bytes, " bytes"));
    }
    if (bytes % static_cast<int64_t>(dtype_size(dtype)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("[all_gather] ", bytes, " bytes is not a whole number of ",
                                                     std::string(dtype_short_name(dtype)), " elements"));
    }
    Call c{Kind::kAllGather, bytes, dtype, ReduceOp::kSum, -1, -1, in, /*shared=*/true};
    absl::Status st = s_->rendezvous(rank_, "all_gather", deadline, &c);
    if (!st.ok()) return st;
    Buffer result = s_->shared_result;  // read before the next round can start (see all_reduce_shared)
    copy(static_cast<char*>(result.mutable_data()) + rank_ * bytes, static_cast<const char*>(in), bytes);
    st = s_->rendezvous(rank_, "all_gather", deadline, nullptr);
    if (!st.ok()) return st;
    return result.reshaped(dims);
  }

  absl::Status all_gather(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    if (bytes < 0) return negative("all_gather", "bytes", bytes);
    Call c{Kind::kAllGather, bytes, DType::kUInt8, ReduceOp::kSum, -1, -1, in};
    if (s_->size() == 1) return single(c, out, bytes);
    return exchange(c, "all_gather", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes * s_->size());
      for (int r = 0; r < s_->size(); ++r) copy(tmp.data() + r * bytes, ins[r], bytes);
    }, out);
  }

  absl::Status reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                              absl::Time deadline) override {
    if (count < 0) return negative("reduce_scatter", "count", count);
    Call c{Kind::kReduceScatter, count, dtype, op, -1, -1, in};
    const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
    if (s_->size() == 1) return single(c, out, bytes);
    return exchange(c, "reduce_scatter", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes);
      reduce_into(dtype, ins, count * rank_, count, op, tmp.data());
    }, out);
  }

  absl::Status all_to_all(const void* in, void* out, int64_t bytes, absl::Time deadline) override {
    if (bytes < 0) return negative("all_to_all", "bytes", bytes);
    Call c{Kind::kAllToAll, bytes, DType::kUInt8, ReduceOp::kSum, -1, -1, in};
    if (s_->size() == 1) return single(c, out, bytes);
    return exchange(c, "all_to_all", deadline, [&](const std::vector<const char*>& ins, std::vector<char>& tmp) {
      tmp.resize(bytes * s_->size());
      for (int r = 0; r < s_->size(); ++r) copy(tmp.data() + r * bytes, ins[r] + rank_ * bytes, bytes);
    }, out);
  }

  absl::Status permute(const void* in, void* out, int64_t bytes, int send_to, int recv_from,
                       absl::Time deadline) override {
    if (bytes < 0) return negative("permute", "bytes", bytes);
    Call c{Kind::kPermute, bytes, DType::kUInt8, ReduceOp::kSum, send_to, recv_from, in};
    if (s_->size() == 1) {
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
    if (s_->size() == 1) return single(c, nullptr, 0);
    return s_->rendezvous(rank_, "barrier", deadline, &c);
  }

 private:
  static void copy(char* dst, const char* src, int64_t n) {
    if (n > 0) std::memcpy(dst, src, n);
  }

  std::vector<const char*> inputs() const {
    std::vector<const char*> ins(s_->size());
    for (int r = 0; r < s_->size(); ++r) ins[r] = static_cast<const char*>(s_->meeting.calls()[r].in);
    return ins;
  }

  // Group of one: the result is the input (still fails once the group failed).
  absl::Status single(const Call& c, void* out, int64_t bytes) {
    MCX_RETURN_IF_ERROR(s_->meeting.usable(collective_kind_name(c.kind)));
    if (out && bytes > 0 && out != c.in) std::memmove(out, c.in, bytes);
    return absl::OkStatus();
  }

  // Phase 1, compute this member's result into a private buffer from everyone's inputs, phase 2 (all
  // inputs read), then write out (out may alias in).
  template <typename F>
  absl::Status exchange(const Call& c, const char* what, absl::Time deadline, F&& compute, void* out) {
    absl::Status st = s_->rendezvous(rank_, what, deadline, &c);
    if (!st.ok()) return st;
    std::vector<char> tmp;
    compute(inputs(), tmp);
    st = s_->rendezvous(rank_, what, deadline, nullptr);
    if (!st.ok()) return st;
    if (out && !tmp.empty()) std::memcpy(out, tmp.data(), tmp.size());
    return absl::OkStatus();
  }

  std::shared_ptr<LocalGroup::State> s_;
  int rank_;
};

}  // namespace

namespace {

MemberRendezvous::Options meeting_of(int size, std::vector<std::string> names) {
  MemberRendezvous::Options o;
  for (int r = 0; r < size; ++r) {
    o.names.push_back(r < static_cast<int>(names.size()) && !names[r].empty() ? std::move(names[r])
                                                                               : absl::StrCat("rank ", r));
  }
  o.description = absl::StrCat("local group {", absl::StrJoin(o.names, ","), "}");
  return o;
}

}  // namespace

LocalGroup::LocalGroup(int size, std::vector<std::string> member_names)
    // size < 1 breaks the documented precondition; a group of one is the harmless reading
    : state_(std::make_shared<State>(meeting_of(std::max(size, 1), std::move(member_names)))) {
  for (int r = 0; r < state_->size(); ++r) members_.push_back(std::make_unique<LocalCommunicator>(state_, r));
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return state_->size(); }

Communicator& LocalGroup::member(int rank) { return *members_.at(rank); }

bool LocalGroup::failed() const { return state_->meeting.failed(); }

absl::Status LocalGroup::failure() const { return state_->meeting.failure(); }

void LocalGroup::abort(const absl::Status& why) { state_->meeting.abort(why); }

}  // namespace mcx
