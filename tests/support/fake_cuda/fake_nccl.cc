// A stand-in NCCL for tests on machines without a GPU (built as libnccl.so.2 next to the stand-in driver, found
// through MCX_CUDA_LIBRARY_PATH, linked against that driver): the entry points mcx resolves (nccl_api.h), over
// the stand-in driver's "device memory" (host memory), between threads and processes of one machine.
//
// A communicator's ranks meet in a POSIX shared-memory segment named by the unique id: a header (ranks joined,
// a barrier counter, an "aborted" flag, a message counter pair per ordered pair of ranks) and one slot per rank
// (MCX_FAKE_NCCL_SLOT_MB, default 64). Each rank runs its operations on a worker thread of its own, in the order
// they were enqueued, so that calls return at once as NCCL's do: an operation holds its stream
// (mcx_fake_cuda_stream_hold) until it finished, and the stream answers "not ready" meanwhile. A collective:
// every rank writes its input into its slot, meets the others, reads what it needs from their slots (reductions
// in rank order, each step rounded to the type), meets them again. Sends and receives are point to point, as
// NCCL's: a send waits until the pair's previous message was taken, writes its block of the sender's slot
// and counts it; the receive waits for the count, copies the block and counts it taken.
// A rank that never arrives (a killed process) leaves the others waiting, as a real NCCL kernel waits, until
// ncclCommAbort; an aborted communicator marks the segment, and the other ranks' operations then fail with
// ncclRemoteError (NCCL sees the closed connections of a rank that aborted). Non-blocking communicators
// (config.blocking = 0) initialise on the worker: ncclCommGetAsyncError answers ncclInProgress until every rank
// joined. MCX_FAKE_NCCL_KILL_AT=N kills the process (SIGKILL) as its N-th collective starts, while its peers wait
// in theirs: a process dying inside an NCCL collective, for the abort tests. What it does not model: NCCL's
// algorithms and reduction order, NVLink, network transports, timing.
#include <cuda.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" void mcx_fake_cuda_stream_hold(CUstream s);
extern "C" void mcx_fake_cuda_stream_release(CUstream s);

namespace {

struct Header {
  std::atomic<int32_t> joined;
  std::atomic<int32_t> aborted;  // a rank aborted: the others' operations fail
  std::atomic<uint64_t> arrivals;
};

// Messages sent and taken between an ordered pair of ranks, after the header.
struct Mailbox {
  std::atomic<uint64_t> sent;
  std::atomic<uint64_t> taken;
};

size_t control_bytes(int nranks) {
  const size_t raw = sizeof(Header) + sizeof(Mailbox) * static_cast<size_t>(nranks) * static_cast<size_t>(nranks);
  return (raw + 4095) / 4096 * 4096;
}

size_t slot_bytes() {
  const char* mb = std::getenv("MCX_FAKE_NCCL_SLOT_MB");
  return static_cast<size_t>(mb != nullptr ? std::atoll(mb) : 64) << 20;
}

thread_local std::string last_error;

struct Comm {
  int nranks = 0;
  int rank = 0;
  bool blocking = true;
  std::string name;
  Header* header = nullptr;
  char* slots = nullptr;
  size_t slot = 0;
  size_t mapped = 0;
  uint64_t barriers = 0;  // passed by this rank (the worker's)
  std::atomic<ncclResult_t> state{ncclInProgress};
  std::atomic<bool> abort{false};
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::function<ncclResult_t()>> queue;  // guarded by mu
  bool stop = false;                                // guarded by mu
  std::thread worker;

  char* slot_of(int r) const { return slots + static_cast<size_t>(r) * slot; }
  Mailbox& mailbox(int from, int to) const {
    return reinterpret_cast<Mailbox*>(header + 1)[static_cast<size_t>(from) * static_cast<size_t>(nranks) +
                                                  static_cast<size_t>(to)];
  }

  // Waits until done() holds; ncclRemoteError once another rank aborted, ncclInternalError when this one is
  // aborting.
  ncclResult_t wait_until(const std::function<bool()>& done) {
    while (!done()) {
      if (abort.load()) return ncclInternalError;
      if (header->aborted.load() != 0) {
        last_error = "a peer aborted its communicator";
        return ncclRemoteError;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return ncclSuccess;
  }

  // Meets every rank.
  ncclResult_t barrier() {
    const uint64_t target = (++barriers) * static_cast<uint64_t>(nranks);
    header->arrivals.fetch_add(1);
    return wait_until([&] { return header->arrivals.load() >= target; });
  }

  void run_worker() {
    while (true) {
      std::function<ncclResult_t()> op;
      {
        std::unique_lock<std::mutex> lock(mu);
        ready.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
      }
      const ncclResult_t r = op();
      if (r != ncclSuccess && state.load() == ncclSuccess) state.store(r);
    }
  }

    // MCX_FAKE_NCCL_KILL_AT (see the top of this file), counted over the process's collectives.
  static void maybe_die() {
    static const long kill_at = [] {
      const char* v = std::getenv("MCX_FAKE_NCCL_KILL_AT");
      return v != nullptr ? std::atol(v) : 0L;
    }();
    static std::atomic<long> started{0};
    if (kill_at > 0 && started.fetch_add(1) + 1 == kill_at) raise(SIGKILL);
  }

  // Runs `op` on the worker, holding `stream` until it finished (a failed communicator skips it).
  ncclResult_t enqueue(cudaStream_t stream, std::function<ncclResult_t(Comm&)> op) {
    if (state.load() != ncclSuccess) return state.load() == ncclInProgress ? ncclInvalidUsage : state.load();
    auto s = reinterpret_cast<CUstream>(stream);
    mcx_fake_cuda_stream_hold(s);
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back([this, s, op = std::move(op)] {
      maybe_die();
      const ncclResult_t r = state.load() == ncclSuccess ? op(*this) : state.load();
      mcx_fake_cuda_stream_release(s);
      return r;
    });
    ready.notify_all();
    return ncclSuccess;
  }

  ncclResult_t join() {
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
      last_error = "shm_open failed";
      return ncclSystemError;
    }
    slot = slot_bytes();
    mapped = control_bytes(nranks) + slot * static_cast<size_t>(nranks);
    if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
      close(fd);
      last_error = "ftruncate failed";
      return ncclSystemError;
    }
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      last_error = "mmap failed";
      return ncclSystemError;
    }
    header = static_cast<Header*>(p);
    slots = static_cast<char*>(p) + control_bytes(nranks);
    if (header->joined.fetch_add(1) + 1 == nranks) shm_unlink(name.c_str());  // the last to join
    while (header->joined.load() < nranks) {
      if (abort.load()) return ncclInternalError;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return ncclSuccess;
  }
};

// Conversions for the 16-bit float types (round to nearest even).
float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float half_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
uint16_t float_to_half(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

template <typename T>
T apply(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclSum: return static_cast<T>(a + b);
    case ncclProd: return static_cast<T>(a * b);
    case ncclMax: return a < b ? b : a;
    case ncclMin: return b < a ? b : a;
    default: return a;
  }
}

template <typename T>
void reduce_typed(const Comm& c, size_t offset, size_t count, ncclRedOp_t op, void* out) {
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(c.slot_of(0) + offset)[i];
    for (int r = 1; r < c.nranks; ++r) acc = apply(op, acc, reinterpret_cast<const T*>(c.slot_of(r) + offset)[i]);
    o[i] = acc;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_16(const Comm& c, size_t offset, size_t count, ncclRedOp_t op, void* out) {
  auto* o = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) {
    uint16_t acc = reinterpret_cast<const uint16_t*>(c.slot_of(0) + offset)[i];
    for (int r = 1; r < c.nranks; ++r) {
      acc = FromFloat(apply(op, ToFloat(acc), ToFloat(reinterpret_cast<const uint16_t*>(c.slot_of(r) + offset)[i])));
    }
    o[i] = acc;
  }
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// out = op over the ranks' slots, elements [offset/size, +count) of each.
ncclResult_t reduce_slots(const Comm& c, size_t offset, size_t count, ncclDataType_t t, ncclRedOp_t op, void* out) {
  switch (t) {
    case ncclInt8: reduce_typed<int8_t>(c, offset, count, op, out); break;
    case ncclUint8: reduce_typed<uint8_t>(c, offset, count, op, out); break;
    case ncclInt32: reduce_typed<int32_t>(c, offset, count, op, out); break;
    case ncclUint32: reduce_typed<uint32_t>(c, offset, count, op, out); break;
    case ncclInt64: reduce_typed<int64_t>(c, offset, count, op, out); break;
    case ncclUint64: reduce_typed<uint64_t>(c, offset, count, op, out); break;
    case ncclFloat32: reduce_typed<float>(c, offset, count, op, out); break;
    case ncclFloat64: reduce_typed<double>(c, offset, count, op, out); break;
    case ncclFloat16: reduce_16<half_to_float, float_to_half>(c, offset, count, op, out); break;
    case ncclBfloat16: reduce_16<bf16_to_float, float_to_bf16>(c, offset, count, op, out); break;
    default: last_error = "unsupported data type"; return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// Where this rank's block of `count` elements starts in each slot (reduce-scatter).
size_t block_offset(const Comm& c, size_t count, ncclDataType_t t) {
  return count * type_size(t) * static_cast<size_t>(c.rank);
}

ncclResult_t too_big(size_t bytes, size_t slot) {
  last_error = "an operation of " + std::to_string(bytes) + " bytes exceeds the stand-in's slot of " +
               std::to_string(slot) + " (MCX_FAKE_NCCL_SLOT_MB)";
  return ncclInvalidArgument;
}

// The send/recv of one group call (ncclGroupStart .. ncclGroupEnd) on one communicator.
struct P2p {
  bool send = false;
  const void* in = nullptr;
  void* out = nullptr;
  size_t bytes = 0;
  int peer = 0;
  cudaStream_t stream = nullptr;
};
thread_local int group_depth = 0;
thread_local std::vector<std::pair<Comm*, P2p>> pending_p2p;

// The sends and receives of one group call, point to point: sends first (each into block `peer` of this rank's
// slot, once the pair's previous message was taken), then the receives.
ncclResult_t run_p2p(Comm& c, const std::vector<P2p>& ops) {
  const size_t block = c.slot / static_cast<size_t>(c.nranks);
  for (const P2p& p : ops) {
    if (p.bytes > block) return too_big(p.bytes, block);
    if (!p.send) continue;
    Mailbox& m = c.mailbox(c.rank, p.peer);
    const ncclResult_t r = c.wait_until([&] { return m.taken.load() == m.sent.load(); });
    if (r != ncclSuccess) return r;
    std::memcpy(c.slot_of(c.rank) + static_cast<size_t>(p.peer) * block, p.in, p.bytes);
    m.sent.fetch_add(1);
  }
  for (const P2p& p : ops) {
    if (p.send) continue;
    Mailbox& m = c.mailbox(p.peer, c.rank);
    const ncclResult_t r = c.wait_until([&] { return m.sent.load() > m.taken.load(); });
    if (r != ncclSuccess) return r;
    std::memcpy(p.out, c.slot_of(p.peer) + static_cast<size_t>(c.rank) * block, p.bytes);
    m.taken.fetch_add(1);
  }
  return ncclSuccess;
}

}  // namespace

extern "C" {
// NOLINTBEGIN(readability-identifier-naming): NCCL's names.
ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    default: return "internal error";
  }
}
const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> counter{0};
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "/mcx-fake-nccl-%d-%d-%lx", static_cast<int>(getpid()),
                counter.fetch_add(1), static_cast<unsigned long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks || id.internal[0] != '/') {
    last_error = "bad rank, size or unique id";
    return ncclInvalidArgument;
  }
  auto* c = new Comm();
  c->nranks = nranks;
  c->rank = rank;
  c->name.assign(id.internal, strnlen(id.internal, sizeof(id.internal)));
  c->blocking = config == nullptr || config->blocking != 0;
  *out = reinterpret_cast<ncclComm_t>(c);
  c->worker = std::thread([c] { c->run_worker(); });
  std::function<ncclResult_t()> join = [c] {
    const ncclResult_t r = c->join();
    c->state.store(r);
    return r;
  };
  if (c->blocking) return join();
  std::lock_guard<std::mutex> lock(c->mu);
  c->queue.push_back(std::move(join));
  c->ready.notify_all();
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  auto* c = reinterpret_cast<Comm*>(comm);
  *state = c->state.load();
  if (*state == ncclSuccess && c->header != nullptr && c->header->aborted.load() != 0) *state = ncclRemoteError;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  auto* c = reinterpret_cast<Comm*>(comm);
  if (c == nullptr) return ncclSuccess;
  c->abort.store(true);
  if (c->header != nullptr) c->header->aborted.store(1);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->stop = true;
    c->ready.notify_all();
  }
  c->worker.join();  // the waiting operation returns (abort); the queued ones run as failed, releasing streams
  if (c->header != nullptr) munmap(c->header, c->mapped);
  delete c;
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return ncclCommAbort(comm); }

}  // extern "C"

namespace {

// A reduction: every rank's `bytes` of input into its slot, then out = op over the ranks' slots of the `count`
// elements at `offset` (all of them for all-reduce, this rank's block for reduce-scatter).
ncclResult_t reduce(Comm* c, const void* in, size_t bytes, size_t offset, void* out, size_t count, ncclDataType_t t,
                    ncclRedOp_t op, cudaStream_t stream) {
  if (bytes > c->slot && c->slot != 0) return too_big(bytes, c->slot);
  return c->enqueue(stream, [=](Comm& k) {
    std::memcpy(k.slot_of(k.rank), in, bytes);
    ncclResult_t r = k.barrier();
    if (r != ncclSuccess) return r;
    r = reduce_slots(k, offset == SIZE_MAX ? block_offset(k, count, t) : offset, count, t, op, out);
    if (r != ncclSuccess) return r;
    return k.barrier();
  });
}

}  // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void* in, void* out, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return reduce(reinterpret_cast<Comm*>(comm), in, count * type_size(t), 0, out, count, t, op, stream);
}

ncclResult_t ncclReduceScatter(const void* in, void* out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  auto* c = reinterpret_cast<Comm*>(comm);
  return reduce(c, in, count * type_size(t) * static_cast<size_t>(c->nranks), SIZE_MAX, out, count, t, op, stream);
}

ncclResult_t ncclAllGather(const void* in, void* out, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
  auto* c = reinterpret_cast<Comm*>(comm);
  const size_t bytes = count * type_size(t);
  if (bytes > c->slot && c->slot != 0) return too_big(bytes, c->slot);
  return c->enqueue(stream, [=](Comm& k) {
    std::memcpy(k.slot_of(k.rank), in, bytes);
    ncclResult_t r = k.barrier();
    if (r != ncclSuccess) return r;
    for (int q = 0; q < k.nranks; ++q) std::memcpy(static_cast<char*>(out) + static_cast<size_t>(q) * bytes, k.slot_of(q), bytes);
    return k.barrier();
  });
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* in, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (group_depth == 0) {
    last_error = "the stand-in runs send and receive inside ncclGroupStart/ncclGroupEnd only";
    return ncclInvalidUsage;
  }
  pending_p2p.push_back({reinterpret_cast<Comm*>(comm), P2p{true, in, nullptr, count * type_size(t), peer, stream}});
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* out, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (group_depth == 0) {
    last_error = "the stand-in runs send and receive inside ncclGroupStart/ncclGroupEnd only";
    return ncclInvalidUsage;
  }
  pending_p2p.push_back({reinterpret_cast<Comm*>(comm), P2p{false, nullptr, out, count * type_size(t), peer, stream}});
  return ncclSuccess;
}

// Each communicator's sends and receives of the group run as one operation on its worker.
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<std::pair<Comm*, P2p>> ops = std::move(pending_p2p);
  pending_p2p.clear();
  std::vector<Comm*> comms;
  for (const auto& [c, p] : ops) {
    if (std::find(comms.begin(), comms.end(), c) == comms.end()) comms.push_back(c);
  }
  for (Comm* c : comms) {
    std::vector<P2p> mine;
    for (const auto& [k, p] : ops) {
      if (k == c) mine.push_back(p);
    }
    const ncclResult_t r = c->enqueue(mine.front().stream, [mine](Comm& k) { return run_p2p(k, mine); });
    if (r != ncclSuccess) return r;
  }
  return ncclSuccess;
}
// NOLINTEND(readability-identifier-naming)
}
