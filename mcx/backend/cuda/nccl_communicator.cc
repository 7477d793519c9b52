#include "mcx/backend/cuda/nccl_communicator.h"

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/collectives/collective_group.h"
#include "mcx/core/config.h"
#include "mcx/core/error.h"

namespace mcx::cuda {
namespace {

const Flag<std::string> kGpuCollectivesFlag(
    "MCX_GPU_COLLECTIVES", "auto",
    "collectives of GPU arrays: nccl (device to device through NCCL, loaded at run time), staging (through pinned "
    "host memory over the data plane), auto: NCCL where every member of the group can run it (NCCL found, "
    "distinct GPUs, the same NCCL version; not with MCX_DATA_PLANE_TLS=1 or MCX_DETERMINISTIC_REDUCTIONS=1 for "
    "reductions), else staging",
    one_of({"auto", "nccl", "staging"}));

// What each member publishes in the first exchange (fixed size: the exchange moves bytes).
struct Offer {
  char magic[8] = {'m', 'c', 'x', 'n', 'c', 'c', 'l', '1'};
  int32_t nccl_version = 0;  // 0: this member cannot run NCCL (why: `reason`)
  int32_t mode = 0;          // 0 auto, 1 nccl, 2 staging
  int32_t deterministic = 0; // MCX_DETERMINISTIC_REDUCTIONS=1: reductions stay on staging
  unsigned char uuid[16] = {};
  char reason[160] = {};     // why not, for the message on every member
};

int mode_code(const std::string& mode) { return mode == "nccl" ? 1 : mode == "staging" ? 2 : 0; }

std::string uuid_string(const unsigned char* u) {
  std::string s;
  for (int i = 0; i < 16; ++i) absl::StrAppend(&s, absl::Hex(u[i], absl::kZeroPad2), i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
  return s;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kProd: return ncclProd;
  }
  return ncclSum;
}

// Why the group cannot run NCCL given everyone's offers (empty: it can), the same on every member.
std::string staging_reason(const std::vector<Offer>& offers, const std::string& group) {
  std::set<std::string> gpus;
  for (size_t r = 0; r < offers.size(); ++r) {
    const Offer& o = offers[r];
    if (o.mode == 2) return absl::StrCat("member ", r, " asked for staging (MCX_GPU_COLLECTIVES=staging)");
    if (o.nccl_version == 0) return absl::StrCat("member ", r, " cannot run NCCL: ", std::string(o.reason));
    if (o.nccl_version != offers[0].nccl_version) {
      return absl::StrCat("members run different NCCL versions (", nccl_version_string(offers[0].nccl_version),
                          " and ", nccl_version_string(o.nccl_version), ")");
    }
    if (!gpus.insert(uuid_string(o.uuid)).second) {
      return absl::StrCat("two members of ", group, " share GPU ", uuid_string(o.uuid),
                          " (NCCL runs one rank per GPU)");
    }
  }
  return "";
}

// How long a remote error waits for the coordination service to name the failed process (see health()).
constexpr absl::Duration kFailureAttribution = absl::Milliseconds(500);

}  // namespace

absl::StatusOr<std::string> gpu_collectives_mode() { return kGpuCollectivesFlag.get(); }

std::optional<ncclDataType_t> nccl_reduction_type(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kBool:
      if (op == ReduceOp::kMax || op == ReduceOp::kMin) return ncclUint8;
      return std::nullopt;
    case DType::kInt8: return ncclInt8;
    case DType::kInt16: return std::nullopt;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kUInt8: return ncclUint8;
    case DType::kUInt32: return ncclUint32;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
  }
  return std::nullopt;
}

absl::StatusOr<NcclCommunicator::Created> NcclCommunicator::create(const CudaDevice& device, Communicator& host,
                                                                   absl::Time deadline) {
  MCX_ASSIGN_OR_RETURN(const std::string mode, gpu_collectives_mode());
  MCX_ASSIGN_OR_RETURN(const bool tls, kDataPlaneTlsFlag.get());
  MCX_ASSIGN_OR_RETURN(const bool deterministic, kDeterministicReductionsFlag.get());
  Offer mine;
  mine.mode = mode_code(mode);
  mine.deterministic = deterministic ? 1 : 0;
  std::memcpy(mine.uuid, device.info().uuid.data(), sizeof(mine.uuid));
  absl::StatusOr<const NcclApi*> api = nccl();
  std::string cannot;
  if (!api.ok()) {
    cannot = std::string(api.status().message());
  } else if (tls && mode == "auto") {
    cannot = "MCX_DATA_PLANE_TLS=1 (NCCL's traffic is neither encrypted nor authenticated)";
  } else {
    mine.nccl_version = (*api)->version;
  }
  std::strncpy(mine.reason, cannot.c_str(), sizeof(mine.reason) - 1);
  const int n = host.size();
  std::vector<Offer> offers(static_cast<size_t>(n));
  MCX_RETURN_IF_ERROR(host.all_gather(&mine, offers.data(), sizeof(Offer), deadline));
  for (const Offer& o : offers) {
    if (std::memcmp(o.magic, mine.magic, sizeof(mine.magic)) != 0) {
      return absl::InternalError(absl::StrCat("[nccl] ", host.description(),
                                              ": a member sent something other than an NCCL offer"));
    }
  }
  Created created;
  created.staging_reason = staging_reason(offers, host.description());
  if (!created.staging_reason.empty()) {
    if (mode == "nccl") {
      return absl::FailedPreconditionError(absl::StrCat("[nccl] MCX_GPU_COLLECTIVES=nccl but ", host.description(),
                                                        " cannot use NCCL: ", created.staging_reason));
    }
    return created;
  }
  // Rank 0's unique id, to everyone over the same group.
  ncclUniqueId id{};
  if (host.rank() == 0) MCX_RETURN_IF_ERROR(nccl_status(**api, (*api)->ncclGetUniqueId(&id), "ncclGetUniqueId"));
  std::vector<ncclUniqueId> ids(static_cast<size_t>(n));
  MCX_RETURN_IF_ERROR(host.all_gather(&id, ids.data(), sizeof(ncclUniqueId), deadline));
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(**api, device, host, host.rank(), n));
  for (const Offer& o : offers) comm->reductions_ = comm->reductions_ && o.deterministic == 0;
  MCX_RETURN_IF_ERROR(comm->init(ids[0], deadline));
  created.comm = std::move(comm);
  return created;
}

NcclCommunicator::~NcclCommunicator() {
  // Abort never waits for the peers (a finalize would, and they may be gone).
  if (comm_ != nullptr) api_.ncclCommAbort(comm_);
}

std::string NcclCommunicator::description() const {
  return absl::StrCat("NCCL ", nccl_version_string(api_.version), " communicator of ", host_.description());
}

absl::Status NcclCommunicator::init(const ncclUniqueId& id, absl::Time deadline) {
  MCX_RETURN_IF_ERROR(device_.make_current());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = api_.ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = nccl_status(api_, r, absl::StrCat("ncclCommInitRankConfig (rank ", rank_, " of ", size_, ")"));
    if (comm_ != nullptr) api_.ncclCommAbort(comm_);
    comm_ = nullptr;
    return s;
  }
  return settle("ncclCommInitRankConfig", deadline);
}

absl::Status NcclCommunicator::group_aborted(const char* what) const {
  absl::Status group = host_.group_failure();
  if (group.ok()) return group;
  return with_message(group, absl::StrCat("[nccl] ", what, " on ", description(), " aborted: ", group.message()));
}

absl::Status NcclCommunicator::health(const char* what) const {
  MCX_RETURN_IF_ERROR(group_aborted(what));
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = api_.ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return nccl_status(api_, r, absl::StrCat(what, ": ncclCommGetAsyncError"));
  if (state != ncclSuccess && state != ncclInProgress) {
    const absl::Status error = nccl_status(api_, state, absl::StrCat(what, " on ", description()));
    // A peer died or aborted: NCCL knows only that a connection broke. The coordination service says which
    // process failed (the host group's failure, with its process-failure mark) moments later, so give it a
    // short while to, and return the named failure rather than an anonymous one.
    if (state == ncclRemoteError || state == ncclSystemError) {
      const absl::Time until = absl::Now() + kFailureAttribution;
      while (absl::Now() < until) {
        MCX_RETURN_IF_ERROR(group_aborted(what));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return error;
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::fail(const absl::Status& why) {
  if (!aborted_) {
    aborted_ = true;
    failure_ = why;
    if (comm_ != nullptr) api_.ncclCommAbort(comm_);
    comm_ = nullptr;
    host_.abort_group(why);
  }
  return why;
}

absl::Status NcclCommunicator::settle(const char* what, absl::Time deadline) {
  absl::Duration pause = absl::Microseconds(2);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = api_.ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return fail(nccl_status(api_, r, absl::StrCat(what, ": ncclCommGetAsyncError")));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return fail(nccl_status(api_, state, absl::StrCat(what, " on ", description())));
    absl::Status group = group_aborted(what);
    if (!group.ok()) return fail(group);
    if (absl::Now() >= deadline) {
      return fail(absl::DeadlineExceededError(absl::StrCat("[nccl] ", what, " on ", description(),
                                                           ": not finished by the deadline (MCX_DEVICE_TIMEOUT_S)")));
    }
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(pause));
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

absl::Status NcclCommunicator::run(const char* what, const std::function<ncclResult_t()>& enqueue,
                                   absl::Time deadline) {
  if (aborted_) return group_unusable(what, description(), failure_);
  MCX_RETURN_IF_ERROR(device_.make_current());
  const ncclResult_t r = enqueue();
  if (r != ncclSuccess && r != ncclInProgress) return fail(nccl_status(api_, r, absl::StrCat(what, " on ", description())));
  if (r == ncclInProgress) MCX_RETURN_IF_ERROR(settle(what, deadline));
  absl::Status done = device_.synchronize_unless(deadline, [&] { return health(what); });
  if (done.ok()) return done;
  if (absl::IsDeadlineExceeded(done)) {
    done = absl::DeadlineExceededError(absl::StrCat("[nccl] ", what, " on ", description(),
                                                    ": not finished by the deadline (MCX_DEVICE_TIMEOUT_S)"));
  }
  return fail(done);
}

absl::Status NcclCommunicator::all_reduce(uint64_t in, uint64_t out, int64_t count, ncclDataType_t type, ReduceOp op,
                                          absl::Time deadline) {
  return run("all_reduce", [&] {
    return api_.ncclAllReduce(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                              static_cast<size_t>(count), type, nccl_op(op), comm_, device_.stream());
  }, deadline);
}

absl::Status NcclCommunicator::all_gather(uint64_t in, uint64_t out, int64_t bytes, absl::Time deadline) {
  return run("all_gather", [&] {
    return api_.ncclAllGather(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                              static_cast<size_t>(bytes), ncclUint8, comm_, device_.stream());
  }, deadline);
}

absl::Status NcclCommunicator::reduce_scatter(uint64_t in, uint64_t out, int64_t count, ncclDataType_t type,
                                              ReduceOp op, absl::Time deadline) {
  return run("reduce_scatter", [&] {
    return api_.ncclReduceScatter(reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                                  static_cast<size_t>(count), type, nccl_op(op), comm_, device_.stream());
  }, deadline);
}

absl::Status NcclCommunicator::all_to_all(uint64_t in, uint64_t out, int64_t bytes, absl::Time deadline) {
  return run("all_to_all", [&] {
    ncclResult_t r = api_.ncclGroupStart();
    for (int peer = 0; peer < size_ && (r == ncclSuccess || r == ncclInProgress); ++peer) {
      const uint64_t offset = static_cast<uint64_t>(peer) * static_cast<uint64_t>(bytes);
      r = api_.ncclSend(reinterpret_cast<const void*>(in + offset), static_cast<size_t>(bytes), ncclUint8, peer,
                        comm_, device_.stream());
      if (r == ncclSuccess || r == ncclInProgress) {
        r = api_.ncclRecv(reinterpret_cast<void*>(out + offset), static_cast<size_t>(bytes), ncclUint8, peer, comm_,
                          device_.stream());
      }
    }
    const ncclResult_t end = api_.ncclGroupEnd();
    return r == ncclSuccess || r == ncclInProgress ? end : r;
  }, deadline);
}

absl::Status NcclCommunicator::permute(uint64_t in, uint64_t out, int64_t bytes, int send_to, int recv_from,
                                       absl::Time deadline) {
  return run("collective_permute", [&] {
    ncclResult_t r = api_.ncclGroupStart();
    if ((r == ncclSuccess || r == ncclInProgress) && send_to >= 0) {
      r = api_.ncclSend(reinterpret_cast<const void*>(in), static_cast<size_t>(bytes), ncclUint8, send_to, comm_,
                        device_.stream());
    }
    if ((r == ncclSuccess || r == ncclInProgress) && recv_from >= 0) {
      r = api_.ncclRecv(reinterpret_cast<void*>(out), static_cast<size_t>(bytes), ncclUint8, recv_from, comm_,
                        device_.stream());
    }
    const ncclResult_t end = api_.ncclGroupEnd();
    return r == ncclSuccess || r == ncclInProgress ? end : r;
  }, deadline);
}

}  // namespace mcx::cuda
