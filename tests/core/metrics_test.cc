// Metrics (core/metrics.h): the exposition text of every kind, exactly; escaping; programming errors refused;
// counts exact under concurrent updates.
#include "mcx/core/metrics.h"

#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mcx::metrics {
namespace {

using ::testing::HasSubstr;

TEST(Metrics, EveryKindRendersInTheExpositionFormat) {
  Registry r;
  r.counter("jobs_total", "jobs done", {"kind"}).with({"train"}).add(3);
  r.counter("jobs_total", "jobs done", {"kind"}).with({"eval"}).add();
  r.gauge("queue_depth", "batches waiting").with({}).set(2.5);
  Histogram& h = r.histogram("wait_seconds", "waits", {}, {0.1, 1}).with({});
  h.observe(0.05);
  h.observe(0.1);  // on a bound: counts in that bucket (le is "less than or equal")
  h.observe(3);
  r.gauge_callback("tasks", "tasks by state", {"state"}, [] {
    return Registry::Samples{{{"running"}, 2}, {{"done"}, 1}};
  });
  EXPECT_EQ(r.text(),
            "# HELP jobs_total jobs done\n# TYPE jobs_total counter\n"
            "jobs_total{kind=\"eval\"} 1\njobs_total{kind=\"train\"} 3\n"
            "# HELP queue_depth batches waiting\n# TYPE queue_depth gauge\nqueue_depth 2.5\n"
            "# HELP tasks tasks by state\n# TYPE tasks gauge\ntasks{state=\"done\"} 1\ntasks{state=\"running\"} 2\n"
            "# HELP wait_seconds waits\n# TYPE wait_seconds histogram\n"
            "wait_seconds_bucket{le=\"0.1\"} 2\nwait_seconds_bucket{le=\"1\"} 2\n"
            "wait_seconds_bucket{le=\"+Inf\"} 3\nwait_seconds_sum 3.15\nwait_seconds_count 3\n");
}

TEST(Metrics, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.counter("c_total", "line one\nback\\slash", {"path"}).with({"a\"b\\c\nd"}).add();
  EXPECT_THAT(r.text(), HasSubstr("# HELP c_total line one\\nback\\\\slash\n"));
  EXPECT_THAT(r.text(), HasSubstr("c_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(Metrics, ValuesFormatAsTheFormatExpects) {
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(0.5), "0.5");
  EXPECT_EQ(format_value(INFINITY), "+Inf");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_value(NAN), "NaN");
  EXPECT_EQ(format_value(1e20), "1e+20");
}

TEST(Metrics, ProgrammingErrorsAreRefused) {
  Registry r;
  EXPECT_THROW(r.counter("1bad", "x"), std::invalid_argument);
  EXPECT_THROW(r.counter("ok_total", "x", {"le"}), std::invalid_argument);  // reserved for histogram buckets
  EXPECT_THROW(r.counter("ok_total", "x", {"bad-label"}), std::invalid_argument);
  Family<Counter>& c = r.counter("c_total", "x", {"a"});
  EXPECT_THROW(c.with({}), std::invalid_argument);
  EXPECT_THROW(c.with({"1"}).add(-1), std::invalid_argument);
  EXPECT_THROW(r.gauge("c_total", "x", {"a"}), std::invalid_argument);  // another type under the same name
  EXPECT_THROW(r.histogram("h", "x", {}, {1, 0.5}), std::invalid_argument);
  EXPECT_EQ(&r.counter("c_total", "x", {"a"}), &c);  // asked again the same way: the same family
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  Registry r;
  Family<Counter>& c = r.counter("n_total", "n", {"t"});
  Histogram& h = r.histogram("h_seconds", "h", {}, latency_buckets_seconds()).with({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c, &h, t] {
      for (int i = 0; i < 10000; ++i) {
        c.with({std::to_string(t % 2)}).add();
        h.observe(0.002);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.with({"0"}).value() + c.with({"1"}).value(), 40000);
  EXPECT_EQ(h.snapshot().count, 40000u);
  EXPECT_EQ(h.snapshot().cumulative[0], 0u);  // 0.002 > 0.001
  EXPECT_EQ(h.snapshot().cumulative[1], 40000u);
}

}  // namespace
}  // namespace mcx::metrics
