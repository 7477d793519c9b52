// bench_distributed: the control plane on loopback, against PyTorch's TCPStore doing the same work.
//
//   bash bench/distributed/run.sh            (builds Release and runs with the defaults)
//   bench_distributed [--procs 2,8,32,64] [--barriers 100] [--kv-ops 2000] [--kv-clients 1,8]
//                     [--detect-procs 4] [--detect-reps 5] [--no-peer]
//
// This process hosts the coordination service (gRPC on 127.0.0.1, plaintext) and spawns its worker
// processes (itself with --worker). Cases, one JSON line each ({name, mcx_ms, peer, peer_ms, ratio =
// peer_ms / mcx_ms, ...}; ratio > 1 means mcx is faster):
//   initialize/N   per-process duration of mcx::distributed::initialize() (register, wait for all N,
//                  topology exchange); all N processes are loaded first and released together through a
//                  FIFO, so process start-up is not counted. Peer: TCPStore client construction + one
//                  store meeting. p50/p99/max over processes.
//   barrier/N      agent->barrier() latency, every (process, round) a sample; peer: a store barrier
//                  (add + wait on a done key). Target: p50 < 5 ms at N = 64.
//   kv_set/C, kv_get/C   C client processes each insert `kv-ops` distinct keys (64-byte values) with
//                  kv_insert_async + one kv_flush (TCPStore's set does not wait for a reply either), then
//                  blocking-get them; aggregate ops/s = C * kv-ops / slowest client. mcx_ms = ms per op.
//   kv_set_acked/C  the same inserts with kv_insert, each waiting for the service (no TCPStore counterpart).
//   detect_killed/N  kill -9 of one of N processes -> the others' failure callbacks run; ms from the kill
//                  (CLOCK_MONOTONIC, shared by all processes) to each survivor's callback. TCPStore has no
//                  failure detection (peer none). Target < 1000 ms.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/distributed.h"
#include "mcx/distributed/rpc/grpc_server.h"
#include "tools/common/subprocess.h"

namespace {

namespace dist = mcx::distributed;
using json = nlohmann::json;
using mcx::tools::Clock;
using std::chrono::milliseconds;

double now_ms() {
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::lround(q / 100.0 * static_cast<double>(v.size() - 1)));
  return v[std::min(k, v.size() - 1)];
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) out.push_back(std::stoi(std::string(p)));
  return out;
}

// ------------------------------------------------------------------------------------------ worker side

void wait_for_go() {
  const char* fifo = std::getenv("MCX_BENCH_GO_FIFO");
  if (fifo == nullptr) return;
  std::printf("LOADED\n");
  std::fflush(stdout);
  int fd = open(fifo, O_RDONLY);
  char c;
  if (fd >= 0) {
    ssize_t r = read(fd, &c, 1);  // one byte per worker; the parent writes N at once
    (void)r;
    close(fd);
  }
}

int worker(const std::string& mode, int iters, int warmup, int ops, int value_bytes) {
  wait_for_go();
  dist::InitializeOptions opts;
  if (mode == "detect") {
    opts.on_failure = [](const dist::TaskFailure& f) {
      std::printf("DETECTED %.6f %d\n", now_ms(), f.task);
      std::fflush(stdout);
      std::_Exit(0);
    };
  }
  double t0 = now_ms();
  if (absl::Status s = dist::initialize_or_status(opts); !s.ok()) {
    std::printf("ERROR %s\n", s.ToString().c_str());
    return 1;
  }
  double init_ms = now_ms() - t0;
  dist::CoordinationAgent* agent = dist::agent();
  auto fail = [](const absl::Status& s) {
    std::printf("ERROR %s\n", s.ToString().c_str());
    std::fflush(stdout);
    return 1;
  };
  if (mode == "barrier") {
    std::string line = "BARRIER";
    for (int r = 0; r < warmup + iters; ++r) {
      double t = now_ms();
      if (absl::Status s = agent->barrier("bench", absl::Seconds(60)); !s.ok()) return fail(s);
      if (r >= warmup) absl::StrAppend(&line, " ", now_ms() - t);
    }
    // The live-set agreement (what each mcx::with_live_devices scope costs: one per scope).
    std::string live = "LIVESET";
    for (int r = 0; r < warmup + iters; ++r) {
      double t = now_ms();
      absl::StatusOr<dist::LiveTasks> l = agent->get_live_tasks(dist::LiveSetRequest{{}, "bench", "O"}, absl::Seconds(60));
      if (!l.ok()) return fail(l.status());
      if (r >= warmup) absl::StrAppend(&live, " ", now_ms() - t);
    }
    std::printf("INIT %f\n%s\n%s\n", init_ms, line.c_str(), live.c_str());
  } else if (mode == "kv") {
    const int me = agent->task_id();
    std::string value(static_cast<size_t>(value_bytes), 'v');
    if (absl::Status s = agent->barrier("start", absl::Seconds(60)); !s.ok()) return fail(s);
    // As TCPStore's set(), the inserts do not wait for their acknowledgements; the phase ends when the
    // service has applied them all (kv_flush), as the peer's ends with one get.
    double t1 = now_ms();
    for (int i = 0; i < ops; ++i) {
      if (absl::Status s = agent->kv_insert_async(absl::StrCat("kv/", me, "/", i), value); !s.ok()) return fail(s);
    }
    if (absl::Status s = agent->kv_flush(absl::Seconds(60)); !s.ok()) return fail(s);
    double t2 = now_ms();
    // Acknowledged inserts (each waits for the service), which TCPStore has no counterpart of.
    for (int i = 0; i < ops; ++i) {
      if (absl::Status s = agent->kv_insert(absl::StrCat("kva/", me, "/", i), value); !s.ok()) return fail(s);
    }
    double t2b = now_ms();
    if (absl::Status s = agent->barrier("sets", absl::Seconds(60)); !s.ok()) return fail(s);
    double t3 = now_ms();
    for (int i = 0; i < ops; ++i) {
      auto v = agent->kv_get(absl::StrCat("kv/", me, "/", i), absl::Seconds(10));
      if (!v.ok()) return fail(v.status());
      if (*v != value) return fail(absl::InternalError("wrong value"));
    }
    double t4 = now_ms();
    std::printf("KV %f %f %f\n", t2 - t1, t4 - t3, t2b - t2);
  } else if (mode == "detect") {
    std::printf("READY %d\n", agent->task_id());
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return 0;
  }
  std::fflush(stdout);
  absl::Status s = dist::shutdown_or_status();
  return s.ok() ? 0 : fail(s);
}

// ------------------------------------------------------------------------------------------ parent side

struct Service {
  std::unique_ptr<dist::CoordinationService> service;
  std::unique_ptr<dist::GrpcCoordinationServer> server;
  std::string address;
};

Service start_service(int n) {
  dist::ServiceOptions so;
  so.num_tasks = n;
  auto svc = dist::CoordinationService::create(so);
  if (!svc.ok()) throw std::runtime_error(svc.status().ToString());
  dist::GrpcServerOptions go;
  go.bind_address = "127.0.0.1:0";
  go.rate_limit = 0;  // this measures the service's capacity: no per-peer limit (as TCPStore, which has none)
  auto srv = dist::GrpcCoordinationServer::start(svc->get(), go);
  if (!srv.ok()) throw std::runtime_error(srv.status().ToString());
  Service s;
  s.address = absl::StrCat("127.0.0.1:", (*srv)->port());
  s.service = std::move(*svc);
  s.server = std::move(*srv);
  return s;
}

// N workers of this executable, their stdout lines collected per process.
class Workers {
 public:
  Workers(int n, const std::string& address, const std::vector<std::string>& args, bool gate) : lines_(n) {
    if (gate) {
      fifo_ = absl::StrCat("/tmp/mcx_bench_go_", getpid());
      unlink(fifo_.c_str());
      if (mkfifo(fifo_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
      fifo_fd_ = open(fifo_.c_str(), O_RDWR);  // O_RDWR never blocks; readers block in read()
    }
    for (int i = 0; i < n; ++i) {
      mcx::tools::SpawnOptions so;
      so.argv = {mcx::tools::self_exe_dir() + "/bench_distributed", "--worker"};
      so.argv.insert(so.argv.end(), args.begin(), args.end());
      so.env = {{"MCX_COORDINATOR_ADDRESS", address}, {"MCX_NUM_PROCESSES", std::to_string(n)},
                {"MCX_PROCESS_ID", std::to_string(i)},   {"MCX_STANDALONE_COORDINATOR", "1"},
                {"MCX_CLUSTER_DETECTION", "env"},        {"MCX_INIT_TIMEOUT", "120"}};
      if (gate) so.env["MCX_BENCH_GO_FIFO"] = fifo_;
      so.pipe_stderr = false;
      auto p = mcx::tools::Subprocess::spawn(so);
      if (!p.ok()) throw std::runtime_error(p.status().ToString());
      procs_.push_back(std::move(*p));
      mcx::tools::Subprocess* raw = procs_.back().get();
      pump_.add(raw->stdout_fd(), [this, i](std::string_view l) { lines_[i].emplace_back(l); },
                [raw] { raw->close_stdout(); });
    }
  }
  ~Workers() {
    for (auto& p : procs_) p->signal(SIGKILL);
    for (auto& p : procs_)
      if (p->stdout_fd() >= 0) pump_.drop(p->stdout_fd());
    procs_.clear();
    if (fifo_fd_ >= 0) close(fifo_fd_);
    if (!fifo_.empty()) unlink(fifo_.c_str());
  }
  // Pumps until every process has printed a line starting with `prefix` (or exited); throws on timeout.
  void wait_all(const std::string& prefix, milliseconds timeout, const std::vector<int>& skip = {}) {
    Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
      bool all = true;
      for (size_t i = 0; i < procs_.size(); ++i) {
        if (std::find(skip.begin(), skip.end(), static_cast<int>(i)) != skip.end()) continue;
        if (!line(static_cast<int>(i), prefix)) {
          for (const auto& l : lines_[i])
            if (l.rfind("ERROR", 0) == 0) throw std::runtime_error(absl::StrCat("worker ", i, ": ", l));
          if (procs_[i]->poll()) throw std::runtime_error(absl::StrCat("worker ", i, " exited early"));
          all = false;
        }
      }
      if (all) return;
      if (Clock::now() > deadline) throw std::runtime_error("timed out waiting for workers: " + prefix);
      pump_.pump(milliseconds(10));
    }
  }
  void release() {
    std::string go(procs_.size(), 'g');
    ssize_t w = write(fifo_fd_, go.data(), go.size());
    (void)w;
  }
  std::optional<std::string> line(int i, const std::string& prefix) const {
    for (const auto& l : lines_[i])
      if (l.rfind(prefix, 0) == 0) return l;
    return std::nullopt;
  }
  void kill9(int i) { ::kill(procs_[i]->pid(), SIGKILL); }
  void wait_exit(milliseconds timeout) {
    Clock::time_point deadline = Clock::now() + timeout;
    for (auto& p : procs_) {
      while (!p->poll() && Clock::now() < deadline) pump_.pump(milliseconds(10));
    }
    pump_.pump(milliseconds(10));
  }
  int size() const { return static_cast<int>(procs_.size()); }

 private:
  std::vector<std::unique_ptr<mcx::tools::Subprocess>> procs_;
  std::vector<std::vector<std::string>> lines_;
  mcx::tools::OutputPump pump_;
  std::string fifo_;
  int fifo_fd_ = -1;
};

std::vector<double> numbers_after(const std::string& line) {
  std::vector<double> out;
  std::istringstream in(line);
  std::string word;
  in >> word;
  for (double v; in >> v;) out.push_back(v);
  return out;
}

using PeerMap = std::map<std::string, json>;

PeerMap run_peer(const std::string& python, const std::string& script, const std::string& procs, int barriers,
                 int warmup, int kv_ops, const std::string& kv_clients) {
  PeerMap out;
  mcx::tools::SpawnOptions so;
  so.argv = {python, script, "--procs", procs, "--barriers", std::to_string(barriers), "--warmup",
             std::to_string(warmup), "--kv-ops", std::to_string(kv_ops), "--kv-clients", kv_clients};
  so.pipe_stderr = false;
  auto p = mcx::tools::Subprocess::spawn(so);
  if (!p.ok()) {
    std::cerr << "[bench_distributed] cannot run the TCPStore peer: " << p.status() << "\n";
    return out;
  }
  mcx::tools::OutputPump pump;
  pump.add((*p)->stdout_fd(), [&out](std::string_view l) {
    json j = json::parse(l, nullptr, false);
    if (!j.is_discarded() && j.contains("case")) out[j["case"].get<std::string>()] = j;
  }, [&] { (*p)->close_stdout(); });
  Clock::time_point deadline = Clock::now() + std::chrono::minutes(10);
  while (!pump.empty() && Clock::now() < deadline) pump.pump(milliseconds(50));
  auto st = (*p)->terminate(milliseconds(1000));
  if (!st.success()) std::cerr << "[bench_distributed] TCPStore peer: " << st.to_string() << "\n";
  return out;
}

void emit(json j) {
  if (j.contains("mcx_ms") && j.contains("peer_ms") && j["peer_ms"].is_number() && j["mcx_ms"].get<double>() > 0)
    j["ratio"] = j["peer_ms"].get<double>() / j["mcx_ms"].get<double>();
  else if (!j.contains("ratio"))
    j["ratio"] = nullptr;
  std::cout << j.dump() << std::endl;
}

json dist_fields(const std::string& prefix, const std::vector<double>& v) {
  return json{{prefix + "_p50_ms", percentile(v, 50)}, {prefix + "_p99_ms", percentile(v, 99)},
              {prefix + "_max_ms", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

void add_peer(json& j, const PeerMap& peers, const std::string& name, const char* field) {
  auto it = peers.find(name);
  if (it == peers.end()) {
    j["peer"] = "torch.TCPStore";
    j["peer_ms"] = nullptr;
    return;
  }
  j["peer"] = "torch.TCPStore";
  j["peer_ms"] = it->second[field];
  if (it->second.contains("p50_ms")) {
    j["peer_p50_ms"] = it->second["p50_ms"];
    j["peer_p99_ms"] = it->second["p99_ms"];
  }
  if (it->second.contains("ops_per_s")) j["peer_ops_per_s"] = it->second["ops_per_s"];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_distributed: coordination service on loopback vs PyTorch TCPStore"};
  std::string procs = "2,8,32,64", kv_clients = "1,8", mode;
  int barriers = 100, warmup = 5, kv_ops = 2000, value_bytes = 64, detect_procs = 4, detect_reps = 5;
  bool no_peer = false;
  std::string python = "/usr/bin/python3", peer_script = MCX_BENCH_TCPSTORE_PEER;
  app.add_option("--procs", procs, "process counts for initialize/barrier");
  app.add_option("--barriers", barriers, "timed barrier rounds per process count");
  app.add_option("--warmup", warmup, "untimed barrier rounds first");
  app.add_option("--kv-ops", kv_ops, "keys each KV client sets and gets");
  app.add_option("--kv-clients", kv_clients, "KV client process counts");
  app.add_option("--value-bytes", value_bytes, "KV value size");
  app.add_option("--detect-procs", detect_procs, "processes in the kill -9 detection case");
  app.add_option("--detect-reps", detect_reps, "kill -9 repetitions");
  app.add_flag("--no-peer", no_peer, "skip the TCPStore peer");
  app.add_option("--python", python, "interpreter with Debian's python3-torch");
  app.add_option("--peer-script", peer_script, "bench/peers/tcpstore_peer.py");
  app.add_option("--worker", mode, "(internal) run as a worker: barrier | kv | detect");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!mode.empty()) return worker(mode, barriers, warmup, kv_ops, value_bytes);
  signal(SIGPIPE, SIG_IGN);

  try {
    PeerMap peers;
    if (!no_peer) {
      std::cerr << "[bench_distributed] running the TCPStore peer ..." << std::endl;
      peers = run_peer(python, peer_script, procs, barriers, warmup, kv_ops, kv_clients);
    }
    const std::vector<std::string> common = {"--barriers", std::to_string(barriers), "--warmup",
                                             std::to_string(warmup), "--kv-ops", std::to_string(kv_ops),
                                             "--value-bytes", std::to_string(value_bytes)};
    auto args_for = [&](const std::string& m) {
      std::vector<std::string> a = {m};
      a.insert(a.end(), common.begin(), common.end());
      return a;
    };

    for (int n : parse_list(procs)) {
      std::cerr << "[bench_distributed] initialize + barrier, " << n << " processes ..." << std::endl;
      Service svc = start_service(n);
      Workers w(n, svc.address, args_for("barrier"), /*gate=*/true);
      w.wait_all("LOADED", milliseconds(120000));
      w.release();
      w.wait_all("LIVESET", milliseconds(300000));
      std::vector<double> inits, lat, live;
      for (int i = 0; i < n; ++i) {
        inits.push_back(numbers_after(*w.line(i, "INIT"))[0]);
        for (double v : numbers_after(*w.line(i, "BARRIER"))) lat.push_back(v);
        for (double v : numbers_after(*w.line(i, "LIVESET"))) live.push_back(v);
      }
      json ji = {{"name", absl::StrCat("initialize/", n)}, {"mcx_ms", percentile(inits, 50)}, {"processes", n}};
      ji.update(dist_fields("mcx", inits));
      add_peer(ji, peers, absl::StrCat("init/", n), "p50_ms");
      emit(ji);
      json jb = {{"name", absl::StrCat("barrier/", n)}, {"mcx_ms", percentile(lat, 50)}, {"processes", n},
                 {"samples", lat.size()}};
      jb.update(dist_fields("mcx", lat));
      add_peer(jb, peers, absl::StrCat("barrier/", n), "p50_ms");
      if (n == 64) jb["target_p50_ms"] = 5.0;
      emit(jb);
      // The peer has no live-set agreement; its barrier is the closest work (a with_live_devices scope's cost).
      json jl = {{"name", absl::StrCat("live_set/", n)}, {"mcx_ms", percentile(live, 50)}, {"processes", n},
                 {"samples", live.size()}};
      jl.update(dist_fields("mcx", live));
      add_peer(jl, peers, absl::StrCat("barrier/", n), "p50_ms");
      emit(jl);
      w.wait_exit(milliseconds(30000));
    }

    for (int c : parse_list(kv_clients)) {
      std::cerr << "[bench_distributed] key-value, " << c << " clients ..." << std::endl;
      Service svc = start_service(c);
      Workers w(c, svc.address, args_for("kv"), /*gate=*/false);
      w.wait_all("KV", milliseconds(300000));
      double set_wall = 0, get_wall = 0, acked_wall = 0;
      for (int i = 0; i < c; ++i) {
        auto v = numbers_after(*w.line(i, "KV"));
        set_wall = std::max(set_wall, v[0]);
        get_wall = std::max(get_wall, v[1]);
        acked_wall = std::max(acked_wall, v[2]);
      }
      double total = static_cast<double>(c) * kv_ops;
      for (auto [name, wall] : {std::pair{"kv_set", set_wall}, std::pair{"kv_get", get_wall},
                                std::pair{"kv_set_acked", acked_wall}}) {
        json j = {{"name", absl::StrCat(name, "/", c)}, {"mcx_ms", wall / total},
                  {"mcx_ops_per_s", total / (wall / 1000.0)}, {"clients", c}, {"ops", total},
                  {"value_bytes", value_bytes}};
        if (std::string(name) == "kv_set_acked") {
          j["peer"] = "none (TCPStore's set does not wait for an acknowledgement)";
          j["peer_ms"] = nullptr;
        } else {
          add_peer(j, peers, absl::StrCat(name, "/", c), "ms_per_op");
        }
        emit(j);
      }
      w.wait_exit(milliseconds(30000));
    }

    if (detect_reps <= 0) return 0;
    std::cerr << "[bench_distributed] kill -9 detection, " << detect_procs << " processes x " << detect_reps
              << " ..." << std::endl;
    std::vector<double> detect;
    for (int rep = 0; rep < detect_reps; ++rep) {
      Service svc = start_service(detect_procs);
      Workers w(detect_procs, svc.address, args_for("detect"), /*gate=*/false);
      w.wait_all("READY", milliseconds(60000));
      std::this_thread::sleep_for(milliseconds(200));  // let heartbeats and watch streams settle
      const int victim = detect_procs - 1;
      double killed = now_ms();
      w.kill9(victim);
      w.wait_all("DETECTED", milliseconds(20000), {victim});
      for (int i = 0; i < victim; ++i) detect.push_back(numbers_after(*w.line(i, "DETECTED"))[0] - killed);
      w.wait_exit(milliseconds(5000));
    }
    json jd = {{"name", absl::StrCat("detect_killed/", detect_procs)}, {"mcx_ms", percentile(detect, 50)},
               {"samples", detect.size()}, {"peer", "none (TCPStore has no failure detection)"},
               {"peer_ms", nullptr}, {"target_ms", 1000.0}};
    jd.update(dist_fields("mcx", detect));
    emit(jd);
  } catch (const std::exception& e) {
    std::cerr << "[bench_distributed] " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
