#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/core/config.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/core/error.h"
#include "mcx/core/logging.h"
#include "tests/support/run_command.h"

namespace mcx {
namespace {

using ::testing::HasSubstr;

const Flag<int64_t> kTestInt("MCX_TEST_CORE_INT", 5, "an int flag for tests", int_in_range(1, 10));
const Flag<bool> kTestBool("MCX_TEST_CORE_BOOL", false, "a bool flag for tests");
const Flag<double> kTestDouble("MCX_TEST_CORE_DOUBLE", 0.5, "a double flag for tests");
const Flag<std::string> kTestString("MCX_TEST_CORE_STRING", "a", "a string flag for tests", one_of({"a", "b"}));

// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ConfigTest, DefaultsWhenUnset) {
  unsetenv("MCX_TEST_CORE_INT");
  EXPECT_EQ(*kTestInt.get(), 5);
  EXPECT_EQ(kTestInt.value(), 5);
  EXPECT_EQ(*kTestBool.get(), false);
  EXPECT_EQ(*kTestDouble.get(), 0.5);
  EXPECT_EQ(*kTestString.get(), "a");
  ScopedEnv empty("MCX_TEST_CORE_INT", "");
  EXPECT_EQ(*kTestInt.get(), 5);  // empty means unset
}

TEST(ConfigTest, ParsesEnvironment) {
  {
    ScopedEnv e("MCX_TEST_CORE_INT", "7");
    EXPECT_EQ(*kTestInt.get(), 7);
  }
  for (const char* t : {"1", "true", "TRUE", "yes", "on"}) {
    ScopedEnv e("MCX_TEST_CORE_BOOL", t);
    EXPECT_EQ(*kTestBool.get(), true) << t;
  }
  for (const char* f : {"0", "false", "No", "off"}) {
    ScopedEnv e("MCX_TEST_CORE_BOOL", f);
    EXPECT_EQ(*kTestBool.get(), false) << f;
  }
  ScopedEnv d("MCX_TEST_CORE_DOUBLE", "2.25");
  EXPECT_EQ(*kTestDouble.get(), 2.25);
  ScopedEnv s("MCX_TEST_CORE_STRING", "b");
  EXPECT_EQ(*kTestString.get(), "b");
}

TEST(ConfigTest, ErrorsNameVariableAndValue) {
  {
    ScopedEnv e("MCX_CPU_THREADS", "abc");
    auto r = kCpuThreadsFlag.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("MCX_CPU_THREADS=abc"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("not a valid integer"));
    EXPECT_FALSE(cpu_threads().ok());
    EXPECT_THROW(kCpuThreadsFlag.value(), InvalidArgument);
  }
  {
    ScopedEnv e("MCX_TEST_CORE_INT", "11");
    auto r = kTestInt.get();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("MCX_TEST_CORE_INT=11 is out of range"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("[1, 10]"));
  }
  {
    ScopedEnv e("MCX_TEST_CORE_INT", "3x");
    EXPECT_FALSE(kTestInt.get().ok());
  }
  {
    ScopedEnv e("MCX_TEST_CORE_BOOL", "maybe");
    auto r = kTestBool.get();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("MCX_TEST_CORE_BOOL=maybe is not a boolean"));
  }
  {
    ScopedEnv e("MCX_LOG_LEVEL", "loud");
    auto r = kLogLevelFlag.get();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("MCX_LOG_LEVEL=loud is not one of"));
    auto all = validate_all_flags();
    ASSERT_FALSE(all.ok());
    EXPECT_THAT(std::string(all.message()), HasSubstr("MCX_LOG_LEVEL=loud"));
  }
  EXPECT_TRUE(validate_all_flags().ok());
}

TEST(ConfigTest, ResolvePrecedence) {
  ScopedEnv e("MCX_TEST_CORE_INT", "8");
  EXPECT_EQ(*kTestInt.resolve(std::nullopt), 8);
  EXPECT_EQ(*kTestInt.resolve(3), 3);
  auto bad = kTestInt.resolve(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("option for MCX_TEST_CORE_INT = 0"));
}

TEST(ConfigTest, CpuThreads) {
  {
    ScopedEnv e("MCX_CPU_THREADS", "0");
    EXPECT_EQ(*cpu_threads(), allowed_cpu_count());
  }
  {
    ScopedEnv e("MCX_CPU_THREADS", "3");
    EXPECT_EQ(*cpu_threads(), 3);
  }
  ScopedEnv e("MCX_CPU_THREADS", "-1");
  EXPECT_FALSE(cpu_threads().ok());
}

TEST(ConfigTest, RegistryListsFlags) {
  ScopedEnv e("MCX_TEST_CORE_DOUBLE", "1.5");
  const auto flags = all_flags();
  std::vector<std::string> names;
  for (const auto& f : flags) names.push_back(f.env_var);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_THAT(names, ::testing::IsSupersetOf({"MCX_LOG_LEVEL", "MCX_CPU_THREADS", "MCX_TEST_CORE_INT",
                                              "MCX_TEST_CORE_BOOL", "MCX_TEST_CORE_DOUBLE"}));
  for (const auto& f : flags) {
    if (f.env_var == "MCX_LOG_LEVEL") {
      EXPECT_EQ(f.default_text, "info");
      EXPECT_EQ(f.type, FlagType::kString);
    }
    if (f.env_var == "MCX_CPU_THREADS") {
      EXPECT_EQ(f.default_text, "0");
    }
    if (f.env_var == "MCX_TEST_CORE_DOUBLE") {
      EXPECT_EQ(f.env_value, "1.5");
      EXPECT_EQ(f.type_name, "double");
    }
  }
  const std::string table = flags_markdown_table();
  EXPECT_THAT(table, HasSubstr("| `MCX_CPU_THREADS` | int | `0` |"));
  EXPECT_THAT(table, HasSubstr("| `MCX_LOG_LEVEL` | string | `info` |"));
  {
    const Flag<int64_t> temporary("MCX_TEST_CORE_TEMPORARY", 1, "deregistered when destroyed");
    EXPECT_THAT(flags_markdown_table(), HasSubstr("MCX_TEST_CORE_TEMPORARY"));
  }
  EXPECT_THAT(flags_markdown_table(), ::testing::Not(HasSubstr("MCX_TEST_CORE_TEMPORARY")));
}

TEST(LoggingTest, PrefixLevelAndFormatting) {
  const std::string saved = log_level();
  ASSERT_TRUE(set_log_level("info"));
  ::testing::internal::CaptureStderr();
  set_log_prefix("[p3] ");
  log_info("hello {} {:.2f}", "world", 1.5);
  log_debug("hidden {}", 1);
  log_warn("careful {}%", 50);
  set_log_prefix("[100%] ");
  log_error("after prefix change");
  logger().flush();
  set_log_prefix("");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(out, ::testing::StartsWith("[p3] ["));
  EXPECT_THAT(out, HasSubstr("] [info] hello world 1.50\n[p3] ["));
  EXPECT_THAT(out, HasSubstr("[warning] careful 50%"));
  EXPECT_THAT(out, HasSubstr("[100%] ["));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("hidden")));
  EXPECT_FALSE(set_log_level("loud"));
  EXPECT_TRUE(set_log_level("debug"));
  EXPECT_EQ(log_level(), "debug");
  EXPECT_TRUE(set_log_level(saved));
}

// Runs this binary again with MCX_LOG_LEVEL set, so the logger is created fresh from the environment.
std::string run_child(const std::string& level) {
  return test::run_command("MCX_TEST_LOGGING_CHILD=1 MCX_LOG_LEVEL=" + level + " timeout 30 /proc/" +
                           std::to_string(getpid()) + "/exe --gtest_filter=LoggingChild.ReportLevel 2>&1");
}

TEST(LoggingTest, LevelFromEnvironment) {
  EXPECT_THAT(run_child("error"), HasSubstr("child level: error"));
  EXPECT_THAT(run_child("trace"), HasSubstr("child level: trace"));
  const std::string bad = run_child("loud");
  EXPECT_THAT(bad, HasSubstr("MCX_LOG_LEVEL=loud is not one of"));
  EXPECT_THAT(bad, HasSubstr("child level: info"));
}

TEST(LoggingChild, ReportLevel) {
  if (!std::getenv("MCX_TEST_LOGGING_CHILD")) GTEST_SKIP() << "only run as a child of LevelFromEnvironment";
  logger().flush();
  std::printf("child level: %s\n", log_level().c_str());
}

}  // namespace
}  // namespace mcx
