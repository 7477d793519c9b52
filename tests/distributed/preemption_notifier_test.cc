// The SIGTERM preemption notifier in this process: the first SIGTERM runs the callback on the notifier thread
// instead of ending the process, a second one ends it, a program's own handler is left alone, and uninstall
// restores the previous action.
#include "mcx/distributed/coordination/preemption_notifier.h"

#include <signal.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

bool has_default_action() {
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  return !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
}

class SigtermNotifierTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override { uninstall_sigterm_notifier(); }
};

TEST_F(SigtermNotifierTest, FirstSigtermRunsTheCallbackOnTheNotifierThread) {
  std::atomic<int> calls{0};
  std::atomic<bool> on_other_thread{false};
  const std::thread::id me = std::this_thread::get_id();
  ASSERT_TRUE(install_sigterm_notifier([&] {
                on_other_thread = std::this_thread::get_id() != me;
                ++calls;
              }).ok());
  EXPECT_TRUE(sigterm_notifier_installed());
  EXPECT_FALSE(sigterm_received());
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // a real signal; the process survives it
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (calls.load() == 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(on_other_thread.load());
  EXPECT_TRUE(sigterm_received());
  // Installing again while installed keeps the first callback and changes nothing.
  EXPECT_TRUE(install_sigterm_notifier([] { ADD_FAILURE() << "second callback"; }).ok());
  uninstall_sigterm_notifier();
  EXPECT_FALSE(sigterm_notifier_installed());
  EXPECT_TRUE(has_default_action());
}

TEST_F(SigtermNotifierTest, SecondSigtermEndsTheProcess) {
  EXPECT_EXIT(
      {
        std::atomic<bool> called{false};
        if (!install_sigterm_notifier([&] { called = true; }).ok()) std::_Exit(3);
        raise(SIGTERM);
        const absl::Time until = absl::Now() + absl::Seconds(5);
        while (!called.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
        if (!called.load()) std::_Exit(4);
        raise(SIGTERM);  // the program did not stop in time: the default action ends it
        absl::SleepFor(absl::Seconds(5));
        std::_Exit(5);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

void program_handler(int) {}

TEST_F(SigtermNotifierTest, AProgramsOwnHandlerIsLeftInPlace) {
  struct sigaction mine {}, before {};
  mine.sa_handler = program_handler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGTERM, &mine, &before), 0);
  absl::Status s = install_sigterm_notifier([] {});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("[preemption] expected SIGTERM to have its default action"));
  EXPECT_FALSE(sigterm_notifier_installed());
  struct sigaction now {};
  sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, &program_handler);
  sigaction(SIGTERM, &before, nullptr);
}

TEST_F(SigtermNotifierTest, UninstallWithoutASignalJoinsAtOnce) {
  ASSERT_TRUE(install_sigterm_notifier([] {}).ok());
  const absl::Time begin = absl::Now();
  uninstall_sigterm_notifier();
  EXPECT_LT(absl::Now() - begin, absl::Milliseconds(200));
  EXPECT_TRUE(has_default_action());
  uninstall_sigterm_notifier();  // no-op
}

}  // namespace
}  // namespace mcx::distributed
