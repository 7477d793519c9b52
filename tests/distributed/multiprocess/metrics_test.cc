// The coordinator's metrics (mcx-coordinator --metrics-address, docs/profiling.md): after a 2-task job of
// barriers, GET /metrics counts what happened (registrations, heartbeats, barriers and their latencies, key-value
// operations, tasks by state); promtool (Prometheus's own checker) accepts the exposition; a real Prometheus
// server scrapes it and answers a query with the job's numbers; other paths and methods are refused.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"
#include "tests/support/run_command.h"

namespace mcx::mptest {
namespace {

// A port free now (bound and released).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The samples of an exposition, "name{labels}" -> value; every line must be a comment or a sample.
std::map<std::string, double> samples_of(const std::string& text) {
  std::map<std::string, double> r;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) (\S+)$)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    std::smatch m;
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not a sample: " << line;
      continue;
    }
    r[m[1]] = std::stod(m[3]);
  }
  return r;
}

TEST(CoordinatorMetrics, AScrapeCountsTheJobAndPrometheusReadsIt) {
  Harness h;
  const std::string address = h.start_coordinator(2, {"--metrics-address", "127.0.0.1:0"});
  ASSERT_FALSE(address.empty());
  ASSERT_TRUE(h.wait_output(h.coordinator_index(), "/metrics", milliseconds(10000))) << h.dump(h.coordinator_index());
  std::smatch m;
  const std::string coord_out = h.out(h.coordinator_index());
  ASSERT_TRUE(std::regex_search(coord_out, m, std::regex(R"(metrics on (http://127\.0\.0\.1:(\d+)/metrics))")))
      << coord_out;
  const std::string url = m[1];
  const std::string metrics_port = m[2];

  std::vector<int> workers;
  for (int id = 0; id < 2; ++id) {
    workers.push_back(h.spawn("w" + std::to_string(id), {worker_path(), "barriers", "1"},
                              Harness::worker_env(address, 2, id)));
  }
  ASSERT_TRUE(h.wait_exits(workers, milliseconds(30000))) << h.dump_all();
  for (int w : workers) ASSERT_EQ(h.exit_code(w), 0) << h.dump(w);

  const std::string text = test::run_command("curl -sS --max-time 10 " + url);
  const std::map<std::string, double> s = samples_of(text);
  EXPECT_EQ(s.at("mcx_coordinator_registrations_total{kind=\"register\"}"), 2) << text;
  EXPECT_GE(s.at("mcx_coordinator_heartbeats_total"), 2) << text;  // each task's first heartbeat goes at once
  const double barriers = s.at("mcx_coordinator_barriers_total{result=\"ok\"}");
  EXPECT_GE(barriers, 10) << text;  // a barrier every 5 ms for a second, and the shutdown barrier
  EXPECT_EQ(s.at("mcx_coordinator_barrier_seconds_count"), barriers) << text;
  EXPECT_EQ(s.at("mcx_coordinator_barrier_seconds_bucket{le=\"+Inf\"}"), barriers) << text;
  EXPECT_GT(s.at("mcx_coordinator_kv_operations_total{op=\"insert\"}"), 0) << text;
  EXPECT_EQ(s.at("mcx_coordinator_tasks{state=\"shutdown\"}"), 2) << text;
  EXPECT_EQ(s.at("mcx_coordinator_tasks{state=\"connected\"}"), 0) << text;
  EXPECT_EQ(s.at("mcx_coordinator_task_failures_total"), 0) << text;
  EXPECT_GT(s.at("mcx_coordinator_fast_path_bytes_total{direction=\"received\"}"), 0) << text;
  EXPECT_GT(s.at("mcx_coordinator_fast_path_bytes_total{direction=\"sent\"}"), 0) << text;
  EXPECT_EQ(s.at("mcx_coordinator_rate_limited_requests_total{transport=\"fast_path\"}"), 0) << text;

  // Prometheus's own checker of the exposition format (and its naming conventions).
  test::TempDir dir;
  std::ofstream(dir.file("metrics.txt")) << text;
  const std::string lint = test::run_command("promtool check metrics < " + dir.file("metrics.txt") + " 2>&1; echo rc=$?");
  EXPECT_NE(lint.find("rc=0"), std::string::npos) << lint;

  // A real Prometheus server scrapes the endpoint; its query API then answers with the job's registrations.
  const int web_port = free_port();
  std::ofstream(dir.file("prometheus.yml"))
      << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mcx-coordinator\n    static_configs:\n"
         "      - targets: ['127.0.0.1:" << metrics_port << "']\n";
  const int prom = h.spawn("prometheus", {"/usr/bin/prometheus", "--config.file=" + dir.file("prometheus.yml"),
                                          "--storage.tsdb.path=" + dir.file("tsdb"),
                                          "--web.listen-address=127.0.0.1:" + std::to_string(web_port)});
  const std::string query = "curl -sS --max-time 5 'http://127.0.0.1:" + std::to_string(web_port) +
                            "/api/v1/query?query=mcx_coordinator_registrations_total' 2>&1";
  std::string answer;
  const bool scraped = h.run_until([&] {
    answer = test::run_command(query);
    return answer.find("\"kind\":\"register\"") != std::string::npos;
  }, milliseconds(60000));
  EXPECT_TRUE(scraped) << answer << "\n" << h.dump(prom);
  EXPECT_NE(answer.find("\"job\":\"mcx-coordinator\""), std::string::npos) << answer;
  EXPECT_NE(answer.find(",\"2\"]"), std::string::npos) << answer;  // the value, as the query API writes it
}

TEST(CoordinatorMetrics, OnlyGetOfTheMetricsPathIsServed) {
  Harness h;
  const std::string address = h.start_coordinator(1, {"--metrics-address", "127.0.0.1:0"});
  ASSERT_FALSE(address.empty());
  ASSERT_TRUE(h.wait_output(h.coordinator_index(), "/metrics", milliseconds(10000)));
  std::smatch m;
  const std::string coord_out = h.out(h.coordinator_index());
  ASSERT_TRUE(std::regex_search(coord_out, m, std::regex(R"(metrics on http://(127\.0\.0\.1:\d+)/metrics)")));
  const std::string base = "http://" + std::string(m[1]);
  auto status = [](const std::string& cmd) { return test::run_command(cmd + " -s -o /dev/null -w '%{http_code}'"); };
  EXPECT_EQ(status("curl --max-time 5 " + base + "/metrics"), "200");
  EXPECT_EQ(status("curl --max-time 5 " + base + "/"), "404");
  EXPECT_EQ(status("curl --max-time 5 -X POST " + base + "/metrics"), "405");
  // A client that never finishes its request does not hold the endpoint: the next scrape is answered.
  const int silent = h.spawn("silent", {"/bin/bash", "-c", "exec 3<>/dev/tcp/" + std::string(m[1]).replace(std::string(m[1]).find(':'), 1, "/") + "; sleep 20"});
  (void)silent;
  EXPECT_EQ(status("curl --max-time 15 " + base + "/metrics"), "200");
}

}  // namespace
}  // namespace mcx::mptest
