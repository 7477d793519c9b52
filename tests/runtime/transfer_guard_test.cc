// Transfer guard: every level x direction x explicit/implicit, environment parsing, process settings,
// nested scopes and their thread-locality. Logged transfers are captured from the mcx logger.
#include "mcx/runtime/transfer_guard.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/logging.h"
#include "spdlog/sinks/ostream_sink.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kEnvVars[] = {"MCX_TRANSFER_GUARD", "MCX_TRANSFER_GUARD_HOST_TO_DEVICE",
                                    "MCX_TRANSFER_GUARD_DEVICE_TO_DEVICE", "MCX_TRANSFER_GUARD_DEVICE_TO_HOST"};
constexpr TransferGuardLevel kLevels[] = {TransferGuardLevel::kAllow, TransferGuardLevel::kLog,
                                          TransferGuardLevel::kDisallow, TransferGuardLevel::kLogExplicit,
                                          TransferGuardLevel::kDisallowExplicit};
constexpr TransferDirection kDirections[] = {TransferDirection::kHostToDevice, TransferDirection::kDeviceToDevice,
                                             TransferDirection::kDeviceToHost};

enum class Outcome { kAllowed, kLogged, kThrown };

// The specification, written out independently of the implementation's switch.
Outcome expected_outcome(TransferGuardLevel level, bool is_explicit) {
  if (level == TransferGuardLevel::kAllow) return Outcome::kAllowed;
  if (level == TransferGuardLevel::kLog) return is_explicit ? Outcome::kAllowed : Outcome::kLogged;
  if (level == TransferGuardLevel::kDisallow) return is_explicit ? Outcome::kAllowed : Outcome::kThrown;
  if (level == TransferGuardLevel::kLogExplicit) return Outcome::kLogged;
  return Outcome::kThrown;
}

AbstractValue f32_2x3() { return AbstractValue{DType::kFloat32, concrete_shape({2, 3})}; }

class TransferGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kEnvVars) unsetenv(v);
    detail::reset_transfer_guard_for_testing();
    saved_level_ = log_level();
    set_log_level("info");
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
    logger().sinks().push_back(sink_);
  }
  void TearDown() override {
    auto& sinks = logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    set_log_level(saved_level_);
    for (const char* v : kEnvVars) unsetenv(v);
    detail::reset_transfer_guard_for_testing();
  }
  std::string take_log() {
    std::string s = log_.str();
    log_.str("");
    return s;
  }

  // Runs one check and classifies what happened; the message is the error or the log line.
  Outcome run_check(TransferDirection d, bool is_explicit, std::string* message) {
    take_log();
    try {
      check_transfer(d, f32_2x3(), is_explicit, "jit of 'step' argument 1");
    } catch (const TransferGuardError& e) {
      *message = e.what();
      EXPECT_EQ(take_log(), "");
      return Outcome::kThrown;
    }
    *message = take_log();
    return message->empty() ? Outcome::kAllowed : Outcome::kLogged;
  }

  std::ostringstream log_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::string saved_level_;
};

TEST_F(TransferGuardTest, DefaultAllowsEverything) {
  for (TransferDirection d : kDirections) {
    EXPECT_EQ(transfer_guard_level(d), TransferGuardLevel::kAllow);
    for (bool ex : {false, true}) {
      std::string msg;
      EXPECT_EQ(run_check(d, ex, &msg), Outcome::kAllowed);
    }
  }
}

TEST_F(TransferGuardTest, FullMatrixThroughProcessSettingAndScope) {
  for (bool use_scope : {false, true}) {
    for (TransferGuardLevel level : kLevels) {
      for (TransferDirection d : kDirections) {
        detail::reset_transfer_guard_for_testing();
        std::optional<TransferGuard> scope;
        if (use_scope) {
          scope.emplace(d, level);
        } else {
          set_transfer_guard(d, level);
        }
        for (bool ex : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "level=" << transfer_guard_level_name(level)
                                            << " direction=" << transfer_direction_name(d) << " explicit=" << ex
                                            << " scope=" << use_scope);
          std::string msg;
          const Outcome got = run_check(d, ex, &msg);
          EXPECT_EQ(got, expected_outcome(level, ex)) << msg;
          if (got != Outcome::kAllowed) {
            EXPECT_THAT(msg, HasSubstr(std::string(ex ? "explicit " : "implicit ") + std::string(transfer_direction_name(d)) +
                                       " transfer of f32[2,3] (jit of 'step' argument 1)"));
            EXPECT_THAT(msg, HasSubstr(std::string("'") + std::string(transfer_guard_level_name(level)) + "'"));
          }
          if (got == Outcome::kThrown) {
            EXPECT_THAT(msg, HasSubstr("[transfer_guard] disallowed "));
          }
          if (got == Outcome::kLogged) {
            EXPECT_THAT(msg, HasSubstr("[warning]"));
            EXPECT_THAT(msg, Not(HasSubstr("disallowed")));
          }
          // The other directions are untouched.
          for (TransferDirection other : kDirections) {
            if (other == d) continue;
            std::string m;
            EXPECT_EQ(run_check(other, ex, &m), Outcome::kAllowed) << m;
          }
        }
      }
    }
  }
}

TEST_F(TransferGuardTest, ThrownErrorIsInvalidArgumentWithTheDocumentedText) {
  set_transfer_guard(TransferGuardLevel::kDisallow);
  try {
    check_transfer(TransferDirection::kHostToDevice, AbstractValue{DType::kFloat32, concrete_shape({256, 784})},
                   false, "jit of 'step' argument 1");
    FAIL() << "expected TransferGuardError";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()),
              "[transfer_guard] disallowed implicit host-to-device transfer of f32[256,784] (jit of 'step' argument "
              "1); the host-to-device transfer guard is 'disallow'");
  }
}

TEST_F(TransferGuardTest, NamesAndParsingRoundTrip) {
  for (TransferGuardLevel level : kLevels) {
    EXPECT_EQ(parse_transfer_guard_level(transfer_guard_level_name(level)), level);
  }
  EXPECT_EQ(transfer_guard_level_name(TransferGuardLevel::kDisallowExplicit), "disallow_explicit");
  EXPECT_EQ(transfer_direction_name(TransferDirection::kDeviceToHost), "device-to-host");
  EXPECT_EQ(parse_transfer_guard_level("Allow"), std::nullopt);
  EXPECT_EQ(parse_transfer_guard_level(""), std::nullopt);
  EXPECT_EQ(parse_transfer_guard_level("disallow "), std::nullopt);
}

TEST_F(TransferGuardTest, EnvironmentSetsAllDirectionsAndPerDirectionOverrides) {
  setenv("MCX_TRANSFER_GUARD", "log", 1);
  setenv("MCX_TRANSFER_GUARD_DEVICE_TO_HOST", "disallow_explicit", 1);
  detail::reset_transfer_guard_for_testing();
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kLog);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToDevice), TransferGuardLevel::kLog);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToHost), TransferGuardLevel::kDisallowExplicit);
  std::string msg;
  EXPECT_EQ(run_check(TransferDirection::kDeviceToHost, true, &msg), Outcome::kThrown);
  EXPECT_EQ(run_check(TransferDirection::kHostToDevice, false, &msg), Outcome::kLogged);

  // A per-direction variable alone changes only its direction.
  unsetenv("MCX_TRANSFER_GUARD");
  unsetenv("MCX_TRANSFER_GUARD_DEVICE_TO_HOST");
  setenv("MCX_TRANSFER_GUARD_HOST_TO_DEVICE", "disallow", 1);
  detail::reset_transfer_guard_for_testing();
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kDisallow);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToDevice), TransferGuardLevel::kAllow);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToHost), TransferGuardLevel::kAllow);
}

TEST_F(TransferGuardTest, InvalidEnvironmentValueIsReportedNotIgnored) {
  for (const char* var : kEnvVars) {
    for (const char* v : kEnvVars) unsetenv(v);
    setenv(var, "deny", 1);
    detail::reset_transfer_guard_for_testing();
    set_transfer_guard(TransferGuardLevel::kAllow);  // even a process setting does not hide it
    TransferGuard scope(TransferGuardLevel::kAllow);
    for (TransferDirection d : kDirections) {
      try {
        transfer_guard_level(d);
        ADD_FAILURE() << "expected InvalidArgument for " << var;
      } catch (const InvalidArgument& e) {
        EXPECT_THAT(e.what(), HasSubstr(std::string(var) + "=deny"));
        EXPECT_THAT(e.what(), HasSubstr("allow, log, disallow, log_explicit or disallow_explicit"));
      }
      EXPECT_THROW(check_transfer(d, f32_2x3(), true, "device_put"), InvalidArgument);
    }
  }
  // Fixed: works again.
  for (const char* v : kEnvVars) unsetenv(v);
  detail::reset_transfer_guard_for_testing();
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kAllow);
}

TEST_F(TransferGuardTest, PrecedenceScopeThenProcessThenEnvironment) {
  setenv("MCX_TRANSFER_GUARD", "disallow", 1);
  detail::reset_transfer_guard_for_testing();
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kDisallow);
  set_transfer_guard(TransferDirection::kHostToDevice, TransferGuardLevel::kLog);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kLog);
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToHost), TransferGuardLevel::kDisallow);
  {
    TransferGuard g(TransferGuardLevel::kAllow);
    for (TransferDirection d : kDirections) EXPECT_EQ(transfer_guard_level(d), TransferGuardLevel::kAllow);
  }
  EXPECT_EQ(transfer_guard_level(TransferDirection::kHostToDevice), TransferGuardLevel::kLog);
  set_transfer_guard(TransferGuardLevel::kDisallowExplicit);
  for (TransferDirection d : kDirections) EXPECT_EQ(transfer_guard_level(d), TransferGuardLevel::kDisallowExplicit);
}

TEST_F(TransferGuardTest, ScopesNestAndRestore) {
  const auto h2d = TransferDirection::kHostToDevice;
  const auto d2h = TransferDirection::kDeviceToHost;
  set_transfer_guard(TransferGuardLevel::kLog);
  {
    TransferGuard outer(TransferGuardLevel::kDisallow);
    EXPECT_EQ(transfer_guard_level(h2d), TransferGuardLevel::kDisallow);
    {
      TransferGuard inner(h2d, TransferGuardLevel::kAllow);
      EXPECT_EQ(transfer_guard_level(h2d), TransferGuardLevel::kAllow);
      EXPECT_EQ(transfer_guard_level(d2h), TransferGuardLevel::kDisallow);
      {
        TransferGuard innermost(TransferGuardLevel::kLogExplicit);
        EXPECT_EQ(transfer_guard_level(h2d), TransferGuardLevel::kLogExplicit);
        EXPECT_EQ(transfer_guard_level(d2h), TransferGuardLevel::kLogExplicit);
      }
      EXPECT_EQ(transfer_guard_level(h2d), TransferGuardLevel::kAllow);
      EXPECT_EQ(transfer_guard_level(d2h), TransferGuardLevel::kDisallow);
    }
    EXPECT_EQ(transfer_guard_level(h2d), TransferGuardLevel::kDisallow);
  }
  // Back to the process setting, not to a stale scope.
  for (TransferDirection d : kDirections) EXPECT_EQ(transfer_guard_level(d), TransferGuardLevel::kLog);
}

TEST_F(TransferGuardTest, ScopesAreThreadLocal) {
  TransferGuard mine(TransferGuardLevel::kDisallowExplicit);
  TransferGuardLevel seen_by_other = TransferGuardLevel::kDisallowExplicit;
  bool other_threw = false;
  std::thread other([&] {
    seen_by_other = transfer_guard_level(TransferDirection::kHostToDevice);
    try {
      check_transfer(TransferDirection::kHostToDevice, f32_2x3(), true, "device_put");
    } catch (const TransferGuardError&) {
      other_threw = true;
    }
  });
  other.join();
  EXPECT_EQ(seen_by_other, TransferGuardLevel::kAllow);
  EXPECT_FALSE(other_threw);

  // A scope in another thread, alive while this thread checks, does not leak here either.
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;  // 1: other's scope is open; 2: this thread has checked
  std::thread scoped([&] {
    TransferGuard theirs(TransferGuardLevel::kAllow);
    std::unique_lock<std::mutex> lock(mu);
    phase = 1;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return phase == 2; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return phase == 1; }));
  }
  EXPECT_EQ(transfer_guard_level(TransferDirection::kDeviceToDevice), TransferGuardLevel::kDisallowExplicit);
  {
    std::lock_guard<std::mutex> lock(mu);
    phase = 2;
    cv.notify_all();
  }
  scoped.join();
}

}  // namespace
}  // namespace mcx
