// The CPUs a process may run on (core/cpu_affinity.h), checked against the kernel's own view of the mask
// (/proc/thread-self/status) and through bindings made in a thread of their own (affinity is per thread, so the
// test's other threads keep theirs).
#include "mcx/core/cpu_affinity.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "mcx/core/config.h"

namespace mcx {
namespace {

// The calling thread's CPUs as the kernel reports them ("Cpus_allowed_list:\t0-3,8"), expanded.
std::vector<int> kernel_allowed_list() {
  std::ifstream in("/proc/thread-self/status");
  std::vector<int> cpus;
  for (std::string line; std::getline(in, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "Cpus_allowed_list:")) continue;
    for (absl::string_view range : absl::StrSplit(absl::StripAsciiWhitespace(rest), ',')) {
      std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
      int first = 0, last = 0;
      EXPECT_TRUE(absl::SimpleAtoi(ends[0], &first)) << line;
      EXPECT_TRUE(absl::SimpleAtoi(ends.back(), &last)) << line;
      for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    }
  }
  return cpus;
}

TEST(CpuAffinity, AllowedCpusAreTheKernelsList) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  EXPECT_EQ(cpus, kernel_allowed_list());
  EXPECT_EQ(allowed_cpu_count(), static_cast<int>(cpus.size()));
}

// A thread bound to one CPU sees only that one, and the defaults that size themselves to the CPUs follow it.
TEST(CpuAffinity, BindingNarrowsWhatTheThreadSeesAndItsDefaults) {
  const std::vector<int> before = allowed_cpus();
  const int last = before.back();
  std::thread([&] {
    ASSERT_TRUE(bind_to_cpus({last}).ok());
    EXPECT_EQ(allowed_cpus(), std::vector<int>{last});
    EXPECT_EQ(kernel_allowed_list(), std::vector<int>{last});
    EXPECT_EQ(allowed_cpu_count(), 1);
    if (kCpuThreadsFlag.get().value_or(-1) == 0) {
      EXPECT_EQ(*cpu_threads(), 1);  // MCX_CPU_THREADS=0: one per allowed CPU
    }
  }).join();
  EXPECT_EQ(allowed_cpus(), before);  // this thread's mask is its own
}

TEST(CpuAffinity, RefusesNoCpusAndNumbersOutOfRange) {
  std::thread([] {
    const absl::Status none = bind_to_cpus({});
    EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(none.message().find("expected at least one"), std::string::npos) << none;
    for (int bad : {-1, 1 << 20}) {
      const absl::Status s = bind_to_cpus({bad});
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("CPU " + std::to_string(bad) + " is out of range"), std::string::npos) << s;
    }
  }).join();
}

// Core order is a permutation of its input that keeps the hardware threads of one core together; CPUs without a
// topology (numbers no machine here has) come first, by number.
TEST(CpuAffinity, CoreOrderIsAPermutationThatKeepsCoresTogether) {
  const std::vector<int> cpus = allowed_cpus();
  const std::vector<int> ordered = cpus_in_core_order(cpus);
  EXPECT_EQ(std::multiset<int>(ordered.begin(), ordered.end()), std::multiset<int>(cpus.begin(), cpus.end()));
  auto core_of = [](int cpu) {
    std::ifstream package("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/physical_package_id");
    std::ifstream core("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_id");
    int p = -1, c = -1;
    package >> p;
    core >> c;
    return std::make_pair(p, c);
  };
  std::set<std::pair<int, int>> finished;  // cores already left behind: none may come back
  for (size_t i = 0; i < ordered.size(); ++i) {
    const auto core = core_of(ordered[i]);
    EXPECT_EQ(finished.count(core), 0u) << "CPU " << ordered[i] << " is apart from the other threads of its core";
    if (i + 1 < ordered.size() && core_of(ordered[i + 1]) != core) finished.insert(core);
  }
  if (core_of(cpus.front()).second >= 0) {  // (a container may hide the topology)
    EXPECT_EQ(cpus_in_core_order({cpus.front(), 100003, 100001}), (std::vector<int>{100001, 100003, cpus.front()}));
  }
}

}  // namespace
}  // namespace mcx
