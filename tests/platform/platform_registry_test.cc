// The platform registry and MCX_PLATFORMS (platform/platform_registry.h), with platforms made for the test:
// registration, lookup, creation once, the default order by priority, and every malformed or unusable list.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/platform/platform_registry.h"

namespace mcx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A platform that only has a name and a usability: the registry never compiles or moves data.
class NamedPlatform final : public Platform {
 public:
  NamedPlatform(std::string name, absl::Status usable) : name_(std::move(name)), usable_(std::move(usable)) {}
  std::string_view name() const override { return name_; }
  absl::Status usable() const override { return usable_; }
  std::vector<KeyComponent> compile_key() const override { return {{"name", name_}}; }
  absl::StatusOr<std::shared_ptr<const Executable>> compile(const ir::Program&) const override {
    return absl::UnimplementedError("test platform");
  }
  absl::StatusOr<std::shared_ptr<const Executable>> deserialize(std::string_view) const override {
    return absl::UnimplementedError("test platform");
  }
  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> from_host(const Buffer&, int) const override {
    return absl::UnimplementedError("test platform");
  }
  absl::StatusOr<Buffer> to_host(const DeviceBuffer&) const override { return absl::UnimplementedError("test"); }

 private:
  std::string name_;
  absl::Status usable_;
};

// Registers, once per process, the platforms every test here sees:
//   low (priority 1), high (priority 50), broken (priority 90: not usable), failing (100: its factory fails).
int* factory_calls() {
  static int calls = 0;
  return &calls;
}
void register_test_platforms() {
  static const bool done = [] {
    auto named = [](std::string name, absl::Status usable) -> PlatformFactory {
      return [name, usable]() -> absl::StatusOr<std::unique_ptr<Platform>> {
        ++*factory_calls();
        return std::make_unique<NamedPlatform>(name, usable);
      };
    };
    EXPECT_TRUE(register_platform("low", 1, named("low", absl::OkStatus())).ok());
    EXPECT_TRUE(register_platform("high", 50, named("high", absl::OkStatus())).ok());
    EXPECT_TRUE(register_platform("broken", 90,
                                  named("broken", absl::FailedPreconditionError("[broken] no driver found")))
                    .ok());
    EXPECT_TRUE(register_platform("failing", 100, []() -> absl::StatusOr<std::unique_ptr<Platform>> {
                  return absl::UnavailableError("[failing] the device is lost");
                }).ok());
    return true;
  }();
  (void)done;
}

std::vector<std::string> names(const std::vector<Platform*>& ps) {
  std::vector<std::string> out;
  for (Platform* p : ps) out.emplace_back(p->name());
  return out;
}

TEST(PlatformRegistry, ListsByPriorityAndCreatesEachPlatformOnce) {
  register_test_platforms();
  EXPECT_THAT(registered_platforms(), ElementsAre("failing", "broken", "high", "low"));
  absl::StatusOr<Platform*> a = find_platform("high");
  ASSERT_TRUE(a.ok()) << a.status();
  const int calls = *factory_calls();
  absl::StatusOr<Platform*> b = find_platform("high");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*factory_calls(), calls);
  EXPECT_EQ((*a)->name(), "high");
}

TEST(PlatformRegistry, UnknownNamesAndFailedFactoriesAreClearErrors) {
  register_test_platforms();
  absl::StatusOr<Platform*> none = find_platform("tpu");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no platform 'tpu' in this build (registered: failing, broken, high, low)"));
  for (int i = 0; i < 2; ++i) {  // the factory's error, every time
    absl::StatusOr<Platform*> failing = find_platform("failing");
    ASSERT_FALSE(failing.ok());
    EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(failing.status().message()), HasSubstr("the device is lost"));
  }
}

TEST(PlatformRegistry, RegistrationChecksNamesAndRefusesReplacingAPlatformInUse) {
  register_test_platforms();
  auto factory = []() -> absl::StatusOr<std::unique_ptr<Platform>> {
    return std::make_unique<NamedPlatform>("x", absl::OkStatus());
  };
  for (const char* bad : {"", "CUDA", "gpu-0", "a b"}) {
    const absl::Status st = register_platform(bad, 0, factory);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(st.message()), HasSubstr("expected a platform name of lower-case letters")) << bad;
  }
  ASSERT_TRUE(find_platform("low").ok());
  const absl::Status again = register_platform("low", 7, factory);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.message()), HasSubstr("'low' is in use already"));
}

TEST(PlatformRegistry, AnEmptyListSelectsEveryUsablePlatformByPriority) {
  register_test_platforms();
  for (const char* empty : {"", "  "}) {
    absl::StatusOr<std::vector<Platform*>> ps = select_platforms(empty);
    ASSERT_TRUE(ps.ok()) << ps.status();
    EXPECT_THAT(names(*ps), ElementsAre("high", "low"));  // failing and broken are left out
  }
}

TEST(PlatformRegistry, AListSelectsInItsOwnOrder) {
  register_test_platforms();
  absl::StatusOr<std::vector<Platform*>> ps = select_platforms(" low , high");
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(names(*ps), ElementsAre("low", "high"));
  ps = select_platforms("high");
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(names(*ps), ElementsAre("high"));
}

TEST(PlatformRegistry, BadListsNameWhatIsWrong) {
  register_test_platforms();
  struct Case {
    const char* list;
    absl::StatusCode code;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"low,,high", absl::StatusCode::kInvalidArgument, "MCX_PLATFORMS='low,,high': expected platform names"},
           {"low,low", absl::StatusCode::kInvalidArgument, "MCX_PLATFORMS='low,low' names 'low' twice"},
           {"tpu,low", absl::StatusCode::kInvalidArgument, "MCX_PLATFORMS='tpu,low': [platform] no platform 'tpu'"},
           {"broken", absl::StatusCode::kFailedPrecondition, "MCX_PLATFORMS='broken': [broken] no driver found"},
           {"low,failing", absl::StatusCode::kUnavailable, "MCX_PLATFORMS='low,failing': [failing] the device is lost"},
       }) {
    absl::StatusOr<std::vector<Platform*>> ps = select_platforms(c.list);
    ASSERT_FALSE(ps.ok()) << c.list;
    EXPECT_EQ(ps.status().code(), c.code) << c.list << ": " << ps.status();
    EXPECT_THAT(std::string(ps.status().message()), HasSubstr(c.message)) << c.list;
  }
}

TEST(PlatformRegistry, SelectedPlatformsReadsMcxPlatforms) {
  register_test_platforms();
  const char* saved = std::getenv("MCX_PLATFORMS");
  const std::string saved_value = saved ? saved : "";
  setenv("MCX_PLATFORMS", "low", 1);
  absl::StatusOr<std::vector<Platform*>> ps = selected_platforms();
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(names(*ps), ElementsAre("low"));
  unsetenv("MCX_PLATFORMS");
  ps = selected_platforms();
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_THAT(names(*ps), ElementsAre("high", "low"));
  if (saved) setenv("MCX_PLATFORMS", saved_value.c_str(), 1);
}

}  // namespace
}  // namespace mcx
