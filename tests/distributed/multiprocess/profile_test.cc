// The profiler across a job (docs/profiling.md): `mcx-run --profile DIR` runs every process traced and merges
// their traces into one Chrome trace-event file that the format checker accepts, every process on its own
// named track; on one clock, the same collective of the two processes overlaps in time (they wait for each
// other), exactly on the shared kernel clock and within the stated error on the coordination service's clock
// (mcx-profile merge --clock reference, the path jobs across hosts take). The job's HTML report renders in a
// headless browser.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mcx/core/text_file.h"
#include "tests/distributed/multiprocess/mp_harness.h"
#include "tests/support/run_command.h"
#include "tools/common/trace_check.h"

namespace mcx::mptest {
namespace {

using nlohmann::json;

json load_merged(const std::string& path) {
  absl::StatusOr<json> doc = tools::parse_trace_events(read_text_file(path).value_or(""));
  EXPECT_TRUE(doc.ok()) << path << ": " << doc.status();
  return doc.ok() ? *doc : json::object({{"traceEvents", json::array()}, {"otherData", json::object()}});
}

// The collectives the two processes ran between them, per process in time order.
std::map<int, std::vector<json>> between_processes(const json& doc) {
  std::map<int, std::vector<json>> by_pid;
  for (const json& e : doc["traceEvents"]) {
    const std::string name = e["name"];
    if (e["ph"] == "X" && e.value("cat", "") == "collective" && name.find(" between processes") != std::string::npos) {
      by_pid[e["pid"].get<int>()].push_back(e);
    }
  }
  for (auto& [pid, events] : by_pid) {
    std::sort(events.begin(), events.end(), [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
  }
  return by_pid;
}

// The largest gap between the k-th collective of process 0 and of process 1 (0: every pair overlaps).
double largest_gap_us(const json& doc) {
  std::map<int, std::vector<json>> c = between_processes(doc);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].size(), c[1].size());
  EXPECT_GE(c[0].size(), 5u);
  double gap = 0;
  for (size_t k = 0; k < std::min(c[0].size(), c[1].size()); ++k) {
    const double a0 = c[0][k]["ts"], a1 = a0 + c[0][k]["dur"].get<double>();
    const double b0 = c[1][k]["ts"], b1 = b0 + c[1][k]["dur"].get<double>();
    gap = std::max(gap, std::max(a0, b0) - std::min(a1, b1));
  }
  return gap;
}

// Runs collectives_worker on 2 processes under mcx-run with `flags` (--profile DIR, --report FILE); returns the
// harness index of mcx-run (exited 0, else a fatal failure in the caller).
int run_traced_job(Harness& h, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {tool_path("mcx-run"), "-n", "2", "--cpu-devices", "1", "--timeout", "60"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--", collectives_worker_path(), "all"});
  const int r = h.spawn("mcx-run", argv, {{"MCX_DEVICE_TIMEOUT_S", "20"}});
  EXPECT_TRUE(h.wait_exit(r, milliseconds(65000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  return r;
}

TEST(ProfileAcrossProcesses, McxRunMergesEveryProcessTraceOntoOneClock) {
  TempDir dir;
  const std::string profile = dir.path() + "/profile";
  Harness h;
  const int r = run_traced_job(h, {"--profile", profile});
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_NE(h.err(r).find("[mcx-run] profile: " + profile + "/job.trace.json (2 process traces"), std::string::npos)
      << h.dump(r);

  const json merged = load_merged(profile + "/job.trace.json");
  std::set<int> pids;
  std::map<std::string, int> categories;
  std::set<std::string> process_names;
  for (const json& e : merged["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] != "M") ++categories[e.value("cat", "")];
    if (e["name"] == "process_name") process_names.insert(e["args"]["name"]);
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  ASSERT_EQ(process_names.size(), 2u);
  EXPECT_EQ(process_names.begin()->rfind("process 0 on ", 0), 0u) << *process_names.begin();
  for (const char* c : {"compile", "launch", "collective", "transfer"}) EXPECT_GT(categories[c], 0) << c;
  EXPECT_EQ(merged["otherData"]["max_clock_error_us"], 0);
  EXPECT_EQ(largest_gap_us(merged), 0.0);

  // The same traces on the coordination service's clock: each process moved by its heartbeats' estimate, the
  // pairs apart by no more than the errors allow.
  const std::string reference = dir.path() + "/reference.json";
  int m = h.spawn("mcx-profile", {tool_path("mcx-profile"), "merge", profile, "-o", reference, "--clock", "reference"});
  ASSERT_TRUE(h.wait_exit(m, milliseconds(20000))) << h.dump(m);
  ASSERT_EQ(h.exit_code(m), 0) << h.dump(m);
  const json on_reference = load_merged(reference);
  const int64_t error = on_reference["otherData"]["max_clock_error_us"];
  ASSERT_GE(error, 1) << "every process had an estimate (heartbeats run every second)";
  EXPECT_LT(error, 100'000);
  EXPECT_LE(largest_gap_us(on_reference), 2.0 * static_cast<double>(error));
}

// mcx-run --report: the job's HTML report renders in a headless browser (Debian's chromium) with no script
// error and no console message, showing both processes' tracks, and a screenshot of it is taken.
TEST(ProfileAcrossProcesses, TheJobReportRendersInAHeadlessBrowser) {
  TempDir dir;
  const std::string report = dir.path() + "/report.html";
  Harness h;
  const int r = run_traced_job(h, {"--report", report});
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_NE(h.err(r).find("[mcx-run] report: " + report), std::string::npos) << h.dump(r);
  EXPECT_TRUE(std::filesystem::exists(report + ".traces/job.trace.json"));

  const std::string chromium = "timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                               "--window-size=1400,1500 --enable-logging=stderr --v=0 ";
  const std::string dom = test::run_command(chromium + "--dump-dom file://" + report + " 2>" + dir.file("chromium.log"));
  const std::string log = read_text_file(dir.file("chromium.log")).value_or("");
  EXPECT_NE(dom.find("<div id=\"status\">rendered</div>"), std::string::npos)
      << dom.substr(dom.find("id=\"status\"") == std::string::npos ? 0 : dom.find("id=\"status\""), 300) << "\n" << log;
  EXPECT_EQ(log.find(":CONSOLE("), std::string::npos) << log;
  EXPECT_NE(dom.find("process 0 on "), std::string::npos);  // the summary and lanes name the processes
  test::run_command(chromium + "--screenshot=" + dir.file("report.png") + " file://" + report + " 2>/dev/null");
  const std::string png = read_text_file(dir.file("report.png")).value_or("");
  ASSERT_GT(png.size(), 10000u) << "no screenshot";
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

TEST(ProfileAcrossProcesses, MergingNothingOrABrokenTraceSaysWhich) {
  TempDir dir;
  Harness h;
  int m = h.spawn("mcx-profile", {tool_path("mcx-profile"), "merge", dir.path()});
  ASSERT_TRUE(h.wait_exit(m, milliseconds(20000)));
  EXPECT_EQ(h.exit_code(m), 1);
  EXPECT_NE(h.err(m).find("no process traces (mcx-trace.*.json) in " + dir.path()), std::string::npos) << h.dump(m);
  std::ofstream(dir.file("mcx-trace.p0.1.json")) << "{\"traceEvents\": [";  // cut short
  int b = h.spawn("mcx-profile", {tool_path("mcx-profile"), "merge", dir.path()});
  ASSERT_TRUE(h.wait_exit(b, milliseconds(20000)));
  EXPECT_EQ(h.exit_code(b), 1);
  EXPECT_NE(h.err(b).find(dir.file("mcx-trace.p0.1.json") + ": not JSON"), std::string::npos) << h.dump(b);
}

}  // namespace
}  // namespace mcx::mptest
