// mcx::distributed::initialize/shutdown in one test process: one process alone; two processes where the
// second is a hand-driven agent over gRPC; devices already used; an unreachable coordinator.
#include "mcx/distributed/distributed.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/core/topology.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "mcx/distributed/rpc/grpc_server.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

int free_port() {
  auto service = *CoordinationService::create(ServiceOptions{});
  auto server = *GrpcCoordinationServer::start(service.get(), {"127.0.0.1:0", {}});
  return server->port();
}

InitializeOptions base(int port, int n, int id) {
  InitializeOptions o;
  o.coordinator_address = absl::StrCat("127.0.0.1:", port);
  o.bind_address = o.coordinator_address;
  o.num_processes = n;
  o.process_id = id;
  o.cluster_detection = "none";
  o.init_timeout = absl::Seconds(5);
  o.heartbeat_interval = absl::Milliseconds(200);
  o.heartbeat_timeout = absl::Seconds(3);
  o.shutdown_timeout = absl::Seconds(3);
  o.on_failure = [](const TaskFailure& f) { ADD_FAILURE() << "unexpected failure: " << f.message; };
  return o;
}

class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override { reset_topology_for_testing(); }
  void TearDown() override {
    (void)shutdown_or_status();
    reset_topology_for_testing();
  }
};

TEST_F(DistributedTest, SingleProcess) {
  InitializeOptions o = base(free_port(), 1, 0);
  o.cpu_device_count = 2;
  ASSERT_TRUE(initialize_or_status(o).ok());
  EXPECT_TRUE(is_initialized());
  auto topo = distributed_topology();
  ASSERT_TRUE(topo.has_value());
  EXPECT_EQ(topo->process_count, 1);
  ASSERT_EQ(topo->devices.size(), 2u);
  EXPECT_EQ(topo->devices[1].local_id, 1);
  absl::Status again = initialize_or_status(o);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("should only be called once"));
  EXPECT_THROW(initialize(o), mcx::FailedPrecondition);
  ASSERT_TRUE(agent()->kv_insert("k", "v").ok());
  EXPECT_TRUE(shutdown_or_status().ok());
  EXPECT_FALSE(is_initialized());
  EXPECT_FALSE(distributed_topology().has_value());
}

TEST_F(DistributedTest, RefusedAfterDevicesWereUsed) {
  mark_devices_used();
  absl::Status s = initialize_or_status(base(free_port(), 1, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("devices were already used"));
  EXPECT_FALSE(is_initialized());
}

TEST_F(DistributedTest, TwoProcessesExchangeDevices) {
  int port = free_port();
  InitializeOptions o = base(port, 2, 0);
  o.local_device_ids = std::vector<int>{0, 1};
  absl::Status init;
  std::thread p0([&] { init = initialize_or_status(o); });
  // "Process 1": an agent over gRPC publishing three devices.
  AgentOptions ao;
  ao.task_id = 1;
  ao.num_tasks = 2;
  ao.init_timeout = absl::Seconds(5);
  ao.heartbeat_interval = absl::Milliseconds(200);
  ao.heartbeat_timeout = absl::Seconds(3);
  ao.on_failure = [](const TaskFailure& f) { ADD_FAILURE() << f.message; };
  CoordinationAgent p1(*make_grpc_client({absl::StrCat("127.0.0.1:", port), {}}), ao);
  ASSERT_TRUE(p1.connect().ok());
  ASSERT_TRUE(p1.kv_insert(topology_key(1), "host the other host\n0 cpu cpu\n1 cpu cpu\n2 cpu cpu\n").ok());
  p0.join();
  ASSERT_TRUE(init.ok()) << init;
  auto topo = *distributed_topology();
  EXPECT_EQ(topo.process_index, 0);
  EXPECT_EQ(topo.process_count, 2);
  ASSERT_EQ(topo.devices.size(), 5u);
  EXPECT_EQ(topo.devices[2].process_index, 1);
  EXPECT_EQ(topo.devices[2].local_id, 0);
  EXPECT_EQ(topo.devices[4].global_id, 4);
  EXPECT_EQ(topology_process_count(), 2);
  // Each process's host, for the collectives across hosts: its own identity and what the other published.
  EXPECT_EQ(topo.process_hosts, (std::vector<std::string>{host_identity(process_env()), "the other host"}));
  // Process 0's published host and device list are visible to process 1.
  EXPECT_EQ(*p1.kv_get(topology_key(0), absl::Seconds(1)),
            absl::StrCat("host ", host_identity(process_env()), "\n0 cpu cpu\n1 cpu cpu\n"));
  std::thread p1_leave([&] { EXPECT_TRUE(p1.shutdown().ok()); });
  EXPECT_TRUE(shutdown_or_status().ok());
  p1_leave.join();
}

TEST_F(DistributedTest, UnreachableCoordinatorIsAClearErrorWithinTheTimeout) {
  InitializeOptions o = base(free_port(), 2, 1);
  o.init_timeout = absl::Milliseconds(600);
  absl::Time start = absl::Now();
  absl::Status s = initialize_or_status(o);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("process 1 of 2"));
  EXPECT_THAT(s.message(), HasSubstr("cannot reach the coordination service"));
  EXPECT_FALSE(is_initialized());
}

}  // namespace
}  // namespace mcx::distributed
