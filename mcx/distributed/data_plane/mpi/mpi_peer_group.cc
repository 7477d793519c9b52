#include "mcx/distributed/data_plane/mpi/mpi_peer_group.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mcx/core/hash.h"

#ifdef MCX_HAVE_MPI
// The C API only (OpenMPI's mpi.h pulls in the deprecated C++ bindings otherwise, which need libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace mcx::distributed {

#ifndef MCX_HAVE_MPI

absl::Status init_mpi(int, int) {
  return absl::UnimplementedError(
      "[data plane] MCX_COLLECTIVES=mpi, but this build of mcx has no MPI (install Debian's libopenmpi-dev and "
      "rebuild); use gloo");
}
absl::StatusOr<std::unique_ptr<PeerGroup>> connect_mpi_peer_group(const PeerGroupRequest&) {
  return init_mpi(0, 0);
}
void finalize_mpi() {}

#else

namespace {

std::mutex g_mu;
bool g_we_initialized = false;  // guarded by g_mu

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

int mpi_tag(uint64_t tag) { return static_cast<int>(tag % 32768); }  // MPI_TAG_UB is at least 32767

class MpiPeerGroup final : public PeerGroup {
 public:
  MpiPeerGroup(MPI_Comm comm, std::vector<int> processes, int rank, std::string key)
      : comm_(comm), processes_(std::move(processes)), rank_(rank), key_(std::move(key)) {}
  ~MpiPeerGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int size() const override { return static_cast<int>(processes_.size()); }
  int rank() const override { return rank_; }
  std::string description() const override {
    return absl::StrCat("mpi group '", key_, "' of processes {", absl::StrJoin(processes_, ","), "}");
  }

  absl::Status exchange(std::span<const Send> sends, std::span<const Recv> recvs, absl::Time deadline,
                        const OnRecv& on_recv) override {
    if (failed_) return absl::AbortedError(absl::StrCat("[data plane] ", description(), " is unusable: ", first_error_));
    std::vector<MPI_Request> rreq, sreq;
    std::vector<int> rpeer, speer;
    std::vector<size_t> rindex;
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (recvs[i].bytes <= 0) continue;
      rreq.push_back(MPI_REQUEST_NULL);
      int rc = MPI_Irecv(recvs[i].data, static_cast<int>(recvs[i].bytes), MPI_BYTE, recvs[i].peer,
                         mpi_tag(recvs[i].tag), comm_, &rreq.back());
      if (rc != MPI_SUCCESS) return fail("posting a receive from", recvs[i].peer, mpi_error(rc), &rreq);
      rpeer.push_back(recvs[i].peer);
      rindex.push_back(i);
    }
    for (const Send& s : sends) {
      if (s.bytes <= 0) continue;
      sreq.push_back(MPI_REQUEST_NULL);
      int rc = MPI_Isend(s.data, static_cast<int>(s.bytes), MPI_BYTE, s.peer, mpi_tag(s.tag), comm_, &sreq.back());
      if (rc != MPI_SUCCESS) return fail("posting a send to", s.peer, mpi_error(rc), &rreq);
      speer.push_back(s.peer);
    }
    // Receives in order (on_recv may check a header before the data behind it is used), then the sends.
    for (size_t k = 0; k < rreq.size(); ++k) {
      absl::Status st = wait(&rreq[k], rpeer[k], "receiving from", deadline, &rreq);
      if (!st.ok()) return st;
      if (on_recv) {
        st = on_recv(rindex[k]);
        if (!st.ok()) return fail_with(st, &rreq);
      }
    }
    for (size_t k = 0; k < sreq.size(); ++k) {
      absl::Status st = wait(&sreq[k], speer[k], "sending to", deadline, &rreq);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

  void abort(const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (abort_reason_.ok()) abort_reason_ = why.ok() ? absl::AbortedError("[data plane] aborted") : why;
    aborted_.store(true);
  }

 private:
  absl::Status wait(MPI_Request* req, int peer, const char* what, absl::Time deadline,
                    std::vector<MPI_Request>* pending_recvs) {
    while (true) {
      int done = 0;
      MPI_Status status;
      int rc = MPI_Test(req, &done, &status);
      if (rc != MPI_SUCCESS) return fail(what, peer, mpi_error(rc), pending_recvs);
      if (done) return absl::OkStatus();
      if (aborted_.load()) {
        std::lock_guard<std::mutex> lock(mu_);
        return fail_with(abort_reason_, pending_recvs);
      }
      if (absl::Now() >= deadline) {
        return fail_with(absl::DeadlineExceededError(absl::StrCat("[data plane] deadline exceeded ", what, " process ",
                                                                  processes_[peer], " (", description(), ")")),
                         pending_recvs);
      }
      std::this_thread::yield();
    }
  }

  absl::Status fail(const char* what, int peer, const std::string& msg, std::vector<MPI_Request>* pending) {
    return fail_with(absl::UnavailableError(absl::StrCat("[data plane] ", what, " process ", processes_[peer], " (",
                                                         description(), ") failed: ", msg)),
                     pending);
  }

  absl::Status fail_with(const absl::Status& st, std::vector<MPI_Request>* pending) {
    for (MPI_Request& r : *pending) {
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
    failed_ = true;
    first_error_ = std::string(st.message());
    return st;
  }

  MPI_Comm comm_;
  const std::vector<int> processes_;
  const int rank_;
  const std::string key_;
  bool failed_ = false;  // used by the exchanging thread only
  std::string first_error_;
  std::mutex mu_;
  absl::Status abort_reason_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
};

}  // namespace

absl::Status init_mpi(int process_id, int num_processes) {
  std::lock_guard<std::mutex> lock(g_mu);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return absl::UnavailableError("[data plane] MPI_Init_thread failed (is this process started by mpirun?)");
    }
    g_we_initialized = true;
    if (provided < MPI_THREAD_MULTIPLE) {
      return absl::FailedPreconditionError(
          "[data plane] MPI_THREAD_MULTIPLE is not supported by this MPI; the data plane needs it (device streams "
          "exchange concurrently); use MCX_COLLECTIVES=gloo");
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != process_id || size != num_processes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[data plane] MCX_COLLECTIVES=mpi needs the job's processes to be the MPI world: this is process ", process_id,
        " of ", num_processes, " but MPI rank ", rank, " of ", size, " (launch with mpirun -n ", num_processes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PeerGroup>> connect_mpi_peer_group(const PeerGroupRequest& request) {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  auto it = std::find(request.processes.begin(), request.processes.end(), world_rank);
  if (it == request.processes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("[data plane] process ", world_rank, " is not in the group {",
                                                   absl::StrJoin(request.processes, ","), "}"));
  }
  MPI_Group world, members;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, static_cast<int>(request.processes.size()), request.processes.data(), &members);
  // The tag keeps concurrent creations of different groups apart (it is the same on every member).
  const uint64_t h = fnv1a64(absl::StrCat(request.key, "/", request.live_set, ".", request.generation));
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, static_cast<int>(h % 32768), &comm);
  MPI_Group_free(&members);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL) {
    return absl::UnavailableError(absl::StrCat("[data plane] MPI_Comm_create_group for ", request.key, " failed: ",
                                               rc == MPI_SUCCESS ? "no communicator" : mpi_error(rc)));
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const int rank = static_cast<int>(it - request.processes.begin());
  return std::unique_ptr<PeerGroup>(new MpiPeerGroup(comm, request.processes, rank, request.key));
}

void finalize_mpi() {
  std::lock_guard<std::mutex> lock(g_mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
  g_we_initialized = false;
}

#endif

}  // namespace mcx::distributed
