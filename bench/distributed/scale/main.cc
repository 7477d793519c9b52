// The control plane at the scale of the largest jobs: N simulated tasks against a real mcx-coordinator over
// loopback, N up to 16,384 on one machine.
//
// Each simulated task is one fast-path connection speaking the real wire protocol (rpc/fast_path_wire.h,
// coordination.proto messages): the hello, Register, Barrier and Heartbeat requests a process's agent sends.
// The tasks are event-driven: a few client threads, each an epoll loop over its share of the connections, so
// the coordinator, not the simulator, is what is measured. The coordinator is the real binary in its own
// process (its CPU time and memory read from /proc), started with --rate-limit 0 (every simulated task comes
// from 127.0.0.1, which the per-peer rate limit would otherwise count as one peer) and -q.
//
// Per N it prints one JSON line:
//   register_all_ms      from the last task's Register sent to the last answer (the service answers a
//                        registration when every task has registered)
//   barrier_p50_ms/p99   a barrier of all N tasks: from the round's first request to its last answer, over rounds
//   barrier_coordinator_cpu_us_per_task  the coordinator's CPU per arrival (request in, reply out)
//   barrier_coordinator_busiest_thread_cpu_ms_per_round, barrier_simulator_cpu_ms_per_round  where a round's time
//                        goes: the CPU of the coordinator's busiest thread, and of the simulator itself
//   heartbeat_cpu_pct    the coordinator's CPU (user+system, % of one core) while every task heartbeats at the
//                        interval agents use for a job of N (heartbeat_interval_s: 1 s up to 4,096 tasks, then
//                        N/4096 s; --heartbeat-interval sets another), with heartbeats_per_s and the CPU per heartbeat
//   kill_1pct_seen_by_all_ms  every task watches the job state (as agents do); 1% of them are killed (their
//                        connections closed; the coordinator runs --recoverable, so the job goes on): from the
//                        kill until every survivor's newest state has every failure's version (null when not
//                        within --kill-deadline seconds), a sample of survivors checked to name every kill
//   kv_ops_per_s, kv_round_p50_ms/p99  1,000 clients (or N, when fewer) each writing its key (64 bytes) and
//                        reading its neighbour's, over --kv-rounds rounds
//   live_set_first_ms    every task agrees on the live set (GetLiveTasks) before anything fails: N whole answers
//   live_set_after_kill_ms  after the kills, every survivor agrees again, holding the first agreement (so the
//                        answers are the differences): from the first request to the last answer, a sample of
//                        answers checked to list exactly the survivors
//   coordinator_rss_mb, rss_kb_per_task  the coordinator's resident memory with every task registered
//
//   bench_control_plane_scale --tasks 1024,4096,16384 [--threads 2] [--barriers 20] [--heartbeat-seconds 8]
//                             [--heartbeat-interval S] [--fast-path-threads T]
//                             [--coordinator PATH]
// Run: bash bench/distributed/scale/run.sh
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mcx/distributed/coordination/heartbeat_defaults.h"
#include "mcx/distributed/rpc/coordination.pb.h"
#include "mcx/distributed/rpc/fast_path_server.h"
#include "mcx/distributed/rpc/fast_path_wire.h"
#include "mcx/distributed/rpc/handlers.h"
#include "nlohmann/json.hpp"
#include "tools/common/subprocess.h"

namespace {

namespace md = mcx::distributed;
namespace pb = mcx::distributed::proto;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

const char* g_phase = "starting";  // named in errors

[[noreturn]] void die(const std::string& what) {
  std::cerr << "bench_control_plane_scale: " << what << " (while " << g_phase << ")" << std::endl;
  std::exit(1);
}

// A JobStateProto's version (field 1, a varint, serialised first) without parsing the N tasks after it.
uint64_t state_version(const std::string& state) {
  if (state.empty() || state[0] != 0x08) return 0;
  uint64_t v = 0;
  for (size_t i = 1, shift = 0; i < state.size() && shift < 64; ++i, shift += 7) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(state[i]) & 0x7f) << shift;
    if (!(static_cast<unsigned char>(state[i]) & 0x80)) break;
  }
  return v;
}

// One simulated task: its connection, what it has sent and the bytes of the reply being read.
struct Task {
  int id = 0;
  int fd = -1;
  uint64_t incarnation = 0;
  std::string out;   // bytes not yet written
  std::string in;    // bytes read, not yet a whole frame
  int requests = 0;  // requests sent that get a reply (hello, register, barriers, heartbeats)
  int answers = 0;   // replies received
  Clock::time_point last_answer;
  int watch_frames = 0;      // job states received on the watch stream
  uint64_t version = 0;      // of the newest one
  Clock::time_point last_state_at;
  // Sampled tasks (checked after the kills) apply every frame, whole or delta, as an agent does: the ids of the
  // tasks their state shows failed.
  bool sampled = false;
  std::set<int> failed;
  std::map<int, std::string> failed_why;  // the error of each failed task (for the report of a wrong view)
  int live_tasks = -1;  // members of the last live-set agreement it was answered (sampled tasks)
  uint64_t live_generation = 0;  // that agreement's generation (sampled tasks)
};

// Applies one watch frame (a JobStateProto: the whole state, or the tasks changed since the one before) to a
// sampled task's view.
void apply_state(Task& t, const std::string& bytes) {
  pb::JobStateProto state;
  if (!state.ParseFromString(bytes)) die(absl::StrCat("task ", t.id, ": a malformed job state"));
  if (state.base_version() != 0 && state.base_version() != t.version) {
    die(absl::StrCat("task ", t.id, ": a change from version ", state.base_version(), " while it holds ", t.version));
  }
  if (state.base_version() == 0) {  // a whole state: a state byte per task (the failed ones also in `tasks`)
    t.failed.clear();
    t.failed_why.clear();
    for (size_t i = 0; i < state.states().size(); ++i) {
      if (state.states()[i] == 2) t.failed.insert(static_cast<int>(i));  // TaskState::kError
    }
  }
  for (const pb::TaskInfoProto& info : state.tasks()) {
    if (info.state() == 2) {  // TaskState::kError
      t.failed.insert(info.id());
      t.failed_why[info.id()] = info.error().message();
    } else {
      t.failed.erase(info.id());
      t.failed_why.erase(info.id());
    }
  }
}

// A client thread's share of the tasks and its epoll loop.
class Shard {
 public:
  explicit Shard(std::vector<Task*> tasks) : tasks_(std::move(tasks)), epoll_(epoll_create1(EPOLL_CLOEXEC)) {}
  ~Shard() { ::close(epoll_); }

  // Connects every task (at most `window` connects in flight, so the listen backlog never overflows).
  void connect_all(int port, int window) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (size_t begin = 0; begin < tasks_.size(); begin += static_cast<size_t>(window)) {
      const size_t end = std::min(tasks_.size(), begin + static_cast<size_t>(window));
      for (size_t i = begin; i < end; ++i) {
        Task& t = *tasks_[i];
        t.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (t.fd < 0) die(absl::StrCat("socket: ", std::strerror(errno), " (raise the open-file limit)"));
        if (::connect(t.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          die(absl::StrCat("connect: ", std::strerror(errno)));
        }
        md::set_socket_options(t.fd);
        ::fcntl(t.fd, F_SETFL, ::fcntl(t.fd, F_GETFL) | O_NONBLOCK);
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = &t;
        epoll_ctl(epoll_, EPOLL_CTL_ADD, t.fd, &ev);
        send(t, md::kHelloOp, std::string());
      }
      wait_answers(static_cast<int>(end), 1);  // the hellos of every task connected so far
    }
  }

  // Queues one request on every task's connection (written at once where the socket has room).
  template <typename MakeRequest>
  void send_all(md::Rpc rpc, const MakeRequest& make) {
    send_some([](const Task&) { return true; }, rpc, make);
  }
  // The same for the tasks `pick` chooses; returns how many.
  template <typename Pick, typename MakeRequest>
  int send_some(const Pick& pick, md::Rpc rpc, const MakeRequest& make) {
    int sent = 0;
    for (Task* t : tasks_) {
      if (!pick(*t)) continue;
      send(*t, static_cast<uint16_t>(rpc), make(*t).SerializeAsString());
      ++sent;
    }
    return sent;
  }
  // Runs the loop until every request sent has its answer.
  void wait_answered() {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
    while (std::any_of(tasks_.begin(), tasks_.end(),
                       [](const Task* t) { return t->fd >= 0 && t->answers < t->requests; })) {
      if (Clock::now() > deadline) die("requests without answers after 120 s");
      poll_once(100);
    }
  }


  // Runs the loop until every open connection has received a job state on its watch stream.
  void wait_first_states() {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
    while (std::any_of(tasks_.begin(), tasks_.end(), [](const Task* t) { return t->fd >= 0 && t->watch_frames == 0; })) {
      if (Clock::now() > deadline) die("no first job state on every watch within 120 s");
      poll_once(100);
    }
  }

  // Runs the loop until every open connection's newest job state has at least `version`, or the deadline.
  // Returns whether they all did.
  bool wait_version(uint64_t version, Clock::time_point deadline) {
    auto behind = [&] {
      return std::any_of(tasks_.begin(), tasks_.end(),
                         [&](const Task* t) { return t->fd >= 0 && t->version < version; });
    };
    while (behind()) {
      if (Clock::now() > deadline) return false;
      poll_once(10);
    }
    return true;
  }

  // Closes the connections of the tasks `pick` chooses (as a killed process's sockets close).
  template <typename Pick>
  void kill(const Pick& pick) {
    for (Task* t : tasks_) {
      if (t->fd < 0 || !pick(*t)) continue;
      ::close(t->fd);
      t->fd = -1;
    }
  }

  Clock::time_point last_answer() const {
    Clock::time_point last{};
    for (const Task* t : tasks_) last = std::max(last, t->last_answer);
    return last;
  }

  // Every open task starts its watch stream.
  void send_watches() {
    for (Task* t : tasks_) {
      pb::WatchRequest r;
      r.set_task(t->id);
      r.set_incarnation(t->incarnation);
      send(*t, static_cast<uint16_t>(md::Rpc::kWatch), r.SerializeAsString(), /*answered=*/false);
    }
  }

  void close_all() {
    for (Task* t : tasks_) {
      if (t->fd >= 0) ::close(t->fd);
      t->fd = -1;
    }
  }

 private:
  // `answered`: the request gets one reply (every request but the watch, whose frames are states).
  void send(Task& t, uint16_t op, const std::string& payload, bool answered = true) {
    t.requests += answered;
    t.out += md::encode_frame(op, 0, ++next_id_, payload);
    flush(t);
  }

  void flush(Task& t) {
    while (!t.out.empty()) {
      const ssize_t n = ::write(t.fd, t.out.data(), t.out.size());
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) die(absl::StrCat("write to the coordinator: ", std::strerror(errno)));
      t.out.erase(0, static_cast<size_t>(n));
    }
    epoll_event ev{};
    ev.events = EPOLLIN | (t.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
    ev.data.ptr = &t;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, t.fd, &ev);
  }

  // Reads answers until `count` tasks (the first ones of the window: any `count`) each reached `target`.
  void wait_answers(int count, int target) {
    auto done = [&] {
      int reached = 0;
      for (const Task* t : tasks_) reached += t->answers >= target;
      return reached >= count;
    };
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
    while (!done()) {
      if (Clock::now() > deadline) die(absl::StrCat("no answers to ", target, " requests within 120 s"));
      poll_once(100);
    }
  }

  // One epoll_wait and the work it reports; returns the number of ready connections.
  int poll_once(int timeout_ms) {
    epoll_event events[256];
    const int n = epoll_wait(epoll_, events, 256, timeout_ms);
    for (int i = 0; i < n; ++i) {
      Task& t = *static_cast<Task*>(events[i].data.ptr);
      if (t.fd < 0) continue;
      if (events[i].events & EPOLLOUT) flush(t);
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_frames(t);
    }
    return std::max(n, 0);
  }

  void read_frames(Task& t) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(t.fd, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) die(absl::StrCat("task ", t.id, ": reading from the coordinator: ", std::strerror(errno)));
      if (n == 0) {
        // Once the watches start, a watcher the coordinator drops (more job states queued for it than the
        // coordinator keeps for a slow reader) is a result, counted; before, it is an error.
        if (!tolerate_close_) die(absl::StrCat("task ", t.id, ": the coordinator closed the connection"));
        ::close(t.fd);
        t.fd = -1;
        ++dropped_;
        return;
      }
      t.in.append(buf, static_cast<size_t>(n));
    }
    while (t.in.size() >= md::kFastPathHeaderBytes) {
      absl::StatusOr<md::FrameHeader> h = md::decode_frame_header(t.in.data());
      if (!h.ok()) die(std::string(h.status().message()));
      const size_t whole = md::kFastPathHeaderBytes + h->length;
      if (t.in.size() < whole) break;
      if (h->flags & md::kFlagTransportError) die(absl::StrCat("task ", t.id, ": a transport error from the coordinator"));
      if (h->op == static_cast<uint16_t>(md::Rpc::kWatch)) {  // a job state on the watch stream
        const std::string frame(t.in.data() + md::kFastPathHeaderBytes, h->length);
        if (t.sampled) apply_state(t, frame);
        t.version = state_version(frame);
        ++t.watch_frames;
        t.last_state_at = Clock::now();
        t.in.erase(0, whole);
        continue;
      }
      if (h->op == static_cast<uint16_t>(md::Rpc::kLiveTasks) && t.sampled) {
        pb::LiveTasksResponse live;
        live.ParseFromArray(t.in.data() + md::kFastPathHeaderBytes, static_cast<int>(h->length));
        // A whole answer lists the members; a difference (the caller held the previous agreement) changes them.
        t.live_tasks = live.base_generation() == 0 ? live.tasks_size()
                                                  : t.live_tasks + live.added_size() - live.removed_size();
        t.live_generation = live.generation();
      }
      // Every answer of this simulation carries an in-band status as field 1 (Register, Barrier, Heartbeat, key-value
      // and live-set calls).
      if (h->op != md::kHelloOp) {
        pb::StatusResponse status;
        status.ParseFromArray(t.in.data() + md::kFastPathHeaderBytes, static_cast<int>(h->length));
        if (status.status().code() != 0) {
          die(absl::StrCat("task ", t.id, ": op ", h->op, " failed: ", status.status().message()));
        }
      }
      t.in.erase(0, whole);
      ++t.answers;
      t.last_answer = Clock::now();
    }
  }

  std::vector<Task*> tasks_;
  int epoll_;
  uint64_t next_id_ = 0;
  bool tolerate_close_ = false;
  int dropped_ = 0;

 public:
  void tolerate_close() { tolerate_close_ = true; }
  int dropped() const { return dropped_; }
};

// Runs f(shard) on every shard, each on its own thread, and waits.
template <typename F>
void on_each(std::vector<std::unique_ptr<Shard>>& shards, const F& f) {
  std::vector<std::thread> threads;
  for (auto& s : shards) threads.emplace_back([&, shard = s.get()] { f(*shard); });
  for (auto& t : threads) t.join();
}

// The latest answer any shard got.
Clock::time_point last_answer(const std::vector<std::unique_ptr<Shard>>& shards) {
  Clock::time_point last{};
  for (const auto& s : shards) last = std::max(last, s->last_answer());
  return last;
}

// User + system CPU seconds from a /proc stat file (of a process or of one of its threads).
double cpu_seconds_in(const std::string& stat_path) {
  std::ifstream in(stat_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  const std::vector<std::string> fields =
      absl::StrSplit(paren == std::string::npos ? std::string() : text.substr(paren + 2), ' ');
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) || !absl::SimpleAtod(fields[12], &stime)) {
    die(absl::StrCat("cannot read the CPU time in ", stat_path));
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double cpu_seconds(pid_t pid) { return cpu_seconds_in(absl::StrCat("/proc/", pid, "/stat")); }

// The CPU seconds of each thread of `pid`, by thread id.
std::map<std::string, double> thread_cpu_seconds(pid_t pid) {
  std::map<std::string, double> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string tid = entry.path().filename().string();
    out[tid] = cpu_seconds_in(absl::StrCat(dir, "/", tid, "/stat"));
  }
  return out;
}

// This process's CPU seconds (every simulator thread).
double own_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double rss_mb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return static_cast<double>(kb) / 1024.0;
    }
  }
  return 0;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// What the command line sets.
struct Settings {
  int threads = 2;
  int barriers = 20;
  int heartbeat_seconds = 8;
  int heartbeat_interval_s = 0;  // 0: the default for the job's size
  int kv_rounds = 20;
  int kill_deadline_s = 30;
  int fast_path_threads = 0;  // 0: the coordinator's default for the job's size
  std::string coordinator = MCX_COORDINATOR_BINARY;
};

nlohmann::json run(int n, const Settings& settings) {
  const int threads = settings.threads, barriers = settings.barriers, heartbeat_seconds = settings.heartbeat_seconds;
  const int heartbeat_interval_s = settings.heartbeat_interval_s, kv_rounds_count = settings.kv_rounds;
  const int kill_deadline_s = settings.kill_deadline_s;
  mcx::tools::SpawnOptions so;
  so.argv = {settings.coordinator, "--bind", "127.0.0.1:0", "-n", std::to_string(n), "--rate-limit", "0", "-q",
             "--heartbeat-timeout", "600", "--shutdown-timeout", "0", "--recoverable"};
  if (settings.fast_path_threads > 0) {
    so.argv.push_back("--fast-path-threads");
    so.argv.push_back(std::to_string(settings.fast_path_threads));
  }
  so.pipe_stderr = false;
  auto child = mcx::tools::Subprocess::spawn(so);
  if (!child.ok()) die(std::string(child.status().message()));
  std::string line;
  for (char c; ::read((*child)->stdout_fd(), &c, 1) == 1 && c != '\n';) line += c;
  int port = 0;
  if (line.rfind(':') == std::string::npos || !absl::SimpleAtoi(line.substr(line.rfind(':') + 1), &port)) {
    die(absl::StrCat("the coordinator printed '", line, "' instead of its address"));
  }
  const pid_t pid = (*child)->pid();

  std::vector<Task> tasks(static_cast<size_t>(n));
  std::mt19937_64 rng(42);
  for (int i = 0; i < n; ++i) {
    Task& t = tasks[static_cast<size_t>(i)];
    t.id = i;
    t.incarnation = rng() | 1;
    t.sampled = i % 997 == 1;  // a sampled task that is killed is not checked
  }
  std::vector<std::unique_ptr<Shard>> shards;
  for (int s = 0; s < threads; ++s) {
    std::vector<Task*> mine;
    for (int i = s; i < n; i += threads) mine.push_back(&tasks[static_cast<size_t>(i)]);
    shards.push_back(std::make_unique<Shard>(std::move(mine)));
  }
  const Clock::time_point start = Clock::now();
  g_phase = "connecting";
  on_each(shards, [&](Shard& s) { s.connect_all(port, 256); });
  const Clock::time_point connected = Clock::now();

  // Registration: answered when all N have registered.
  g_phase = "registering";
  std::atomic<int64_t> last_sent_ns{0};
  on_each(shards, [&](Shard& s) {
    s.send_all(md::Rpc::kRegister, [&](const Task& t) {
      pb::RegisterRequest r;
      r.set_task(t.id);
      r.set_incarnation(t.incarnation);
      r.set_num_tasks(n);
      r.set_timeout_ms(120000);
      return r;
    });
    const int64_t now = Clock::now().time_since_epoch().count();
    for (int64_t seen = last_sent_ns.load(); seen < now && !last_sent_ns.compare_exchange_weak(seen, now);) {}
    s.wait_answered();
  });
  const Clock::time_point registered = last_answer(shards);
  const Clock::time_point last_register_sent{Clock::duration(last_sent_ns.load())};
  const double rss = rss_mb(pid);

  // Barriers of every task.
  g_phase = "in barriers";
  std::vector<double> rounds;
  const double barrier_cpu_before = cpu_seconds(pid);
  const double simulator_cpu_before = own_cpu_seconds();
  const std::map<std::string, double> threads_before = thread_cpu_seconds(pid);
  for (int b = 0; b < barriers; ++b) {
    const Clock::time_point round_start = Clock::now();
    on_each(shards, [&](Shard& s) {
      s.send_all(md::Rpc::kBarrier, [&](const Task& t) {
        pb::BarrierRequest r;
        r.set_task(t.id);
        r.set_incarnation(t.incarnation);
        r.set_name("scale");
        r.set_counter(b);
        r.set_timeout_ms(120000);
        return r;
      });
      s.wait_answered();
    });
    const Clock::time_point end = last_answer(shards);
    rounds.push_back(ms_between(round_start, end));
  }
  // The coordinator's own CPU per arrival (its request in, its reply out): what bounds a barrier's time on one
  // reactor thread, whatever the clients do.
  const double barrier_cpu_us_per_task = (cpu_seconds(pid) - barrier_cpu_before) * 1e6 / (static_cast<double>(barriers) * n);
  // Where a round's time goes: the coordinator's CPU, its busiest thread's (the fast path's reactors share the
  // arrivals and the release), and the simulator's own (its sends, and on loopback the kernel's receive work for
  // the coordinator's sockets). On a machine whose cores both sides share, a round cannot be shorter than their
  // sum divided by the cores.
  const double barrier_simulator_cpu_ms = (own_cpu_seconds() - simulator_cpu_before) * 1e3 / barriers;
  double busiest_thread_s = 0;
  for (const auto& [tid, seconds] : thread_cpu_seconds(pid)) {
    auto before = threads_before.find(tid);
    busiest_thread_s = std::max(busiest_thread_s, seconds - (before == threads_before.end() ? 0.0 : before->second));
  }
  const double barrier_busiest_thread_cpu_ms = busiest_thread_s * 1e3 / barriers;

  g_phase = "heartbeating";
  // Heartbeats at the interval agents use for a job of n tasks (heartbeat_defaults.h, or --heartbeat-interval):
  // every second, the tasks whose turn it is (with a 4 s interval, a quarter of them).
  const int interval_s = heartbeat_interval_s > 0
                             ? heartbeat_interval_s
                             : static_cast<int>(absl::ToInt64Seconds(md::default_heartbeat_interval(n)));
  const double cpu_before = cpu_seconds(pid);
  const Clock::time_point hb_start = Clock::now();
  std::atomic<int64_t> heartbeats{0};
  for (int sec = 0; sec < heartbeat_seconds; ++sec) {
    const Clock::time_point second_end = hb_start + std::chrono::seconds(sec + 1);
    on_each(shards, [&](Shard& s) {
      heartbeats += s.send_some([&](const Task& t) { return t.id % interval_s == sec % interval_s; },
                                md::Rpc::kHeartbeat, [&](const Task& t) {
                                  pb::HeartbeatRequest r;
                                  r.set_task(t.id);
                                  r.set_incarnation(t.incarnation);
                                  return r;
                                });
      s.wait_answered();
    });
    std::this_thread::sleep_until(second_end);
  }
  const double hb_wall = std::chrono::duration<double>(Clock::now() - hb_start).count();
  const double hb_cpu_pct = 100.0 * (cpu_seconds(pid) - cpu_before) / hb_wall;

  g_phase = "using the key-value store";
  // Key-value traffic of 1,000 clients (or all tasks when fewer): each round every client writes its key (64 bytes)
  // and reads its neighbour's, as a job's processes exchange addresses and small state.
  const int kv_clients = std::min(n, 1000);
  std::vector<double> kv_rounds;
  for (int round = 0; round < kv_rounds_count; ++round) {
    const Clock::time_point round_start = Clock::now();
    on_each(shards, [&](Shard& s) {
      auto client = [&](const Task& t) { return t.id < kv_clients; };
      s.send_some(client, md::Rpc::kKvInsert, [&](const Task& t) {
        pb::KvInsertRequest r;
        r.set_key(absl::StrCat("scale/", t.id));
        r.set_value(std::string(64, static_cast<char>('a' + round % 26)));
        r.set_allow_overwrite(true);
        return r;
      });
      s.wait_answered();
    });
    on_each(shards, [&](Shard& s) {
      s.send_some([&](const Task& t) { return t.id < kv_clients; }, md::Rpc::kKvGet, [&](const Task& t) {
        pb::KvGetRequest r;
        r.set_key(absl::StrCat("scale/", (t.id + 1) % kv_clients));
        r.set_timeout_ms(120000);
        return r;
      });
      s.wait_answered();
    });
    const Clock::time_point end = last_answer(shards);
    kv_rounds.push_back(ms_between(round_start, end));
  }
  double kv_total_ms = 0;
  for (double ms : kv_rounds) kv_total_ms += ms;

  // Every task agrees on the live set once before anything fails, as a job's processes do at start
  // (live_devices): every answer is the whole list, N lists of N tasks.
  g_phase = "agreeing on the first live set";
  auto agree_on_live_set = [&](uint64_t known) {
    const Clock::time_point begin = Clock::now();
    on_each(shards, [&](Shard& s) {
      s.send_some([](const Task& t) { return t.fd >= 0; }, md::Rpc::kLiveTasks, [&](const Task& t) {
        pb::LiveTasksRequest r;
        r.set_task(t.id);
        r.set_incarnation(t.incarnation);
        r.set_name("scale");
        r.set_timeout_ms(120000);
        r.set_known_generation(known);
        return r;
      });
      s.wait_answered();
    });
    const Clock::time_point end = last_answer(shards);
    return ms_between(begin, end);
  };
  const double first_live_set_ms = agree_on_live_set(0);
  uint64_t first_generation = 0;
  for (const Task& t : tasks) {
    if (!t.sampled) continue;
    if (t.live_tasks != n) die(absl::StrCat("task ", t.id, "'s first live set has ", t.live_tasks, " of ", n, " tasks"));
    first_generation = t.live_generation;
  }

  g_phase = "starting the watches";
  for (auto& s : shards) s->tolerate_close();
  // Every task watches the job state; then 1% of them are killed (their connections close, which the
  // recoverable coordinator records as failures) and every survivor must see the failures on its watch.
  on_each(shards, [&](Shard& s) {
    s.send_watches();
    s.wait_first_states();
  });
  g_phase = "watching the kills";
  const int killed = std::max(1, n / 100);
  const int stride = n / killed;
  const uint64_t before_kills = tasks[0].version;
  const Clock::time_point kill_at = Clock::now();
  for (auto& s : shards) s->kill([&](const Task& t) { return t.id % stride == stride - 1 && t.id / stride < killed; });
  // Each failure is one new job-state version.
  std::atomic<bool> all_saw{true};
  const Clock::time_point watch_deadline = kill_at + std::chrono::seconds(kill_deadline_s);
  on_each(shards, [&](Shard& s) {
    if (!s.wait_version(before_kills + killed, watch_deadline)) all_saw = false;
  });
  Clock::time_point seen{};
  int checked = 0;
  for (const Task& t : tasks) {
    if (t.fd < 0) continue;
    seen = std::max(seen, t.last_state_at);
    if (all_saw && t.sampled) {  // a sample of survivors: their newest state names every kill
      if (static_cast<int>(t.failed.size()) != killed) {
        std::string unexpected;
        for (const auto& [id, why] : t.failed_why) {
          if (id % stride != stride - 1 && unexpected.size() < 400) absl::StrAppend(&unexpected, " task ", id, ": ", why, ";");
        }
        die(absl::StrCat("task ", t.id, "'s newest job state shows ", t.failed.size(), " failed tasks, ", killed,
                         " killed; others:", unexpected));
      }
      ++checked;
    }
  }

  // Live-set agreement after the kills: every survivor asks for the live set (GetLiveTasks, as live_devices does
  // after a failure); it completes once every live task has asked, and each answer lists the survivors.
  g_phase = "agreeing on the live set";
  // Every task held the first agreement: each answer is the difference (the killed tasks).
  const double live_set_after_kill_ms = agree_on_live_set(first_generation);
  for (const Task& t : tasks) {
    if (t.fd >= 0 && t.sampled && t.live_tasks != n - killed) {
      die(absl::StrCat("task ", t.id, "'s live set has ", t.live_tasks, " tasks, expected ", n - killed));
    }
  }

  for (auto& s : shards) s->close_all();
  (*child)->signal(SIGTERM);
  (*child)->wait_until(Clock::now() + std::chrono::seconds(10));

  nlohmann::json j;
  j["name"] = absl::StrCat("control_plane/", n);
  j["tasks"] = n;
  j["fast_path_threads"] = settings.fast_path_threads > 0 ? settings.fast_path_threads
                                                         : md::FastPathServer::default_reactor_threads(n);
  j["connect_all_ms"] = ms_between(start, connected);
  j["register_all_ms"] = ms_between(last_register_sent, registered);
  j["barrier_p50_ms"] = percentile(rounds, 0.5);
  j["barrier_p99_ms"] = percentile(rounds, 0.99);
  j["barrier_coordinator_cpu_us_per_task"] = barrier_cpu_us_per_task;
  j["barrier_coordinator_busiest_thread_cpu_ms_per_round"] = barrier_busiest_thread_cpu_ms;
  j["barrier_simulator_cpu_ms_per_round"] = barrier_simulator_cpu_ms;
  j["heartbeat_interval_s"] = interval_s;
  j["heartbeats_per_s"] = static_cast<double>(heartbeats.load()) / hb_wall;
  j["heartbeat_cpu_pct"] = hb_cpu_pct;  // of one core
  j["heartbeat_cpu_us_each"] = hb_cpu_pct * 1e4 / (static_cast<double>(heartbeats.load()) / hb_wall);
  if (all_saw) {
    j["kill_1pct_seen_by_all_ms"] = ms_between(kill_at, seen);
  } else {
    j["kill_1pct_seen_by_all_ms"] = nullptr;  // not within the deadline
    j["kill_1pct_deadline_s"] = kill_deadline_s;
  }
  j["killed"] = killed;
  int dropped = 0;
  for (auto& s : shards) dropped += s->dropped();
  j["watchers_dropped"] = dropped;
  j["survivors_checked"] = checked;
  if (dropped > 0) j["kill_1pct_seen_by_all_ms"] = nullptr;  // not every survivor could see them
  j["live_set_first_ms"] = first_live_set_ms;
  j["live_set_after_kill_ms"] = live_set_after_kill_ms;
  j["kv_clients"] = kv_clients;
  j["kv_ops_per_s"] = 2.0 * kv_clients * static_cast<double>(kv_rounds.size()) / (kv_total_ms / 1000.0);
  j["kv_round_p50_ms"] = percentile(kv_rounds, 0.5);
  j["kv_round_p99_ms"] = percentile(kv_rounds, 0.99);
  j["coordinator_rss_mb"] = rss;
  j["rss_kb_per_task"] = rss * 1024.0 / n;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"N simulated tasks against a real mcx-coordinator (the control plane at scale)"};
  std::string tasks_text = "1024,4096,16384";
  Settings st;
  app.add_option("--tasks", tasks_text, "comma-separated task counts")->capture_default_str();
  app.add_option("--threads", st.threads, "client threads (epoll loops)")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--barriers", st.barriers, "barrier rounds per count")->capture_default_str()->check(CLI::Range(1, 10000));
  app.add_option("--heartbeat-seconds", st.heartbeat_seconds, "seconds of heartbeats measured")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--heartbeat-interval", st.heartbeat_interval_s,
                 "seconds between one task's heartbeats (0: the default for the job's size)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--kv-rounds", st.kv_rounds, "key-value rounds (each client writes once and reads once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--coordinator", st.coordinator, "the mcx-coordinator binary")->capture_default_str();
  app.add_option("--fast-path-threads", st.fast_path_threads,
                 "the coordinator's --fast-path-threads (0: its default for the job's size)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app.add_option("--kill-deadline", st.kill_deadline_s, "seconds the survivors have to see the 1% kills")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);

  std::vector<int> counts;
  for (absl::string_view t : absl::StrSplit(tasks_text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(t, &v) || v < 1) die(absl::StrCat("--tasks: expected positive integers, found '", t, "'"));
    counts.push_back(v);
  }
  // Each task is a socket here and one in the coordinator (which inherits this limit).
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  for (int n : counts) {
    if (static_cast<rlim_t>(n) + 64 > files.rlim_cur) {
      die(absl::StrCat(n, " tasks need ", n + 64, " open files; the limit here is ", files.rlim_cur));
    }
    std::cout << run(n, st).dump() << std::endl;
  }
  return 0;
}
