// mp_worker: the program the multi-process tests launch (through mcx-run or directly with MCX_* set).
// One mode per scenario; it prints "STARTING" before initializing, "READY <pid>" once initialized (so a test
// knows when to kill) and "ERROR <code>: <message>" for an expected failure, then exits 1 (0 on success).
// With MP_WORKER_NOTICE=1 a failure of another task is printed ("NOTICE <message>") instead of ending this
// process (for recoverable jobs).
//
//   mp_worker hello                 initialize, barrier, shutdown
//   mp_worker init                  initialize and shutdown (bad-config tests read the error)
//   mp_worker wait SECONDS          initialize, print READY, sleep (up to SECONDS), shutdown
//   mp_worker barrier NAME SECONDS  initialize, READY, barrier NAME with timeout SECONDS, shutdown
//   mp_worker barriers SECONDS      initialize, READY, barriers 5 ms apart (5 s timeout each) for SECONDS;
//                                   prints "BARRIERS <count> slowest_ms <ms>"
//   mp_worker stuck ID SECONDS      initialize, READY; task ID sleeps SECONDS, the others meet at a barrier
//                                   with a 2 s timeout (expected to fail naming task ID)
//   mp_worker kv_limits             initialize; a 2000-byte key and a 5 MiB value must be refused
//   mp_worker crash ID CODE         initialize; task ID exits with CODE, the others wait at a barrier
//   mp_worker flaky ID              initialize; task ID exits 7 on its first run (MCX_RESTART_COUNT=0); all
//                                   then meet at barrier "flaky/done" (recoverable jobs survive this)
//   mp_worker live_set ID SECONDS   initialize, READY; task ID sleeps SECONDS, the others agree on the live
//                                   tasks and print "LIVE tasks=<ids>"
//   mp_worker stale                 no initialize: with a raw gRPC client register task 0 of 1, then send a
//                                   heartbeat with another incarnation (must be refused as stale)
//   mp_worker churn AFTER           initialize; loop: barrier, KV write + blocking read of the next task's
//                                   entry, delete of its own older entry, a named live-set agreement over all
//                                   tasks whose payload says whether this task has rejoined a restarted
//                                   coordinator (prints LOOPING after a few rounds); stops AFTER rounds after
//                                   every task has rejoined, reads mcx/task/*/topology, prints "TOPOLOGY <count>",
//                                   "GENERATIONS <list>" and "CHURN DONE rounds=<n> rejoins=<n>" (checks print
//                                   "CHURN FAIL ..." and exit 1)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "mcx/core/error.h"
#include "mcx/distributed/distributed.h"
#include "mcx/distributed/rpc/grpc_client.h"

namespace dist = mcx::distributed;

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

int report(const absl::Status& s) {
  std::printf("ERROR %s: %s\n", absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
  std::fflush(stdout);
  return 1;
}

void ready() {
  std::printf("READY %d task %d\n", static_cast<int>(getpid()), dist::agent()->task_id());
  std::fflush(stdout);
}

int finish() {
  absl::Status s = dist::shutdown_or_status();
  if (!s.ok()) return report(s);
  std::printf("DONE\n");
  std::fflush(stdout);
  return 0;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int churn_fail(const std::string& what) {
  std::printf("CHURN FAIL %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

// See "mp_worker churn" above: the control plane in a loop, across coordinator restarts.
int churn(dist::CoordinationAgent* agent, int after) {
  const int me = agent->task_id();
  const int n = agent->num_tasks();
  const absl::Duration wait = absl::Seconds(20);
  std::vector<uint64_t> generations;
  int rounds_after = 0;
  int round = 0;
  for (;; ++round) {
    if (absl::Status s = agent->barrier("churn", wait); !s.ok()) return report(s);
    const std::string mine = absl::StrCat("churn/", me, "/", round);
    if (absl::Status s = agent->kv_insert(mine, absl::StrCat(round)); !s.ok()) return report(s);
    absl::StatusOr<std::string> next = agent->kv_get(absl::StrCat("churn/", (me + 1) % n, "/", round), wait);
    if (!next.ok()) return report(next.status());
    if (*next != absl::StrCat(round)) return churn_fail(absl::StrCat("round ", round, " read '", *next, "'"));
    // Everyone passed this round's barrier, so the previous round's entries were read.
    if (round > 0) {
      absl::StatusOr<int64_t> d = agent->kv_delete(absl::StrCat("churn/", me, "/", round - 1));
      if (!d.ok()) return report(d.status());
    }
    dist::LiveSetRequest request;
    request.name = "churn";
    request.payload = agent->rejoins() > 0 ? "1" : "0";
    absl::StatusOr<dist::LiveTasks> live = agent->get_live_tasks(request, wait);
    if (!live.ok()) return report(live.status());
    if (static_cast<int>(live->tasks.size()) != n) {
      return churn_fail(absl::StrCat("round ", round, ": ", live->tasks.size(), " live tasks of ", n));
    }
    if (!generations.empty() && live->generation < generations.back()) {
      return churn_fail(absl::StrCat("the live-set generation went back from ", generations.back(), " to ",
                                     live->generation));
    }
    if (generations.empty() || live->generation != generations.back()) generations.push_back(live->generation);
    if (round == 5) {
      std::printf("LOOPING\n");
      std::fflush(stdout);
    }
    bool all_rejoined = true;
    for (const std::string& p : live->payloads) all_rejoined = all_rejoined && p == "1";
    if (all_rejoined && ++rounds_after >= after) break;  // every task decides at the same round
  }
  // What a restarted process reads to learn the job's devices.
  absl::StatusOr<std::vector<dist::KeyValue>> entries = agent->kv_dir("mcx/task");
  if (!entries.ok()) return report(entries.status());
  size_t topologies = 0;
  for (const dist::KeyValue& e : *entries) topologies += absl::EndsWith(e.key, "/topology") ? 1 : 0;
  for (int p = 0; p < n; ++p) {
    absl::StatusOr<std::string> v = agent->kv_get(dist::topology_key(p), absl::Seconds(5));
    if (!v.ok()) return report(v.status());
  }
  std::string gens;
  for (uint64_t g : generations) absl::StrAppend(&gens, gens.empty() ? "" : " ", g);
  std::printf("TOPOLOGY %zu\nGENERATIONS %s\nCHURN DONE rounds=%d rejoins=%d\n", topologies, gens.c_str(), round + 1,
              agent->rejoins());
  std::fflush(stdout);
  return finish();
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mp_worker MODE ARGS...\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i, const char* fallback) { return std::string(argc > i ? argv[i] : fallback); };

  if (mode == "stale") {
    dist::GrpcClientOptions o;
    o.address = std::getenv("MCX_COORDINATOR_ADDRESS");
    auto client = dist::make_grpc_client(o);
    if (!client.ok()) return report(client.status());
    auto reg = (*client)->register_task(0, 1111, 1, absl::Seconds(5));
    if (!reg.ok()) return report(reg.status());
    auto hb = (*client)->heartbeat(0, 2222, absl::Seconds(5));
    if (hb.ok()) {
      std::printf("UNEXPECTED heartbeat with a stale incarnation accepted\n");
      return 3;
    }
    return report(hb.status());
  }

  std::printf("STARTING\n");
  std::fflush(stdout);
  dist::InitializeOptions options;
  if (env_int("MP_WORKER_NOTICE", 0) != 0) {
    options.on_failure = [](const dist::TaskFailure& f) {
      std::printf("NOTICE %s\n", f.message.c_str());
      std::fflush(stdout);
    };
  }
  if (absl::Status s = dist::initialize_or_status(options); !s.ok()) return report(s);
  dist::CoordinationAgent* agent = dist::agent();
  const int me = agent->task_id();

  if (mode == "hello" || mode == "init") {
    if (mode == "hello") {
      if (absl::Status s = agent->barrier("hello", absl::Seconds(10)); !s.ok()) return report(s);
      std::printf("task %d of %d passed the barrier\n", me, agent->num_tasks());
    }
    return finish();
  }
  if (mode == "wait") {
    ready();
    sleep_s(std::stod(arg(2, "20")));
    return finish();
  }
  if (mode == "barrier") {
    ready();
    absl::Status s = agent->barrier(arg(2, "b"), absl::Seconds(std::stod(arg(3, "10"))));
    if (!s.ok()) return report(s);
    return finish();
  }
  if (mode == "barriers") {
    // Barriers with a 5 s timeout, 5 ms apart (a busy job's pace: ~400 requests/s per task), for SECONDS; prints
    // the count and the slowest.
    ready();
    const absl::Time end = absl::Now() + absl::Seconds(std::stod(arg(2, "5")));
    int count = 0;
    absl::Duration slowest;
    bool announced = false;
    // Every task passes the same barriers: task 0 announces the last one (the next) before entering it, so the
    // others, who leave it only after task 0 entered, see the announcement.
    while (true) {
      if (me == 0 && !announced && absl::Now() >= end) {
        if (absl::Status d = agent->kv_insert("flood/done", absl::StrCat(count + 1)); !d.ok()) return report(d);
        announced = true;
      }
      const absl::Time start = absl::Now();
      absl::Status s = agent->barrier(absl::StrCat("flood/", count), absl::Seconds(5));
      if (!s.ok()) return report(s);
      slowest = std::max(slowest, absl::Now() - start);
      ++count;
      absl::StatusOr<std::string> done = agent->kv_try_get("flood/done");
      if (done.ok() && count >= std::stoi(*done)) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    std::printf("BARRIERS %d slowest_ms %.1f\n", count, absl::ToDoubleMilliseconds(slowest));
    return finish();
  }
  if (mode == "stuck") {
    ready();
    if (me == std::stoi(arg(2, "0"))) {
      sleep_s(std::stod(arg(3, "15")));
      return 0;
    }
    absl::Status s = agent->barrier("stuck", absl::Seconds(2));
    if (!s.ok()) return report(s);
    std::printf("UNEXPECTED barrier passed\n");
    return 3;
  }
  if (mode == "live_set") {
    ready();
    if (me == std::stoi(arg(2, "0"))) {
      sleep_s(std::stod(arg(3, "15")));
      return 0;
    }
    absl::StatusOr<dist::LiveTasks> live = agent->get_live_tasks({}, absl::Seconds(10));
    if (!live.ok()) return report(live.status());
    std::string ids;
    for (dist::TaskId t : live->tasks) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    std::printf("LIVE tasks=%s\n", ids.c_str());
    std::fflush(stdout);
    return finish();
  }
  if (mode == "kv_limits") {
    absl::Status big_key = agent->kv_insert(std::string(2000, 'k'), "v");
    absl::Status big_value = agent->kv_insert("limits/value", std::string(5 << 20, 'v'));
    absl::Status fine = agent->kv_insert("limits/fine", std::string(1000, 'v'));
    std::printf("KEY %s: %s\n", absl::StatusCodeToString(big_key.code()).c_str(), std::string(big_key.message()).c_str());
    std::printf("VALUE %s: %s\n", absl::StatusCodeToString(big_value.code()).c_str(),
                std::string(big_value.message()).c_str());
    std::printf("FINE %s\n", absl::StatusCodeToString(fine.code()).c_str());
    return finish();
  }
  if (mode == "crash") {
    ready();
    if (me == std::stoi(arg(2, "0"))) {
      std::printf("task %d exits with %s\n", me, arg(3, "7").c_str());
      std::fflush(stdout);
      std::_Exit(std::stoi(arg(3, "7")));
    }
    absl::Status s = agent->barrier("crash", absl::Seconds(15));
    if (!s.ok()) return report(s);
    return finish();
  }
  if (mode == "flaky") {
    int restart = env_int("MCX_RESTART_COUNT", 0);
    std::printf("task %d run %d incarnation %llx\n", me, restart,
                static_cast<unsigned long long>(agent->incarnation()));
    std::fflush(stdout);
    if (me == std::stoi(arg(2, "0")) && restart == 0) std::_Exit(7);
    if (absl::Status s = agent->barrier("flaky/done", absl::Seconds(15)); !s.ok()) return report(s);
    std::printf("task %d passed flaky/done\n", me);
    return finish();
  }
  if (mode == "churn") return churn(agent, std::stoi(arg(2, "20")));
  std::fprintf(stderr, "mp_worker: unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("ERROR exception: %s\n", e.what());
    return 1;
  }
}
