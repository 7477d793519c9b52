// The coordination service's fast path without gRPC (FastPathServer + the fast-path client), so these run under
// ThreadSanitizer too: pipelined inserts, concurrent calls through the connection pool, the wire's error
// handling (unknown ops, malformed payloads, a foreign protocol), connection loss during a registration and on
// a watch stream, a reply to a connection that is gone. The same transport against the real
// GrpcCoordinationServer (one port for both) is covered by grpc_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "mcx/core/cpu_affinity.h"
#include "mcx/distributed/coordination/agent.h"
#include "mcx/distributed/rpc/fast_path_channel.h"
#include "mcx/distributed/rpc/fast_path_client.h"
#include "mcx/distributed/rpc/fast_path_server.h"
#include "mcx/distributed/rpc/proto_convert.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

// A service behind a FastPathServer on 127.0.0.1; connections that do not speak the fast path are answered
// with "HANDED OFF" and closed.
struct FastCluster {
  std::unique_ptr<CoordinationService> service;
  std::unique_ptr<FastPathServer> server;
  std::string addr;
  std::atomic<int> handed_off{0};

  explicit FastCluster(int n, int reactor_threads = 1) {
    ServiceOptions o;
    o.num_tasks = n;
    o.heartbeat_timeout = absl::Seconds(3);
    o.shutdown_timeout = absl::Seconds(3);
    service = *CoordinationService::create(o);
    auto s = FastPathServer::start(service.get(), "127.0.0.1:0", [this](int fd) {
      handed_off++;
      const char reply[] = "HANDED OFF";
      ssize_t w = ::send(fd, reply, sizeof reply - 1, MSG_NOSIGNAL);
      (void)w;
      ::close(fd);
    }, /*limiter=*/nullptr, reactor_threads);
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    addr = absl::StrCat("127.0.0.1:", server->port());
  }
  std::unique_ptr<CoordinationClient> client() { return std::move(*make_fast_path_client(addr)); }
};

// A plain TCP connection to the server, for writing raw bytes.
int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Reads one frame (header + payload); nullopt when the connection closed.
std::optional<Frame> read_raw_frame(int fd) {
  std::string buf;
  char chunk[4096];
  while (true) {
    if (buf.size() >= kFastPathHeaderBytes) {
      auto h = decode_frame_header(buf.data());
      EXPECT_TRUE(h.ok()) << h.status();
      if (!h.ok()) return std::nullopt;
      if (buf.size() >= kFastPathHeaderBytes + h->length) return Frame{*h, buf.substr(kFastPathHeaderBytes, h->length)};
    }
    ssize_t r = ::recv(fd, chunk, sizeof chunk, 0);
    if (r <= 0) return std::nullopt;
    buf.append(chunk, static_cast<size_t>(r));
  }
}

absl::Status error_of(const Frame& f) {
  EXPECT_TRUE(f.header.flags & kFlagTransportError);
  proto::StatusProto p;
  EXPECT_TRUE(p.ParseFromString(f.payload));
  return from_proto(p);
}

TEST(FastPath, PipelinedInsertsAreAppliedInOrderAndTheirErrorIsReportedOnce) {
  FastCluster c(1);
  auto client = c.client();
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(client->kv_insert_async(absl::StrCat("k/", i), absl::StrCat("v", i), false, absl::Seconds(5)).ok());
  }
  // A later call of the same client sees every insert applied.
  EXPECT_EQ(*client->kv_get("k/2999", absl::Seconds(1)), "v2999");
  EXPECT_EQ(c.service->kv_dir("k").size(), 3000u);
  // An insert-once conflict is reported once, naming the key: by the insert itself when its acknowledgement
  // is already there, else by the flush (or the client's next call).
  ASSERT_TRUE(client->register_task(0, 9, 1, absl::Seconds(2)).ok());
  absl::Status inserted = client->kv_insert_async("k/7", "again", false, absl::Seconds(5));
  // A heartbeat neither waits for pipelined inserts nor reports their errors.
  EXPECT_TRUE(client->heartbeat(0, 9, absl::Seconds(2)).ok());
  absl::Status flushed = client->kv_flush(absl::Seconds(5));
  ASSERT_NE(inserted.ok(), flushed.ok()) << inserted << " / " << flushed;
  const absl::Status& conflict = inserted.ok() ? flushed : inserted;
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(conflict.message(), HasSubstr("pipelined insert of key 'k/7'"));
  EXPECT_TRUE(client->kv_flush(absl::Seconds(5)).ok());
  inserted = client->kv_insert_async("k/8", "again", false, absl::Seconds(5));
  absl::StatusOr<std::string> next = client->kv_get("k/1", absl::Seconds(1));
  ASSERT_NE(inserted.ok(), next.ok());
  EXPECT_EQ((inserted.ok() ? next.status() : inserted).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*client->kv_get("k/1", absl::Seconds(1)), "v1");
}

TEST(FastPath, ConcurrentCallsShareThePool) {
  FastCluster c(1);
  auto client = c.client();
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 200; ++i) ASSERT_TRUE(client->kv_increment("ctr", 1, absl::Seconds(5)).ok());
    });
  }
  // A blocking get holds its own connection while the others go on.
  std::thread getter([&] { EXPECT_EQ(*client->kv_get("late", absl::Seconds(5)), "here"); });
  for (auto& t : ts) t.join();
  ASSERT_TRUE(client->kv_insert("late", "here", false, absl::Seconds(1)).ok());
  getter.join();
  EXPECT_EQ(*client->kv_increment("ctr", 0, absl::Seconds(1)), 1200);
}

TEST(FastPath, MalformedRequestsGetErrorsAndTheConnectionKeepsServing) {
  FastCluster c(1);
  int fd = raw_connect(c.server->port());
  send_all(fd, encode_frame(999, 0, 5, "whatever"));
  auto unknown = read_raw_frame(fd);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->header.id, 5u);
  EXPECT_EQ(error_of(*unknown).code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(error_of(*unknown).message(), HasSubstr("unknown op 999"));
  send_all(fd, encode_frame(static_cast<uint16_t>(Rpc::kKvInsert), 0, 6, std::string("\xff\xff\xff", 3)));
  auto malformed = read_raw_frame(fd);
  ASSERT_TRUE(malformed.has_value());
  EXPECT_EQ(error_of(*malformed).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(error_of(*malformed).message(), HasSubstr("is not a valid request"));
  // Still usable: a valid insert on the same connection.
  proto::KvInsertRequest req;
  req.set_key("raw");
  req.set_value("ok");
  send_all(fd, encode_frame(static_cast<uint16_t>(Rpc::kKvInsert), 0, 7, req.SerializeAsString()));
  auto ok = read_raw_frame(fd);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->header.flags, 0);
  EXPECT_EQ(*c.service->kv_try_get("raw"), "ok");
  // A frame announcing more than the limit is a broken stream: the connection is closed.
  std::string huge = encode_frame(static_cast<uint16_t>(Rpc::kKvInsert), 0, 8, "");
  huge[4] = huge[5] = huge[6] = huge[7] = '\xff';
  send_all(fd, huge);
  EXPECT_FALSE(read_raw_frame(fd).has_value());
  ::close(fd);
  // Other clients are unaffected.
  EXPECT_TRUE(c.client()->kv_insert("after", "1", false, absl::Seconds(1)).ok());
}

TEST(FastPath, OtherProtocolsAreHandedOffUnread) {
  FastCluster c(1);
  int fd = raw_connect(c.server->port());
  send_all(fd, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  char buf[32] = {};
  ssize_t r = ::recv(fd, buf, sizeof buf, MSG_WAITALL);
  EXPECT_EQ(std::string(buf, r > 0 ? static_cast<size_t>(r) : 0), "HANDED OFF");
  ::close(fd);
  EXPECT_EQ(c.handed_off.load(), 1);
}

TEST(FastPath, AClosedConnectionAbandonsItsRegistration) {
  FastCluster c(2);
  int fd = raw_connect(c.server->port());
  proto::RegisterRequest req;
  req.set_task(0);
  req.set_incarnation(42);
  req.set_num_tasks(2);
  req.set_timeout_ms(30000);
  send_all(fd, encode_frame(static_cast<uint16_t>(Rpc::kRegister), 0, 1, req.SerializeAsString()));
  absl::Time until = absl::Now() + absl::Seconds(5);
  while (c.service->status().tasks[0].info.state != TaskState::kConnected && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(c.service->status().tasks[0].info.state, TaskState::kConnected);
  ::close(fd);  // the process "dies" while it waits for task 1
  while (c.service->status().tasks[0].info.state != TaskState::kError && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ServiceStatus st = c.service->status();
  EXPECT_EQ(st.tasks[0].info.state, TaskState::kError);
  EXPECT_THAT(st.tasks[0].info.error.message(), HasSubstr("went away while waiting for the other tasks to register"));
}

TEST(FastPath, ALostWatchStreamFailsTheTaskAndACancelledOneEndsNext) {
  FastCluster c(1);
  auto client = c.client();
  ASSERT_TRUE(client->register_task(0, 7, 1, absl::Seconds(2)).ok());
  auto stream = client->watch(0, 7, absl::Seconds(2));
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<JobState> first = (*stream)->next(absl::Seconds(2));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->tasks[0].state, TaskState::kConnected);
  EXPECT_EQ((*stream)->next(absl::Milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  // cancel() from another thread ends a blocked next() with CANCELLED.
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    (*stream)->cancel();
  });
  EXPECT_EQ((*stream)->next(absl::Seconds(5)).status().code(), absl::StatusCode::kCancelled);
  canceller.join();
  stream->reset();  // the connection closes: for the service, the task's connection is lost
  absl::Time until = absl::Now() + absl::Seconds(5);
  while (c.service->status().tasks[0].info.state != TaskState::kError && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(c.service->status().tasks[0].info.state, TaskState::kError);
}

TEST(FastPath, AReplyToAConnectionThatGaveUpIsDropped) {
  FastCluster c(1);
  FastPathChannel channel(c.addr);
  proto::KvGetRequest req;
  req.set_key("later");
  req.set_timeout_ms(5000);
  proto::KvGetResponse resp;
  absl::Status s = channel.call(Rpc::kKvGet, req, &resp, absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("no answer from the coordination service at " + c.addr));
  // The service answers the abandoned get now; the reply goes nowhere and the server keeps serving.
  ASSERT_TRUE(c.service->kv_insert("later", "v", false, Caller::trusted()).ok());
  absl::SleepFor(absl::Milliseconds(50));
  auto client = c.client();
  EXPECT_EQ(*client->kv_get("later", absl::Seconds(1)), "v");
}

// With one reactor thread and with several (the connections spread over them: each barrier's release, each
// agreement and each job-state change is written by the reactor of each connection).
class FastPathReactors : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Threads, FastPathReactors, ::testing::Values(1, 3),
                         [](const auto& info) { return absl::StrCat(info.param, "_reactors"); });

TEST_P(FastPathReactors, AgentsOverTheFastPathPassBarriersAndAgree) {
  constexpr int kTasks = 7;
  FastCluster c(kTasks, GetParam());
  std::vector<std::unique_ptr<CoordinationAgent>> agents;
  for (int i = 0; i < kTasks; ++i) {
    AgentOptions ao;
    ao.task_id = i;
    ao.num_tasks = kTasks;
    ao.init_timeout = absl::Seconds(5);
    ao.heartbeat_interval = absl::Milliseconds(200);
    ao.heartbeat_timeout = absl::Seconds(3);
    ao.publish_on_connect = {{absl::StrCat("topo/", i), absl::StrCat("devices of ", i)}};
    agents.push_back(std::make_unique<CoordinationAgent>(c.client(), ao));
  }
  std::vector<std::thread> ts;
  for (int i = 0; i < kTasks; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents[i]->connect().ok()); });
  for (auto& t : ts) t.join();
  // What each published before registering is there once everyone registered.
  for (int i = 0; i < kTasks; ++i) {
    EXPECT_EQ(*agents[0]->kv_try_get(absl::StrCat("topo/", i)), absl::StrCat("devices of ", i));
  }
  std::vector<TaskId> all;
  std::vector<std::string> payloads;
  for (int i = 0; i < kTasks; ++i) {
    all.push_back(i);
    payloads.push_back(absl::StrCat(i));
  }
  for (int round = 0; round < 5; ++round) {
    ts.clear();
    for (int i = 0; i < kTasks; ++i) {
      ts.emplace_back([&, i] {
        EXPECT_TRUE(agents[i]->barrier("b", absl::Seconds(5)).ok());
        auto live = agents[i]->get_live_tasks(LiveSetRequest{{}, "ls", absl::StrCat(i)}, absl::Seconds(5));
        ASSERT_TRUE(live.ok()) << live.status();
        EXPECT_EQ(live->tasks, all);
        EXPECT_EQ(live->payloads, payloads);
      });
    }
    for (auto& t : ts) t.join();
  }
  ts.clear();
  for (int i = 0; i < kTasks; ++i) ts.emplace_back([&, i] { EXPECT_TRUE(agents[i]->shutdown().ok()); });
  for (auto& t : ts) t.join();
}

// Replies completed off every reactor (a barrier's timeout, on the service's timer thread) and pipelined replies
// on many connections at once still arrive, each on its own connection and in order.
TEST_P(FastPathReactors, RepliesFromOtherThreadsReachTheirConnections) {
  constexpr int kTasks = 5;
  FastCluster c(kTasks, GetParam());
  std::vector<std::unique_ptr<CoordinationClient>> clients;
  for (int i = 0; i < kTasks; ++i) clients.push_back(c.client());
  std::vector<std::thread> ts;
  for (int i = 0; i < kTasks; ++i) {
    ts.emplace_back([&, i] { EXPECT_TRUE(clients[i]->register_task(i, 100 + i, kTasks, absl::Seconds(5)).ok()); });
  }
  for (auto& t : ts) t.join();
  // Only task 0 arrives: the timer thread fails the barrier, and its reply goes through task 0's reactor.
  absl::Status alone = clients[0]->barrier(0, 100, "alone", 0, {}, absl::Milliseconds(200));
  EXPECT_EQ(alone.code(), absl::StatusCode::kDeadlineExceeded) << alone;
  // Every task writes and reads its own keys while the others do.
  ts.clear();
  for (int i = 0; i < kTasks; ++i) {
    ts.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) {
        const std::string key = absl::StrCat("t", i, "/", k);
        ASSERT_TRUE(clients[i]->kv_insert(key, absl::StrCat(i * 1000 + k), false, absl::Seconds(5)).ok());
        EXPECT_EQ(*clients[i]->kv_get(key, absl::Seconds(5)), absl::StrCat(i * 1000 + k));
      }
      EXPECT_TRUE(clients[i]->barrier(i, 100 + i, "all", 0, {}, absl::Seconds(5)).ok());
    });
  }
  for (auto& t : ts) t.join();
}

TEST(FastPath, ReactorThreadsAreCheckedAndGrowWithTheJob) {
  ServiceOptions o;
  o.num_tasks = 2;
  auto service = *CoordinationService::create(o);
  for (int bad : {0, FastPathServer::kMaxReactorThreads + 1}) {
    auto s = FastPathServer::start(service.get(), "127.0.0.1:0", [](int fd) { ::close(fd); }, nullptr, bad);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(absl::StrCat("found ", bad)));
  }
  EXPECT_EQ(FastPathServer::default_reactor_threads(1), 1);
  EXPECT_EQ(FastPathServer::default_reactor_threads(FastPathServer::kTasksPerReactor), 1);
  const int cores = allowed_cpu_count();
  EXPECT_EQ(FastPathServer::default_reactor_threads(FastPathServer::kTasksPerReactor + 1), std::min(cores, 2));
  EXPECT_EQ(FastPathServer::default_reactor_threads(1 << 20),
            std::min(cores, FastPathServer::kMaxDefaultReactorThreads));
}

}  // namespace
}  // namespace mcx::distributed
