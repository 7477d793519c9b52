// Thread guard: nesting in the owning thread, a second thread opening a guard, and the check made by
// process-spanning executables, with real threads (including a device stream's thread).
#include "mcx/runtime/thread_guard.h"

#include <pthread.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/runtime/device.h"
#include "mcx/runtime/stream.h"
#include "tests/support/child_check.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

// Runs fn on a new thread named `name` and returns the error it threw (nullopt if none) and the
// thread's own description.
struct ThreadResult {
  std::optional<std::string> error;
  std::string description;
};
template <typename Fn>
ThreadResult on_named_thread(const char* name, Fn fn) {
  ThreadResult r;
  std::thread t([&] {
    pthread_setname_np(pthread_self(), name);
    r.description = current_thread_description();
    try {
      fn();
    } catch (const ThreadGuardError& e) {
      r.error = e.what();
    }
  });
  t.join();
  return r;
}

TEST(ThreadGuardTest, NoGuardMeansNoChecks) {
  EXPECT_FALSE(thread_guard_active());
  ThreadResult r = on_named_thread("tg-free", [] { check_thread_guard(true, "jit of 'step'"); });
  EXPECT_FALSE(r.error.has_value());
}

TEST(ThreadGuardTest, GuardsNestInTheOwningThread) {
  {
    ThreadGuard outer;
    EXPECT_TRUE(thread_guard_active());
    {
      ThreadGuard inner;
      EXPECT_TRUE(thread_guard_active());
      check_thread_guard(true, "jit of 'step'");  // the owner may run spanning executables
    }
    EXPECT_TRUE(thread_guard_active());  // the inner guard does not release ownership
    ThreadResult r = on_named_thread("tg-other", [] { check_thread_guard(true, "jit of 'step'"); });
    EXPECT_TRUE(r.error.has_value());
  }
  EXPECT_FALSE(thread_guard_active());
  ThreadResult r = on_named_thread("tg-after", [] { check_thread_guard(true, "jit of 'step'"); });
  EXPECT_FALSE(r.error.has_value());
}

TEST(ThreadGuardTest, SecondThreadOpeningAGuardIsAnErrorNamingBothThreads) {
  pthread_setname_np(pthread_self(), "tg-main");
  const std::string me = current_thread_description();
  ThreadGuard guard;
  ThreadResult r = on_named_thread("tg-second", [] { ThreadGuard second; });
  ASSERT_TRUE(r.error.has_value());
  EXPECT_THAT(*r.error, HasSubstr("[thread_guard]"));
  EXPECT_THAT(*r.error, HasSubstr(me));
  EXPECT_THAT(*r.error, HasSubstr(r.description));
  EXPECT_THAT(*r.error, HasSubstr("'tg-second'"));
  EXPECT_THAT(*r.error, HasSubstr("'tg-main'"));
  EXPECT_NE(me, r.description);
  // The failed attempt changed nothing: this thread still owns the guard.
  EXPECT_TRUE(thread_guard_active());
  check_thread_guard(true, "jit of 'step'");
}

TEST(ThreadGuardTest, ErrorHasFailedPreconditionCode) {
  ThreadGuard guard;
  std::thread t([] {
    try {
      ThreadGuard second;
      ADD_FAILURE() << "expected ThreadGuardError";
    } catch (const FailedPrecondition& e) {
      EXPECT_EQ(e.code(), absl::StatusCode::kFailedPrecondition);
    }
  });
  t.join();
}

TEST(ThreadGuardTest, SpanningExecutableFromAnotherThreadIsAnError) {
  pthread_setname_np(pthread_self(), "tg-owner");
  ThreadGuard guard;
  ThreadResult spanning = on_named_thread("tg-caller", [] { check_thread_guard(true, "jit of 'step'"); });
  ASSERT_TRUE(spanning.error.has_value());
  EXPECT_THAT(*spanning.error, HasSubstr("jit of 'step'"));
  EXPECT_THAT(*spanning.error, HasSubstr(spanning.description));
  EXPECT_THAT(*spanning.error, HasSubstr("'tg-owner'"));
  ThreadResult local = on_named_thread("tg-caller", [] { check_thread_guard(false, "jit of 'local'"); });
  EXPECT_FALSE(local.error.has_value());
}

TEST(ThreadGuardTest, CheckFromADeviceStreamThreadNamesTheStream) {
  ThreadGuard guard;
  Stream& s = stream_for(default_device());
  std::optional<std::string> error;
  s.enqueue([&] {
    try {
      check_thread_guard(true, "collective all_reduce");
    } catch (const ThreadGuardError& e) {
      error = e.what();
    }
  });
  ASSERT_TRUE(s.synchronize(absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(error.has_value());
  std::string quoted_name = "'";
  quoted_name.append(default_device().to_string()).append("'");
  EXPECT_THAT(*error, HasSubstr(quoted_name));
}

TEST(ThreadGuardTest, AnotherThreadMayTakeTheGuardAfterRelease) {
  { ThreadGuard g; }
  ThreadResult r = on_named_thread("tg-next", [] {
    ThreadGuard g;
    if (!thread_guard_active()) throw ThreadGuardError("guard not active");
  });
  EXPECT_FALSE(r.error.has_value());
  EXPECT_FALSE(thread_guard_active());
}

TEST(ThreadGuardTest, DescriptionIsReadable) {
  const std::string d = current_thread_description();
  EXPECT_THAT(d, ::testing::StartsWith("thread 0x"));
  EXPECT_THAT(d, HasSubstr("tid "));
  ThreadResult r = on_named_thread("tg-named", [] {});
  EXPECT_THAT(r.description, HasSubstr("'tg-named'"));
}

// MCX_THREAD_GUARD=1 (JAX's jax.thread_guard for the whole program): the first thread to issue a spanning
// computation owns the guard for good; another thread issuing one or opening a guard is refused, naming the
// owner and the flag; guards in the owner nest and closing them keeps the process-wide guard. In a child
// process, since the guard outlives the test.
TEST(ThreadGuardTest, TheProcessWideFlagGivesTheGuardToTheFirstIssuingThreadForGood) {
  EXPECT_EXIT(
      {
        setenv("MCX_THREAD_GUARD", "1", 1);
        CHILD_CHECK(!thread_guard_active());
        check_thread_guard(false, "jit of 'local'");  // single-process work takes nothing
        CHILD_CHECK(!thread_guard_active());
        check_thread_guard(true, "jit of 'step'");  // this thread now owns it
        CHILD_CHECK(thread_guard_active());
        ThreadResult other = on_named_thread("tg-other", [] { check_thread_guard(true, "jit of 'step'"); });
        CHILD_CHECK(other.error.has_value());
        CHILD_CHECK(other.error->find("MCX_THREAD_GUARD=1") != std::string::npos);
        ThreadResult opener = on_named_thread("tg-opener", [] { ThreadGuard g; });
        CHILD_CHECK(opener.error.has_value());
        { ThreadGuard nested; }
        CHILD_CHECK(thread_guard_active());  // closing a nested guard keeps the process-wide one
        check_thread_guard(true, "jit of 'step'");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace mcx
