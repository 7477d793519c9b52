// NcclCommunicator (backend/cuda/nccl_communicator.h) driven directly: members on threads, one per GPU, over a
// LocalGroup as the runtime's host group. On a GPU machine this runs the real NCCL (the one-rank test on any GPU;
// the others need two GPUs); emulated (label unit, "emulated_gpu/") it runs the stand-in NCCL between two
// stand-in GPUs (tests/support/fake_cuda). Checked: creation decides the same on every member (NCCL on distinct
// GPUs, staging with the reason on a shared one, an error when NCCL is demanded and cannot run), the results of
// each collective, and that a member whose peer never arrives fails at its deadline, or at once when the host
// group is aborted (as the coordination service does when it reports a process dead), and aborts the group.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/backend/cuda/cuda_device.h"
#include "mcx/backend/cuda/driver_api.h"
#include "mcx/backend/cuda/nccl_communicator.h"
#include "mcx/collectives/local_communicator.h"
#include "mcx/core/error.h"
#include "tests/gpu/gpu_test_support.h"

namespace mcx::cuda {
namespace {

using ::testing::HasSubstr;

int gpu_count() { return mcx::test::platform("cuda").device_count().value_or(0); }

// MCX_GPU_COLLECTIVES for one test.
class ScopedMode {
 public:
  explicit ScopedMode(const char* mode) { setenv("MCX_GPU_COLLECTIVES", mode, 1); }
  ~ScopedMode() { unsetenv("MCX_GPU_COLLECTIVES"); }
};

std::unique_ptr<CudaDevice> open_gpu(int ordinal) {
  const DriverApi* api = cuda_driver().value();
  return value_or_throw(CudaDevice::open(*api, ordinal));
}

// A float32 array on the device.
struct DeviceArray {
  const CudaDevice* device;
  uint64_t address;
  size_t count;
  DeviceArray(const CudaDevice& d, const std::vector<float>& values) : device(&d), count(values.size()) {
    address = value_or_throw(d.allocator().allocate(std::max<size_t>(4, 4 * count),
                                                    reinterpret_cast<uint64_t>(d.stream())));
    if (count > 0) {
      EXPECT_TRUE(d.to_device(address, values.data(), 4 * count, absl::Now() + absl::Seconds(10)).ok());
    }
  }
  ~DeviceArray() { (void)device->allocator().free(address); }
  std::vector<float> read() const {
    std::vector<float> out(count);
    if (count > 0) {
      EXPECT_TRUE(device->to_host(out.data(), address, 4 * count, absl::Now() + absl::Seconds(10)).ok());
    }
    return out;
  }
};

// Runs body(rank) for every member on its own thread (each on GPU ordinals[rank]) over one LocalGroup. A body keeps
// its communicator until every member's body is done (as the runtime's groups live on): an NCCL communicator
// destroyed while a peer still uses it fails the peer's operations.
template <typename Body>
void members(const std::vector<int>& ordinals, Body body) {
  const int n = static_cast<int>(ordinals.size());
  LocalGroup group(n);
  std::vector<std::unique_ptr<CudaDevice>> gpus;
  for (int o : ordinals) gpus.push_back(open_gpu(o));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { body(r, *gpus[r], group.member(r), group); });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NcclCommunicator, OneRankRunsOnTheLibrary) {
  SKIP_WITHOUT_GPU();
  ScopedMode mode("nccl");
  members({0}, [](int, const CudaDevice& gpu, Communicator& host, CollectiveGroup&) {
    absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_NE(made->comm, nullptr) << made->staging_reason;
    std::printf("[nccl] %s\n", made->comm->description().c_str());
    DeviceArray x(gpu, {1, 2, 3}), y(gpu, {0, 0, 0});
    ASSERT_TRUE(made->comm->all_reduce(x.address, y.address, 3, ncclFloat32, ReduceOp::kSum,
                                       absl::Now() + absl::Seconds(30)).ok());
    EXPECT_EQ(y.read(), (std::vector<float>{1, 2, 3}));
  });
}

TEST(NcclCommunicator, TwoGpusAgreeOnNcclAndEveryCollectiveMatches) {
  SKIP_WITHOUT_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (this machine has " << gpu_count() << ")";
  ScopedMode mode("auto");
  members({0, 1}, [](int r, const CudaDevice& gpu, Communicator& host, CollectiveGroup&) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, deadline);
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_NE(made->comm, nullptr) << made->staging_reason;
    NcclCommunicator& nccl = *made->comm;
    EXPECT_EQ(nccl.rank(), r);
    EXPECT_EQ(nccl.size(), 2);
    const float b = static_cast<float>(10 * r);
    {
      DeviceArray x(gpu, {1 + b, 2 + b}), y(gpu, {0, 0});
      ASSERT_TRUE(nccl.all_reduce(x.address, y.address, 2, ncclFloat32, ReduceOp::kSum, deadline).ok());
      EXPECT_EQ(y.read(), (std::vector<float>{12, 14}));
      ASSERT_TRUE(nccl.all_reduce(x.address, x.address, 2, ncclFloat32, ReduceOp::kMax, deadline).ok());  // in place
      EXPECT_EQ(x.read(), (std::vector<float>{11, 12}));
    }
    {
      DeviceArray x(gpu, {b, b + 1}), y(gpu, {0, 0, 0, 0});
      ASSERT_TRUE(nccl.all_gather(x.address, y.address, 8, deadline).ok());
      EXPECT_EQ(y.read(), (std::vector<float>{0, 1, 10, 11}));
    }
    {
      DeviceArray x(gpu, {1 + b, 2 + b, 3 + b, 4 + b}), y(gpu, {0, 0});
      ASSERT_TRUE(nccl.reduce_scatter(x.address, y.address, 2, ncclFloat32, ReduceOp::kSum, deadline).ok());
      EXPECT_EQ(y.read(), r == 0 ? (std::vector<float>{12, 14}) : (std::vector<float>{16, 18}));
    }
    {
      DeviceArray x(gpu, {b, b + 1}), y(gpu, {-1, -1});
      ASSERT_TRUE(nccl.all_to_all(x.address, y.address, 4, deadline).ok());
      EXPECT_EQ(y.read(), r == 0 ? (std::vector<float>{0, 10}) : (std::vector<float>{1, 11}));
    }
    {
      // Rank 0 sends to 1; rank 1 sends nothing and receives; rank 0 receives nothing (left as it was).
      DeviceArray x(gpu, {b + 5}), y(gpu, {-1});
      ASSERT_TRUE(nccl.permute(x.address, y.address, 4, r == 0 ? 1 : -1, r == 1 ? 0 : -1, deadline).ok());
      EXPECT_EQ(y.read(), r == 0 ? (std::vector<float>{-1}) : (std::vector<float>{5}));
    }
    EXPECT_TRUE(host.barrier(deadline).ok());  // both done before either communicator goes
  });
}

TEST(NcclCommunicator, MembersSharingAGpuAgreeOnStagingOrRefuseWhenNcclIsDemanded) {
  SKIP_WITHOUT_GPU();
  {
    ScopedMode mode("auto");
    members({0, 0}, [](int, const CudaDevice& gpu, Communicator& host, CollectiveGroup&) {
      absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(made.ok()) << made.status();
      EXPECT_EQ(made->comm, nullptr);
      EXPECT_THAT(made->staging_reason, HasSubstr("share GPU"));
    });
  }
  {
    ScopedMode mode("nccl");
    members({0, 0}, [](int, const CudaDevice& gpu, Communicator& host, CollectiveGroup&) {
      absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, absl::Now() + absl::Seconds(60));
      ASSERT_FALSE(made.ok());
      EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(std::string(made.status().message()), HasSubstr("MCX_GPU_COLLECTIVES=nccl"));
      EXPECT_THAT(std::string(made.status().message()), HasSubstr("share GPU"));
    });
  }
  {
    ScopedMode mode("staging");
    members({0, 0}, [](int, const CudaDevice& gpu, Communicator& host, CollectiveGroup&) {
      absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, absl::Now() + absl::Seconds(60));
      ASSERT_TRUE(made.ok()) << made.status();
      EXPECT_EQ(made->comm, nullptr);
      EXPECT_THAT(made->staging_reason, HasSubstr("MCX_GPU_COLLECTIVES=staging"));
    });
  }
}

// Both members create their communicator; member 1 then stays alive without calling the collective (running
// `meanwhile` first), while member 0 runs `wait(its communicator, its GPU, the group)`.
void one_waits_while_the_other_idles(
    const std::function<void(CollectiveGroup&)>& meanwhile,
    const std::function<void(NcclCommunicator&, const CudaDevice&, CollectiveGroup&)>& wait) {
  ScopedMode mode("nccl");
  std::atomic<bool> done{false};
  members({0, 1}, [&](int r, const CudaDevice& gpu, Communicator& host, CollectiveGroup& group) {
    absl::StatusOr<NcclCommunicator::Created> made = NcclCommunicator::create(gpu, host, absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_NE(made->comm, nullptr);
    if (r == 1) {
      meanwhile(group);
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    wait(*made->comm, gpu, group);
    done.store(true);
  });
}

int64_t ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

// Member 0 fails at its deadline, the NCCL communicator is aborted (its later calls say so) and so is the host
// group.
TEST(NcclCommunicator, AMissingPeerFailsAtTheDeadlineAndAbortsTheGroup) {
  SKIP_WITHOUT_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (this machine has " << gpu_count() << ")";
  one_waits_while_the_other_idles([](CollectiveGroup&) {}, [](NcclCommunicator& nccl, const CudaDevice& gpu,
                                                              CollectiveGroup& group) {
    DeviceArray x(gpu, {1, 2});
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = nccl.all_reduce(x.address, x.address, 2, ncclFloat32, ReduceOp::kSum,
                                     absl::Now() + absl::Milliseconds(300));
    const int64_t ms = ms_since(start);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("all_reduce"));
    EXPECT_GE(ms, 250);
    EXPECT_LE(ms, 3000);
    EXPECT_TRUE(group.failed()) << "the host group was not aborted";
    absl::Status again = nccl.all_reduce(x.address, x.address, 2, ncclFloat32, ReduceOp::kSum,
                                         absl::Now() + absl::Seconds(5));
    EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
    EXPECT_THAT(std::string(again.message()), HasSubstr("unusable after an earlier error"));
  });
}

// The host group aborted while a member waits in an NCCL collective (what the membership watch does when the
// coordination service reports a member process dead): the wait ends at once with the group's error.
TEST(NcclCommunicator, AnAbortedHostGroupEndsTheWaitAtOnce) {
  SKIP_WITHOUT_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "needs two GPUs (this machine has " << gpu_count() << ")";
  one_waits_while_the_other_idles(
      [](CollectiveGroup& group) {  // its "process" reported dead after 300 ms
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        group.abort(absl::UnavailableError("[test] process 1 failed"));
      },
      [](NcclCommunicator& nccl, const CudaDevice& gpu, CollectiveGroup&) {
        DeviceArray x(gpu, {1, 2});
        const auto start = std::chrono::steady_clock::now();
        absl::Status s = nccl.all_reduce(x.address, x.address, 2, ncclFloat32, ReduceOp::kSum,
                                         absl::Now() + absl::Seconds(30));
        EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
        EXPECT_THAT(std::string(s.message()), HasSubstr("process 1 failed"));
        EXPECT_THAT(std::string(s.message()), HasSubstr("[nccl] all_reduce"));
        EXPECT_LE(ms_since(start), 2000) << "the wait did not end when the group was aborted";
      });
}

}  // namespace
}  // namespace mcx::cuda
