// The profiler (core/profiler.h): sessions write Chrome trace-event JSON that the format checker accepts, with
// every event recorded while they ran, on its thread, with its arguments; nothing is recorded outside one.

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "mcx/core/text_file.h"
#include "mcx/core/error.h"
#include "mcx/core/profiler.h"
#include "tests/support/temp_dir.h"
#include "tools/common/trace_check.h"

namespace mcx {
namespace {

using nlohmann::json;

// The events of `doc` named `name`.
std::vector<json> named(const json& doc, const std::string& name) {
  std::vector<json> r;
  for (const json& e : doc["traceEvents"]) {
    if (e["name"] == name) r.push_back(e);
  }
  return r;
}

json load(const std::string& path) {
  absl::StatusOr<json> doc = tools::parse_trace_events(read_text_file(path).value_or(""));
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? *doc : json::object({{"traceEvents", json::array()}});
}

TEST(Profiler, RecordsNothingOutsideASession) {
  ASSERT_FALSE(profiler::active());
  profiler::Scope s("compile", "outside");
  EXPECT_FALSE(s.recording());
  test::TempDir dir;
  ASSERT_TRUE(profiler::start_session(dir.path()).ok());
  absl::StatusOr<std::string> path = profiler::stop_session();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_TRUE(named(load(*path), "outside").empty());
}

TEST(Profiler, ASessionWritesScopesInstantsAndCountersOfEveryThread) {
  test::TempDir dir;
  ASSERT_TRUE(profiler::start_session(dir.path() + "/nested/dir").ok());
  ASSERT_TRUE(profiler::active());
  {
    profiler::Scope s("launch", "step \"7\"\n");
    s.arg("bytes", int64_t{4096}).arg("ratio", 0.5).arg("peers", "1,2");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  profiler::instant("fault_tolerance", "peer lost", {{"process", int64_t{3}}});
  profiler::counter("data", "batches ready", 2.0);
  std::thread([] {
    profiler::set_thread_name("worker \\ one");
    profiler::Scope s("collective", "all_reduce");
  }).join();
  absl::StatusOr<std::string> path = profiler::stop_session();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(std::filesystem::path(*path).filename().string(),
            "mcx-trace." + std::to_string(getpid()) + ".json");
  const json doc = load(*path);

  const std::vector<json> step = named(doc, "step \"7\"\n");
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0]["ph"], "X");
  EXPECT_EQ(step[0]["cat"], "launch");
  EXPECT_EQ(step[0]["pid"], getpid());
  EXPECT_GE(step[0]["dur"].get<double>(), 20'000.0);  // microseconds
  EXPECT_LT(step[0]["dur"].get<double>(), 2'000'000.0);
  EXPECT_EQ(step[0]["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(step[0]["args"]["ratio"].get<double>(), 0.5);
  EXPECT_EQ(step[0]["args"]["peers"], "1,2");
  const std::vector<json> lost = named(doc, "peer lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["ph"], "i");
  EXPECT_EQ(lost[0]["args"]["process"], 3);
  EXPECT_GE(lost[0]["ts"].get<double>(), step[0]["ts"].get<double>() + step[0]["dur"].get<double>());
  const std::vector<json> ready = named(doc, "batches ready");
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0]["ph"], "C");
  EXPECT_DOUBLE_EQ(ready[0]["args"]["value"].get<double>(), 2.0);

  // The other thread's event is on its own, named track.
  const std::vector<json> reduce = named(doc, "all_reduce");
  ASSERT_EQ(reduce.size(), 1u);
  EXPECT_NE(reduce[0]["tid"], step[0]["tid"]);
  bool named_thread = false;
  for (const json& m : named(doc, "thread_name")) {
    named_thread |= m["tid"] == reduce[0]["tid"] && m["args"]["name"] == "worker \\ one";
  }
  EXPECT_TRUE(named_thread);
  EXPECT_EQ(named(doc, "process_name").size(), 1u);

  // The clocks at the start, for putting several processes' traces on one clock.
  const json& other = doc["otherData"];
  EXPECT_EQ(other["clock"], "CLOCK_MONOTONIC");
  EXPECT_LE(other["start_monotonic_us"].get<double>(), step[0]["ts"].get<double>());
  EXPECT_GT(other["start_realtime_us"].get<int64_t>(), int64_t{1'600'000'000} * 1'000'000);
  EXPECT_EQ(other["dropped_events"], 0);
  EXPECT_FALSE(profiler::active());
}

TEST(Profiler, AProcessOfAJobIsNamedByItsIndex) {
  test::TempDir dir;
  profiler::set_process(2, "process 2 on host-a");
  profiler::Session session(dir.path());
  { profiler::Scope s("compile", "plan"); }
  const std::string path = session.stop();
  profiler::set_process(-1, "");
  EXPECT_EQ(std::filesystem::path(path).filename().string(), "mcx-trace.p2." + std::to_string(getpid()) + ".json");
  const json doc = load(path);
  ASSERT_EQ(named(doc, "plan").size(), 1u);
  EXPECT_EQ(named(doc, "plan")[0]["pid"], 2);
  EXPECT_EQ(named(doc, "process_name")[0]["args"]["name"], "process 2 on host-a");
  EXPECT_EQ(doc["otherData"]["process_index"], 2);
}

TEST(Profiler, SessionsDoNotOverlapAndStopNeedsOne) {
  test::TempDir dir;
  EXPECT_TRUE(absl::IsFailedPrecondition(profiler::stop_session().status()));
  ASSERT_TRUE(profiler::start_session(dir.path()).ok());
  const absl::Status again = profiler::start_session(dir.path());
  EXPECT_TRUE(absl::IsFailedPrecondition(again)) << again;
  EXPECT_NE(again.message().find("already running"), std::string::npos) << again;
  EXPECT_THROW(profiler::start(dir.path()), Error);
  EXPECT_TRUE(profiler::stop_session().ok());
  EXPECT_THROW(profiler::stop(), Error);
}

TEST(Profiler, ADirectoryThatCannotBeMadeIsAnErrorNamingIt) {
  test::TempDir dir;
  std::ofstream(dir.file("plain")) << "a file, not a directory";
  const absl::Status s = profiler::start_session(dir.file("plain") + "/traces");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir.file("plain") + "/traces"), std::string::npos) << s;
  EXPECT_FALSE(profiler::active());
  // The failed start left no session behind.
  EXPECT_TRUE(profiler::start_session(dir.path()).ok());
  EXPECT_TRUE(profiler::stop_session().ok());
}

TEST(Profiler, EventsPastTheCapAreCountedAndDropped) {
  test::TempDir dir;
  ASSERT_TRUE(profiler::start_session(dir.path()).ok());
  for (int64_t i = 0; i < profiler::kMaxEvents + 10; ++i) profiler::instant("data", "e");
  absl::StatusOr<std::string> path = profiler::stop_session();
  ASSERT_TRUE(path.ok()) << path.status();
  const std::string text = read_text_file(*path).value_or("");
  EXPECT_NE(text.find("\"dropped_events\":10,"), std::string::npos);
  size_t events = 0;
  for (size_t at = text.find("\"name\":\"e\""); at != std::string::npos; at = text.find("\"name\":\"e\"", at + 1)) ++events;
  EXPECT_EQ(events, static_cast<size_t>(profiler::kMaxEvents));
}

// MCX_PROFILE_DIR traces a whole process: the session starts at its first event and the file is written at exit.
// The process is a death-test child started afresh ("threadsafe" style re-executes this binary), so no earlier
// test of this process has settled the profiler's state before the variable is read.
TEST(Profiler, MCX_PROFILE_DIRTracesAProcessAndWritesAtExit) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  // The parent makes the directory and names itself; the re-executed child inherits both variables and sees
  // another process's pid, so it makes no directory of its own.
  const char* parent = std::getenv("MCX_PROFILER_TEST_PARENT");
  const bool child = parent != nullptr && std::to_string(getpid()) != parent;
  std::optional<test::TempDir> dir;
  if (!child) {
    dir.emplace();
    setenv("MCX_PROFILE_DIR", dir->path().c_str(), 1);
    setenv("MCX_PROFILER_TEST_PARENT", std::to_string(getpid()).c_str(), 1);
  }
  EXPECT_EXIT(
      {
        bool recorded = false;
        {
          profiler::Scope s("compile", "from the environment");
          recorded = s.recording();
        }
        std::exit(recorded ? 0 : 3);  // exit() runs the profiler's exit step, which writes the file
      },
      ::testing::ExitedWithCode(0), "");
  unsetenv("MCX_PROFILER_TEST_PARENT");
  unsetenv("MCX_PROFILE_DIR");
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir->path())) files.push_back(f.path().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("mcx-trace."), std::string::npos);
  EXPECT_EQ(named(load(files[0]), "from the environment").size(), 1u);
}

// The checker the tests above rely on refuses what the trace viewers cannot read.
TEST(TraceEventChecker, RefusesWhatTheViewersCannotRead) {
  const std::string ok = R"({"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":2})";
  EXPECT_TRUE(tools::parse_trace_events("{\"traceEvents\":[" + ok + "]}").ok());
  for (const char* bad : {R"({"ph":"X","name":"a","pid":1,"tid":1,"ts":1})",            // no dur
                          R"({"ph":"X","name":"a","pid":"1","tid":1,"ts":1,"dur":2})",  // pid a string
                          R"({"ph":"Q","name":"a","pid":1,"tid":1,"ts":1})",            // unknown phase
                          R"({"ph":"i","name":"a","pid":1,"tid":1,"ts":1,"s":"x"})",    // instant scope
                          R"({"ph":"C","name":"a","pid":1,"tid":1,"ts":1,"args":{"v":"x"}})",
                          R"({"ph":"M","name":"process_name","pid":1,"tid":0,"args":{}})",
                          R"({"ph":"X","name":"a","pid":1,"tid":1,"ts":-1,"dur":2})"}) {
    EXPECT_FALSE(tools::parse_trace_events("{\"traceEvents\":[" + ok + "," + bad + "]}").ok()) << bad;
  }
  EXPECT_FALSE(tools::parse_trace_events("[]").ok());
  EXPECT_FALSE(tools::parse_trace_events("{\"traceEvents\":[").ok());
}

}  // namespace
}  // namespace mcx
