// ClockOffsetEstimate (distributed/coordination/clock_offset.h): the offset of a clock that is known exactly,
// through round trips of every split, within the error it states; the shortest round trip of the window wins.
#include "mcx/distributed/coordination/clock_offset.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace mcx::distributed {
namespace {

TEST(ClockOffsetEstimate, NoSampleNoEstimate) {
  ClockOffsetEstimate c;
  EXPECT_EQ(c.estimate().error_us, -1);
}

TEST(ClockOffsetEstimate, TheTrueOffsetLiesWithinTheStatedErrorWhateverTheSplitOfTheRoundTrip) {
  constexpr int64_t kTrueOffset = 1'234'567;  // service = local + kTrueOffset
  for (int64_t there : {0, 1, 50, 400, 999}) {
    for (int64_t back : {0, 1, 50, 400, 999}) {
      ClockOffsetEstimate c;
      const int64_t sent = 10'000'000;
      const int64_t service = sent + there + kTrueOffset;  // the service reads its clock on arrival
      c.add(sent, service, sent + there + back);
      const ClockOffsetEstimate::Sample e = c.estimate();
      EXPECT_LE(std::llabs(e.offset_us - kTrueOffset), e.error_us) << there << " " << back;
      EXPECT_LE(e.error_us, std::max<int64_t>(1, (there + back + 1) / 2));
    }
  }
}

TEST(ClockOffsetEstimate, TheShortestRoundTripOfTheRecentWindowWins) {
  ClockOffsetEstimate c;
  c.add(0, 5'000 + 100, 10'000);      // round trip 10 ms: offset 100 +- 5000
  c.add(20'000, 20'300 + 100, 20'600);  // 600 us: offset 100 +- 300
  c.add(30'000, 34'000, 40'000);        // 10 ms, and skewed
  EXPECT_EQ(c.estimate().offset_us, 100);
  EXPECT_EQ(c.estimate().error_us, 300);
  // The good sample leaves the window after kWindow newer ones.
  for (int i = 0; i < ClockOffsetEstimate::kWindow; ++i) c.add(100'000 + i * 1000, 100'000 + i * 1000 + 500 + 7, 100'000 + i * 1000 + 1000);
  EXPECT_EQ(c.estimate().error_us, 500);
  EXPECT_EQ(c.estimate().offset_us, 7);
}

TEST(ClockOffsetEstimate, AClockGoingBackwardsIsIgnored) {
  ClockOffsetEstimate c;
  c.add(1000, 5000, 900);
  EXPECT_EQ(c.estimate().error_us, -1);
}

}  // namespace
}  // namespace mcx::distributed
