// Streams (in order, parallel across devices, synchronize with deadlines, drain on destruction) and
// AsyncBuffer (completion, errors, deadlines, on_ready), with real threads.
#include "mcx/runtime/stream.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"
#include "mcx/runtime/device_platform.h"
#include "mcx/runtime/async_buffer.h"
#include "mcx/runtime/device.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// Host values as a buffer of this process's first device (through its platform: device_platform.h).
std::shared_ptr<const DeviceBuffer> on_device(Buffer b) {
  return value_or_throw(to_device(std::move(b), local_devices()[0]));
}

// A one-shot gate: threads wait (with a deadline) until the test opens it.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(StreamTest, TasksRunInEnqueueOrderOnTheStreamThread) {
  Stream& s = stream_for(default_device());
  std::vector<int> order;  // touched only by the stream thread until synchronize returns
  std::atomic<bool> all_on_stream_thread{true};
  for (int i = 0; i < 200; ++i) {
    s.enqueue([&, i] {
      if (!s.is_current_thread()) all_on_stream_thread = false;
      order.push_back(i);
    });
  }
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(all_on_stream_thread);
  EXPECT_FALSE(s.is_current_thread());
}

TEST(StreamTest, TwoDevicesRunTasksAtTheSameTime) {
  ASSERT_GE(local_device_count(), 2);
  // Each task announces itself and waits for the other: this only completes if both tasks are
  // running at once, i.e. the two devices' streams really run in parallel.
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<int> met{0};
  auto rendezvous = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++arrived;
    cv.notify_all();
    if (cv.wait_for(lock, std::chrono::seconds(5), [&] { return arrived == 2; })) met.fetch_add(1);
  };
  Stream& a = stream_for(local_devices()[0]);
  Stream& b = stream_for(local_devices()[1]);
  a.enqueue(rendezvous);
  b.enqueue(rendezvous);
  ASSERT_TRUE(a.synchronize(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(b.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(met.load(), 2);
}

TEST(StreamTest, SynchronizeHonoursItsDeadlineAndNamesTheStream) {
  Stream s("test-stream");
  Gate gate;
  std::atomic<bool> released{false};
  s.enqueue([&] { released = gate.wait(std::chrono::seconds(10)); });
  const absl::Time start = absl::Now();
  absl::Status st = s.synchronize(start + absl::Milliseconds(50));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(49));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(st.message()), HasSubstr("test-stream"));
  gate.open();
  EXPECT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_TRUE(released);
}

TEST(StreamTest, SynchronizeWaitsOnlyForEarlierWork) {
  Stream s("s");
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) s.enqueue([&] { done.fetch_add(1); });
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(done.load(), 50);
}

TEST(StreamTest, SynchronizeFromTheStreamsOwnThreadIsAnError) {
  Stream s("self");
  absl::Status inner;
  s.enqueue([&] { inner = s.synchronize(absl::Now() + absl::Seconds(10)); });
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(inner.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StreamTest, AThrowingTaskEndsOnlyItself) {
  Stream s("throws");
  std::atomic<int> after{0};
  s.enqueue([] { throw std::runtime_error("task failure"); });
  s.enqueue([&] { after = 1; });
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(after.load(), 1);
}

TEST(StreamTest, DestructionDrainsTheQueueAndLaterWorkRunsInline) {
  std::atomic<int> ran{0};
  auto s = std::make_unique<Stream>("drain");
  Gate gate;
  s->enqueue([&] { gate.wait(std::chrono::seconds(10)); });
  for (int i = 0; i < 20; ++i) s->enqueue([&] { ran.fetch_add(1); });
  gate.open();
  s->shutdown();  // joins after the queue is empty
  EXPECT_EQ(ran.load(), 20);
  std::thread::id ran_on;
  s->enqueue([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  s.reset();  // a second shutdown is a no-op
}

// The deadline lies within [before + timeout, after + timeout] of the call.
void expect_deadline_is_now_plus(absl::Duration timeout) {
  const absl::Time before = absl::Now();
  const absl::Time deadline = default_device_deadline();
  const absl::Time after = absl::Now();
  EXPECT_GE(deadline, before + timeout);
  EXPECT_LE(deadline, after + timeout);
}

TEST(StreamTest, DefaultDeviceDeadlineFollowsTheFlag) {
  unsetenv("MCX_DEVICE_TIMEOUT_S");
  expect_deadline_is_now_plus(absl::Seconds(300));
  setenv("MCX_DEVICE_TIMEOUT_S", "2.5", 1);
  expect_deadline_is_now_plus(absl::Milliseconds(2500));
  setenv("MCX_DEVICE_TIMEOUT_S", "-1", 1);
  try {
    default_device_deadline();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("MCX_DEVICE_TIMEOUT_S=-1"));
  }
  unsetenv("MCX_DEVICE_TIMEOUT_S");
}

TEST(AsyncBufferTest, ReadyBufferAwaitsImmediately) {
  auto b = AsyncBuffer::ready(on_device(Buffer::from_vector<float>({1, 2, 3}, {3})));
  EXPECT_TRUE(b->is_ready());
  absl::StatusOr<Buffer> v = b->await(absl::Now());
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->to_doubles(), (std::vector<double>{1, 2, 3}));
}

TEST(AsyncBufferTest, StreamProducesAndAnotherStreamConsumes) {
  ASSERT_GE(local_device_count(), 2);
  auto in = AsyncBuffer::pending();
  auto out = AsyncBuffer::pending();
  // The consumer is enqueued first, on another device, and waits for the producer.
  stream_for(local_devices()[1]).enqueue([in, out] {
    absl::StatusOr<Buffer> x = in->await(default_device_deadline());
    if (!x.ok()) return out->set_error(x.status());
    std::vector<double> v = x->to_doubles();
    std::vector<float> doubled;
    for (double e : v) doubled.push_back(static_cast<float>(2 * e));
    out->set(on_device(Buffer::from_vector<float>(doubled, {static_cast<int64_t>(doubled.size())})));
  });
  EXPECT_FALSE(out->is_ready());
  stream_for(local_devices()[0]).enqueue([in] { in->set(on_device(Buffer::from_vector<float>({1.5f, -2.0f}, {2}))); });
  absl::StatusOr<Buffer> r = out->await(absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->to_doubles(), (std::vector<double>{3.0, -4.0}));
}

TEST(AsyncBufferTest, ProducerErrorSurfacesAtAwaitThroughDependents) {
  ASSERT_GE(local_device_count(), 3);
  auto a = AsyncBuffer::pending();
  auto b = AsyncBuffer::pending();
  stream_for(local_devices()[1]).enqueue(
      [a] { a->set_error(absl::InvalidArgumentError("[dot_general on cpu:1] contracting dimensions differ")); });
  stream_for(local_devices()[2]).enqueue([a, b] {
    absl::StatusOr<Buffer> x = a->await(default_device_deadline());
    if (!x.ok()) return b->set_error(x.status());
    b->set(on_device(*x));
  });
  absl::StatusOr<Buffer> r = b->await(absl::Now() + absl::Seconds(10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("[dot_general on cpu:1]"));
  // Every later reader sees the same error.
  EXPECT_EQ(a->await().status(), r.status());
}

TEST(AsyncBufferTest, AwaitDeadlineExpires) {
  auto b = AsyncBuffer::pending();
  const absl::Time start = absl::Now();
  absl::StatusOr<Buffer> r = b->await(start + absl::Milliseconds(30));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(29));
  EXPECT_FALSE(b->is_ready());
  b->set(on_device(Buffer::scalar<int32_t>(7)));  // completes fine later
  EXPECT_EQ(b->await(absl::Now())->element_as_double(0), 7.0);
}

TEST(AsyncBufferTest, OnReadyRunsOnTheCompletingThreadOrImmediately) {
  auto b = AsyncBuffer::pending();
  Stream& s = stream_for(default_device());
  std::atomic<bool> ran_on_stream{false};
  std::atomic<int> calls{0};
  b->on_ready([&] {
    ran_on_stream = s.is_current_thread();
    calls.fetch_add(1);
  });
  EXPECT_EQ(calls.load(), 0);
  s.enqueue([b] { b->set(on_device(Buffer::scalar<float>(1))); });
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(ran_on_stream);
  // Registered after completion: runs now, on this thread.
  std::thread::id where;
  b->on_ready([&] { where = std::this_thread::get_id(); });
  EXPECT_EQ(where, std::this_thread::get_id());
}

TEST(AsyncBufferTest, OnReadyRunsAfterAnErrorToo) {
  auto b = AsyncBuffer::pending();
  int calls = 0;
  b->on_ready([&] { ++calls; });
  b->set_error(absl::InternalError("boom"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(b->await().status().message(), "boom");
}

TEST(AsyncBufferTest, SetErrorWithOkStatusBecomesInternal) {
  auto b = AsyncBuffer::pending();
  b->set_error(absl::OkStatus());
  EXPECT_EQ(b->await().status().code(), absl::StatusCode::kInternal);
}

#ifdef NDEBUG
TEST(AsyncBufferTest, SecondCompletionIsIgnored) {
  auto b = AsyncBuffer::pending();
  b->set(on_device(Buffer::scalar<float>(1)));
  b->set_error(absl::InternalError("late"));
  b->set(on_device(Buffer::scalar<float>(2)));
  absl::StatusOr<Buffer> r = b->await();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->element_as_double(0), 1.0);
}
#endif

TEST(AsyncBufferTest, ManyWaitersAllWakeUp) {
  auto b = AsyncBuffer::pending();
  std::atomic<int> ok{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 6; ++i) {
    waiters.emplace_back([&] {
      if (b->await(absl::Now() + absl::Seconds(10)).ok()) ok.fetch_add(1);
    });
  }
  b->set(on_device(Buffer::scalar<double>(3)));
  for (auto& t : waiters) t.join();
  EXPECT_EQ(ok.load(), 6);
}

}  // namespace
}  // namespace mcx
