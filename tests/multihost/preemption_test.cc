// mcx::multihost::reached_preemption_sync_point in one process (no initialize): a notice (notify_preemption or
// a real SIGTERM) makes the next call return true, once; steps must grow; a bad MCX_PREEMPTION_SYNC_TIMEOUT_S is
// refused; MCX_ENABLE_PREEMPTION_SERVICE=0 turns it all off. Across processes: tests/distributed/multiprocess/preemption_test.cc.
#include "mcx/multihost/preemption.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/error.h"

namespace mcx::multihost {
namespace {

using ::testing::HasSubstr;

TEST(PreemptionOneProcess, ANoticeMakesTheNextCallTrueOnce) {
  EXPECT_FALSE(reached_preemption_sync_point(0));
  EXPECT_FALSE(reached_preemption_sync_point(1));
  EXPECT_FALSE(preemption_sync_step().has_value());
  notify_preemption("test");
  EXPECT_TRUE(reached_preemption_sync_point(2));
  EXPECT_EQ(preemption_sync_step(), 2);
  EXPECT_FALSE(reached_preemption_sync_point(3));
  notify_preemption("again");  // one sync point per run
  EXPECT_FALSE(reached_preemption_sync_point(4));
  try {
    reached_preemption_sync_point(4);
    ADD_FAILURE() << "a step that does not grow was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("[reached_preemption_sync_point] expected a step larger than the previous "
                                    "call's (4), got 4"));
  }
}

// In a child process: the first call installs the handler, so a real SIGTERM is a notice, not the end.
TEST(PreemptionOneProcess, SigtermMakesTheNextCallTrue) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (reached_preemption_sync_point(10)) std::_Exit(2);
        kill(getpid(), SIGTERM);
        const absl::Time until = absl::Now() + absl::Seconds(5);
        int64_t step = 11;
        while (!reached_preemption_sync_point(step) && absl::Now() < until) {
          ++step;
          absl::SleepFor(absl::Milliseconds(1));
        }
        std::_Exit(preemption_sync_step() == step ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "received SIGTERM");
}

TEST(PreemptionOneProcess, ABadTimeoutVariableIsRefused) {
  setenv("MCX_PREEMPTION_SYNC_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(reached_preemption_sync_point(100), InvalidArgument);
  setenv("MCX_PREEMPTION_SYNC_TIMEOUT_S", "-1", 1);
  EXPECT_THROW(reached_preemption_sync_point(101), InvalidArgument);
  unsetenv("MCX_PREEMPTION_SYNC_TIMEOUT_S");
  EXPECT_THROW(reached_preemption_sync_point(102, absl::ZeroDuration()), InvalidArgument);
}

// MCX_ENABLE_PREEMPTION_SERVICE=0 (JAX's jax_enable_preemption_service=False): every entry point is refused naming
// the variable, and SIGTERM keeps its default action (the process ends), in a child process.
TEST(PreemptionOneProcess, TheServiceCanBeTurnedOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MCX_ENABLE_PREEMPTION_SERVICE", "0", 1);
        int refused = 0;
        for (auto call : {+[] { (void)reached_preemption_sync_point(0); }, +[] { enable_preemption_sync(); },
                          +[] { notify_preemption("test"); }}) {
          try {
            call();
          } catch (const FailedPrecondition& e) {
            if (std::string(e.what()).find("MCX_ENABLE_PREEMPTION_SERVICE=0") != std::string::npos) ++refused;
          }
        }
        if (refused != 3) std::_Exit(3);
        kill(getpid(), SIGTERM);  // no handler: the default action
        absl::SleepFor(absl::Seconds(5));
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace mcx::multihost
