// The recorded live sets (collectives/live_set.h): which agreement governs a group of processes, newer generations
// replacing older ones over the same processes, and exclusion. The records are process-wide, so each test
// uses process ids no other test uses.
#include "mcx/collectives/live_set.h"

#include "gtest/gtest.h"
#include "mcx/core/error.h"

namespace mcx {
namespace {

TEST(LiveSet, NothingGovernsProcessesNoAgreementAskedAbout) {
  EXPECT_FALSE(live_set_for({100, 101}).has_value());
  EXPECT_FALSE(excludes_any({100, 101}));
}

TEST(LiveSet, TheNewestAgreementOverASupersetGoverns) {
  record_live_set(LiveSet{5, {10, 11, 12}, {10, 12}, {7, 9}});
  ASSERT_TRUE(live_set_for({10, 12}).has_value());
  EXPECT_EQ(live_set_for({10, 12})->generation, 5u);
  EXPECT_TRUE(live_set_for({11})->excludes(11));
  EXPECT_FALSE(live_set_for({11})->excludes(10));
  EXPECT_FALSE(live_set_for({11})->excludes(13));  // not asked about: not excluded
  EXPECT_TRUE(excludes_any({10, 11}));
  EXPECT_FALSE(excludes_any({10, 12}));
  EXPECT_FALSE(live_set_for({10, 13}).has_value());  // 13 was not asked about
  // A newer agreement over a subset governs the groups within it; the older one still governs the rest.
  record_live_set(LiveSet{6, {10, 12}, {10, 12}, {7, 9}});
  EXPECT_EQ(live_set_for({10, 12})->generation, 6u);
  EXPECT_EQ(live_set_for({10, 11})->generation, 5u);
  EXPECT_EQ(live_set_for({10, 11})->to_string(), "generation 5 (processes {10,12} of {10,11,12})");
}

TEST(LiveSet, AnOlderOrRepeatedGenerationChangesNothing) {
  record_live_set(LiveSet{8, {20, 21}, {20, 21}, {1, 2}});
  record_live_set(LiveSet{7, {20, 21}, {20}, {1}});  // older: ignored
  EXPECT_FALSE(excludes_any({20, 21}));
  record_live_set(LiveSet{9, {20, 21}, {20}, {1}});  // newer: 21 is gone
  EXPECT_TRUE(excludes_any({20, 21}));
  record_live_set(LiveSet{10, {20, 21}, {20, 21}, {1, 3}});  // 21 back with a new incarnation
  EXPECT_FALSE(excludes_any({20, 21}));
  EXPECT_EQ(live_set_for({21})->incarnations, (std::vector<uint64_t>{1, 3}));
}

TEST(LiveSet, AReportedFailureHoldsUntilTheProcessIsSeenWithAnotherIncarnation) {
  EXPECT_TRUE(reported_process_failure({30, 31}).ok());
  record_process_failure(31, 5, absl::UnavailableError("process 31 died"));
  const absl::Status failed = reported_process_failure({30, 31});
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed_process(failed), 31);  // marked: thrown as mcx::ProcessFailure
  EXPECT_TRUE(reported_process_failure({30}).ok());
  record_process_alive(31, 5);  // the same incarnation: still failed
  EXPECT_FALSE(reported_process_failure({31}).ok());
  record_process_alive(31, 6);  // restarted
  EXPECT_TRUE(reported_process_failure({31}).ok());
  // An agreement that includes a restarted process clears it too.
  record_process_failure(32, 7, absl::UnavailableError("process 32 died"));
  record_live_set(LiveSet{1, {32, 33}, {32, 33}, {8, 9}});
  EXPECT_TRUE(reported_process_failure({32}).ok());
}

}  // namespace
}  // namespace mcx
