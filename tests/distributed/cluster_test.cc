// Cluster detection (pure functions over an environment map) and initialize()'s configuration resolution.
#include "mcx/distributed/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "mcx/distributed/distributed.h"

namespace mcx::distributed {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SlurmNodelist, Expands) {
  EXPECT_THAT(*expand_slurm_nodelist("node[001-003,007],gpu7"),
              ElementsAre("node001", "node002", "node003", "node007", "gpu7"));
  EXPECT_THAT(*expand_slurm_nodelist("h1"), ElementsAre("h1"));
  EXPECT_THAT(*expand_slurm_nodelist("a[8-11]"), ElementsAre("a8", "a9", "a10", "a11"));
  EXPECT_THAT(*expand_slurm_nodelist("r[1-2]-n[01-02]"), ElementsAre("r1-n01", "r1-n02", "r2-n01", "r2-n02"));
  EXPECT_EQ(expand_slurm_nodelist("node[001-015],gpu7")->size(), 16u);
  EXPECT_EQ((*expand_slurm_nodelist("node[001-015],gpu7"))[14], "node015");
  for (const char* bad : {"node[3-1]", "node[1-2", "node1-2]", "a,,b", "n[[1]]", "n[x]", "n[]"}) {
    auto r = expand_slurm_nodelist(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("cannot parse the Slurm node list")) << bad;
  }
}

TEST(DetectCluster, OpenMpiFromHnpUri) {
  EnvMap env = {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                {"OMPI_MCA_orte_hnp_uri", "1718681600.0;tcp://10.1.2.3,192.168.0.5:44551"}};
  auto c = *detect_cluster(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->method, "ompi");
  EXPECT_EQ(c->num_processes, 4);
  EXPECT_EQ(c->process_id, 2);
  EXPECT_EQ(c->local_process_id, 0);
  // port = (jobid / 4096) % 4096 + 61440
  EXPECT_EQ(*c->coordinator_address, absl::StrCat("10.1.2.3:", (1718681600LL / 4096) % 4096 + 61440));
  env["MCX_COORDINATOR_ADDRESS"] = "head:1234";
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, "head:1234");
  env["MCX_COORDINATOR_PORT"] = "999";
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, "head:999");
  env.erase("MCX_COORDINATOR_ADDRESS");
  env["OMPI_MCA_orte_hnp_uri"] = "4096.0;tcp6://[fe80::1]:5000";
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, "[fe80::1]:999");
  env["OMPI_COMM_WORLD_RANK"] = "two";
  EXPECT_THAT(detect_cluster(env).status().message(), HasSubstr("OMPI_COMM_WORLD_RANK='two' is not an integer"));
}

TEST(DetectCluster, OpenMpiInsideASlurmAllocationPointsAtItsFirstNode) {
  // `salloc -N 2 mpirun ...`: mpirun runs on the submitting host (10.78.0.1), rank 0 on the allocation's first
  // node, which is where the coordinator is; the port still comes from mpirun's job id.
  EnvMap env = {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_MCA_orte_hnp_uri", "1823539200.0;tcp://10.78.0.1:54241"}, {"SLURM_JOB_ID", "1"},
                {"SLURM_JOB_NODELIST", "mcxnode[1-2]"}};
  auto c = *detect_cluster(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->method, "ompi");  // OpenMPI's variables win over Slurm's (those describe mpirun's daemons)
  EXPECT_EQ(*c->coordinator_address, absl::StrCat("mcxnode1:", (1823539200LL / 4096) % 4096 + 61440));
  env["SLURM_JOB_NODELIST"] = "rack[";
  EXPECT_THAT(detect_cluster(env).status().message(), HasSubstr("cannot parse the Slurm node list"));
}

// Open MPI 5 (PRRTE over PMIx), as JAX's PrrteCluster reads it: the launcher from the PMIx server URI, the port
// from the job id in the PMIx namespace; without PRTE_LAUNCHED the same variables are plain Open MPI's.
TEST(DetectCluster, OpenMpi5FromThePmixServerUri) {
  EnvMap env = {{"PRTE_LAUNCHED", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_NAMESPACE", "prterun-node7-4242@1"},
                {"PMIX_SERVER_URI41", "prterun-node7-4242@0.0;tcp4://10.1.2.3:40123"},
                {"PMIX_SERVER_URI2", "prterun-node7-4242@0.0;tcp4://10.9.9.9:40123"}};
  auto c = *detect_cluster(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->method, "prrte");
  EXPECT_EQ(c->num_processes, 4);
  EXPECT_EQ(c->process_id, 3);
  EXPECT_EQ(c->local_process_id, 1);
  EXPECT_EQ(*c->coordinator_address, absl::StrCat("10.1.2.3:", 4242 % 4096 + 61440));  // URI41 first
  env.erase("PMIX_SERVER_URI41");
  env["PMIX_SERVER_URI2"] = "prterun-node7-4242@0.0;tcp6://[fe80::7]:40123";
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, absl::StrCat("[fe80::7]:", 4242 % 4096 + 61440));
  env["MCX_COORDINATOR_PORT"] = "999";
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, "[fe80::7]:999");
  env.erase("MCX_COORDINATOR_PORT");
  env["PMIX_NAMESPACE"] = "weird";
  EXPECT_THAT(detect_cluster(env).status().message(), HasSubstr("cannot parse the job id of PMIX_NAMESPACE='weird'"));
  env["MCX_COORDINATOR_ADDRESS"] = "head:1234";  // an explicit address needs neither
  EXPECT_EQ(*(*detect_cluster(env))->coordinator_address, "head:1234");
  env.erase("MCX_COORDINATOR_ADDRESS");
  env.erase("PMIX_SERVER_URI2");
  EXPECT_THAT(detect_cluster(env).status().message(), HasSubstr("no PMIX_SERVER_URI* variable"));
  env.erase("PRTE_LAUNCHED");
  EXPECT_EQ((*detect_cluster(env))->method, "ompi");
}

TEST(DetectCluster, SlurmK8sEnvOrderAndMethods) {
  EnvMap slurm = {{"SLURM_JOB_ID", "5000"}, {"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"},
                  {"SLURM_STEP_NODELIST", "gpu[07-08],cpu1"}};
  auto s = *detect_cluster(slurm);
  EXPECT_EQ(s->method, "slurm");
  EXPECT_EQ(*s->coordinator_address, absl::StrCat("gpu07:", 5000 % 4096 + 61440));
  EXPECT_EQ(s->num_processes, 8);
  EXPECT_EQ(s->process_id, 3);
  EXPECT_EQ(s->local_process_id, 1);
  // OpenMPI wins over Slurm when both are present (mpirun inside an allocation).
  EnvMap both = slurm;
  both["OMPI_COMM_WORLD_SIZE"] = "2";
  both["OMPI_COMM_WORLD_RANK"] = "1";
  EXPECT_EQ((*detect_cluster(both))->method, "ompi");
  EXPECT_EQ((*detect_cluster(both, "slurm"))->method, "slurm");
  // Kubernetes indexed Job.
  EnvMap k8s = {{"JOB_COMPLETION_INDEX", "2"}, {"HOSTNAME", "train-2"}, {"MCX_K8S_SUBDOMAIN", "train-svc"},
                {"MCX_NUM_PROCESSES", "4"}};
  auto k = *detect_cluster(k8s);
  EXPECT_EQ(k->method, "k8s");
  EXPECT_EQ(k->process_id, 2);
  EXPECT_EQ(k->num_processes, 4);
  EXPECT_EQ(*k->coordinator_address, absl::StrCat("train-0.train-svc:", kDefaultCoordinatorPort));
  k8s["HOSTNAME"] = "train-2-abcde";
  EXPECT_THAT(detect_cluster(k8s).status().message(), HasSubstr("does not end in '-2'"));
  // mcx's own variables.
  EnvMap own = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", "2"}, {"MCX_PROCESS_ID", "1"}};
  auto e = *detect_cluster(own);
  EXPECT_EQ(e->method, "env");
  EXPECT_EQ(e->process_id, 1);
  EXPECT_FALSE((*detect_cluster(EnvMap{})).has_value());
  EXPECT_FALSE((*detect_cluster(own, "none")).has_value());
  EXPECT_EQ(detect_cluster(own, "magic").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DetectCluster, LaunchedAsJobNeedsMoreThanOneProcess) {
  EXPECT_TRUE(launched_as_job({{"SLURM_JOB_ID", "9"}, {"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"}}));
  EXPECT_FALSE(launched_as_job({{"SLURM_JOB_ID", "9"}, {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}}));
  EXPECT_FALSE(launched_as_job(EnvMap{}));
  EXPECT_FALSE(launched_as_job({{"SLURM_JOB_ID", "9"}, {"SLURM_NTASKS", "two"}, {"SLURM_PROCID", "0"}}));
}

TEST(HostIdentity, NamesTheMachineAndItsNetworkNamespaceUnlessSetByHand) {
  const std::string mine = host_identity(EnvMap{});
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  EXPECT_THAT(mine, ::testing::StartsWith(absl::StrCat(name, " boot ")));
  EXPECT_THAT(mine, HasSubstr(" net net:["));  // processes in other network namespaces are other hosts
  EXPECT_EQ(host_identity(EnvMap{}), mine);     // stable
  EXPECT_EQ(host_identity({{"MCX_HOST_ID", "rack 3 node 7"}}), "rack 3 node 7");
  EXPECT_EQ(host_identity({{"MCX_HOST_ID", ""}}), mine);  // empty: not set
}

TEST(ResolveConfig, OptionsOverrideDetectionAndDefaults) {
  EnvMap env = {{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"},
                {"SLURM_STEP_NODELIST", "n1"}, {"MCX_CPU_DEVICE_COUNT", "3"}, {"MCX_HEARTBEAT_TIMEOUT", "5"}};
  InitializeOptions o;
  o.process_id = 2;
  auto c = *resolve_config(o, env);
  EXPECT_EQ(c.detected_by, "slurm");
  EXPECT_FALSE(c.local_process_id.has_value());  // no SLURM_LOCALID
  EXPECT_EQ(c.process_id, 2);  // explicit wins
  EXPECT_EQ(c.num_processes, 4);
  EXPECT_EQ(c.coordinator_address, absl::StrCat("n1:", 7 + 61440));
  EXPECT_EQ(c.bind_address, absl::StrCat("[::]:", 7 + 61440));
  EXPECT_EQ(c.cpu_device_count, 3);
  EXPECT_FALSE(c.local_device_ids.has_value());  // every device the default platform has
  EXPECT_FALSE(c.host_service);  // process 2
  EXPECT_EQ(c.heartbeat_timeout, absl::Seconds(5));
  EXPECT_EQ(c.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(c.init_timeout, absl::Seconds(300));      // JAX's initialization_timeout
  EXPECT_EQ(c.shutdown_timeout, absl::Seconds(300));  // and its shutdown timeout
  env["SLURM_LOCALID"] = "1";
  EXPECT_EQ(resolve_config(o, env)->local_process_id, 1);
  o.process_id = 0;
  EXPECT_TRUE(resolve_config(o, env)->host_service);
  env["MCX_STANDALONE_COORDINATOR"] = "1";
  EXPECT_FALSE(resolve_config(o, env)->host_service);
  o.process_id = 4;
  EXPECT_THAT(resolve_config(o, env).status().message(), HasSubstr("process_id 4 is outside [0, 4)"));
  EXPECT_THAT(resolve_config(InitializeOptions{}, EnvMap{}).status().message(), HasSubstr("no coordinator address"));
  EnvMap strict = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", "1"}, {"MCX_PROCESS_ID", "0"},
                   {"MCX_REQUIRE_MTLS", "1"}};
  EXPECT_EQ(resolve_config(InitializeOptions{}, strict).status().code(), absl::StatusCode::kFailedPrecondition);
  EnvMap bad = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", "1"}, {"MCX_PROCESS_ID", "0"},
                {"MCX_INIT_TIMEOUT", "-3"}};
  EXPECT_THAT(resolve_config(InitializeOptions{}, bad).status().message(), HasSubstr("MCX_INIT_TIMEOUT='-3'"));
}

TEST(ResolveConfig, HeartbeatDefaultsGrowWithTheJobPast4096Processes) {
  auto config = [](int n, EnvMap extra = {}) {
    EnvMap env = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", std::to_string(n)}, {"MCX_PROCESS_ID", "0"}};
    env.insert(extra.begin(), extra.end());
    return *resolve_config(InitializeOptions{}, env);
  };
  for (int n : {1, 64, 4096}) {
    EXPECT_EQ(config(n).heartbeat_interval, absl::Seconds(1)) << n;
    EXPECT_EQ(config(n).heartbeat_timeout, absl::Seconds(10)) << n;
  }
  // The coordinator then receives about 4,096 heartbeats a second: 16,384 processes every 4 s.
  EXPECT_EQ(config(16384).heartbeat_interval, absl::Seconds(4));
  EXPECT_EQ(config(16384).heartbeat_timeout, absl::Seconds(40));
  EXPECT_EQ(config(6144).heartbeat_interval, absl::Milliseconds(1500));
  // A timeout that is set bounds the interval left unset (three heartbeats per timeout), and both set win.
  EXPECT_EQ(config(16384, {{"MCX_HEARTBEAT_TIMEOUT", "6"}}).heartbeat_interval, absl::Seconds(2));
  EXPECT_EQ(config(2, {{"MCX_HEARTBEAT_TIMEOUT", "1.5"}}).heartbeat_interval, absl::Milliseconds(500));
  const auto both = config(16384, {{"MCX_HEARTBEAT_TIMEOUT", "20"}, {"MCX_HEARTBEAT_INTERVAL", "1"}});
  EXPECT_EQ(both.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(both.heartbeat_timeout, absl::Seconds(20));
}

TEST(ResolveConfig, LocalDeviceIdsFromOptionsOrTheEnvironment) {
  EnvMap env = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", "2"}, {"MCX_PROCESS_ID", "1"},
                {"MCX_LOCAL_DEVICE_IDS", "2,3"}};
  EXPECT_EQ(resolve_config(InitializeOptions{}, env)->local_device_ids, std::vector<int>({2, 3}));
  InitializeOptions o;
  o.local_device_ids = std::vector<int>{0};
  EXPECT_EQ(resolve_config(o, env)->local_device_ids, std::vector<int>({0}));  // the option wins
  env["MCX_LOCAL_DEVICE_IDS"] = "1,x";
  EXPECT_THAT(resolve_config(InitializeOptions{}, env).status().message(),
              HasSubstr("MCX_LOCAL_DEVICE_IDS='1,x' is not a comma-separated list of device ids"));
  o.local_device_ids = std::vector<int>{};
  EXPECT_THAT(resolve_config(o, env).status().message(), HasSubstr("local_device_ids is empty"));
}

// Under a cluster launcher, MCX_GPUS_PER_PROCESS=G gives the process with local index i (mpirun's
// OMPI_COMM_WORLD_LOCAL_RANK, srun's SLURM_LOCALID) GPUs i*G .. i*G+G-1; without a local index it is refused.
TEST(ResolveConfig, GpusPerProcessFollowTheLaunchersLocalIndex) {
  EnvMap slurm = {{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"},
                  {"SLURM_STEP_NODELIST", "n1"}, {"MCX_GPUS_PER_PROCESS", "2"}};
  EXPECT_EQ(resolve_config(InitializeOptions{}, slurm)->local_device_ids, std::vector<int>({2, 3}));
  EnvMap ompi = {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                 {"OMPI_MCA_orte_hnp_uri", "1718681600.0;tcp://10.1.2.3:44551"}};
  InitializeOptions one;
  one.gpus_per_process = 1;
  EXPECT_EQ(resolve_config(one, ompi)->local_device_ids, std::vector<int>({2}));
  slurm["MCX_LOCAL_DEVICE_IDS"] = "0";  // explicit ids win
  EXPECT_EQ(resolve_config(InitializeOptions{}, slurm)->local_device_ids, std::vector<int>({0}));
  EnvMap plain = {{"MCX_COORDINATOR_ADDRESS", "h:1"}, {"MCX_NUM_PROCESSES", "2"}, {"MCX_PROCESS_ID", "1"},
                  {"MCX_GPUS_PER_PROCESS", "1"}};
  EXPECT_THAT(resolve_config(InitializeOptions{}, plain).status().message(),
              HasSubstr("needs the process's index on its host"));
  slurm.erase("MCX_LOCAL_DEVICE_IDS");
  slurm["MCX_GPUS_PER_PROCESS"] = "0";
  EXPECT_THAT(resolve_config(InitializeOptions{}, slurm).status().message(), HasSubstr("gpus_per_process must be >= 1"));
}

}  // namespace
}  // namespace mcx::distributed
