// Cluster detection in Kubernetes Indexed Jobs and JobSets: what the pods' environment, /etc/hosts and the API
// server give (kubernetes_cluster.h), against a fake API and, end to end, a real HTTPS server standing in for the
// API server with the service account's files (token, CA, namespace) on disk.
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/distributed.h"
#include "mcx/distributed/https_get.h"
#include "mcx/distributed/kubernetes_api.h"
#include "mcx/distributed/kubernetes_cluster.h"
#include "tests/distributed/test_certs.h"
#include "tests/distributed/test_https_server.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

// What the kubelet writes into /etc/hosts of a pod with a subdomain.
std::string hosts_of(const std::string& pod, const std::string& subdomain) {
  return absl::StrCat("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n",
                      "10.8.0.12\t", pod, ".", subdomain, ".team-a.svc.cluster.local\t", pod, "\n");
}

std::string job_json(const std::string& name, int completions, int parallelism,
                     const std::map<std::string, std::string>& labels = {}) {
  std::string label_text = absl::StrCat(R"("batch.kubernetes.io/job-name": ")", name, R"(")");
  for (const auto& [k, v] : labels) absl::StrAppend(&label_text, R"(, ")", k, R"(": ")", v, R"(")");
  return absl::StrCat(R"({"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": ")", name,
                      R"(", "namespace": "team-a", "labels": {)", label_text,
                      R"(}, "managedFields": [{"manager": "kube-controller-manager"}]}, "spec": {"completions": )",
                      completions, R"(, "parallelism": )", parallelism,
                      R"(, "completionMode": "Indexed", "template": {"spec": {"subdomain": "svc"}}}, "status": {"active": 2}})");
}

// A JobSet "train": a driver (1 Job of 1 pod) then workers (2 Jobs of 4 pods), as the JobSet API serves it.
std::string jobset_json(const std::string& subdomain_field = "") {
  return absl::StrCat(
      R"({"kind": "JobSet", "apiVersion": "jobset.x-k8s.io/v1alpha2", "metadata": {"name": "train"}, "spec": {)",
      subdomain_field,
      R"("replicatedJobs": [{"name": "driver", "replicas": 1, "template": {"spec": {"completions": 1, "parallelism": 1}}},)",
      R"({"name": "workers", "replicas": 2, "template": {"spec": {"completions": 4, "parallelism": 4,)",
      R"( "completionMode": "Indexed"}}}]}})");
}

std::map<std::string, std::string> jobset_labels(const std::string& replicated, int job_index) {
  return {{"jobset.sigs.k8s.io/jobset-name", "train"},
          {"jobset.sigs.k8s.io/replicatedjob-name", replicated},
          {"jobset.sigs.k8s.io/job-index", std::to_string(job_index)}};
}

// An API server held in memory: objects by name, or a status to fail with; counts the requests.
class FakeApi : public KubernetesApi {
 public:
  absl::StatusOr<KubernetesJob> read_job(const std::string& name, absl::Time) const override {
    ++calls;
    if (!failure.ok()) return failure;
    auto it = jobs.find(name);
    if (it == jobs.end()) return absl::NotFoundError(absl::StrCat("no job ", name));
    return parse_kubernetes_job(it->second);
  }
  absl::StatusOr<KubernetesJobSet> read_jobset(const std::string& name, absl::Time) const override {
    ++calls;
    auto it = jobsets.find(name);
    if (it == jobsets.end()) return absl::NotFoundError(absl::StrCat("no jobset ", name));
    return parse_kubernetes_jobset(it->second);
  }
  std::map<std::string, std::string> jobs, jobsets;
  absl::Status failure;
  mutable int calls = 0;
};

ClusterProbes probes_with(std::shared_ptr<FakeApi> api, std::optional<std::string> hosts) {
  ClusterProbes p;
  p.kubernetes = std::move(api);
  p.etc_hosts = std::move(hosts);
  return p;
}

TEST(PodSubdomain, ReadFromTheKubeletsHostsFile) {
  EXPECT_EQ(pod_subdomain(hosts_of("train-3", "svc"), "train-3"), "svc");
  EXPECT_EQ(pod_subdomain(hosts_of("train-3", "svc"), "train-1"), std::nullopt);
  // A pod without a subdomain has only its bare name; a host's own domain is not a pod subdomain.
  EXPECT_EQ(pod_subdomain("10.8.0.12\ttrain-3\n", "train-3"), std::nullopt);
  EXPECT_EQ(pod_subdomain("10.0.0.1 train-3.example.com train-3\n", "train-3"), std::nullopt);
  EXPECT_EQ(pod_subdomain("# 10.0.0.1 train-3.old.ns.svc.cluster.local\n", "train-3"), std::nullopt);
  EXPECT_EQ(pod_subdomain(hosts_of("a", "s"), ""), std::nullopt);
}

TEST(KubernetesObjects, ParseJobsAndJobSetsAndNameWhatIsMissing) {
  auto job = parse_kubernetes_job(job_json("train", 4, 4, {{"x", "y"}}));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "train");
  EXPECT_EQ(job->completions, 4);
  EXPECT_EQ(job->parallelism, 4);
  EXPECT_EQ(job->labels.at("x"), "y");
  // completions defaults to parallelism, parallelism to 1.
  auto bare = parse_kubernetes_job(R"({"metadata": {"name": "j"}, "spec": {"parallelism": 3}})");
  EXPECT_EQ(bare->completions, 3);
  EXPECT_EQ(parse_kubernetes_job(R"({"metadata": {"name": "j"}})")->parallelism, 1);
  EXPECT_THAT(parse_kubernetes_job(R"({"metadata": {}})").status().message(), HasSubstr("metadata.name"));
  EXPECT_THAT(parse_kubernetes_job(R"({"metadata": {"name": "j"}, "spec": {"completions": "4"}})").status().message(),
              HasSubstr("positive integer at spec.completions"));
  EXPECT_EQ(parse_kubernetes_job("<html>502</html>").status().code(), absl::StatusCode::kDataLoss);

  auto set = parse_kubernetes_jobset(jobset_json(R"("network": {"subdomain": "net"}, )"));
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->replicated_jobs.size(), 2u);
  EXPECT_EQ(set->replicated_jobs[1].name, "workers");
  EXPECT_EQ(set->replicated_jobs[1].replicas, 2);
  EXPECT_EQ(set->replicated_jobs[1].completions, 4);
  EXPECT_EQ(set->subdomain, "net");
  EXPECT_EQ(parse_kubernetes_jobset(jobset_json())->subdomain, std::nullopt);
  EXPECT_THAT(parse_kubernetes_jobset(R"({"metadata": {"name": "s"}, "spec": {"replicatedJobs": []}})").status().message(),
              HasSubstr("spec.replicatedJobs"));
}

TEST(DetectKubernetes, AnIndexedJobTakesItsSizeFromTheApiAndItsSubdomainFromHosts) {
  auto api = std::make_shared<FakeApi>();
  api->jobs["train"] = job_json("train", 4, 4);
  const EnvMap env = {{"JOB_COMPLETION_INDEX", "2"}, {"HOSTNAME", "train-2"}};
  auto c = detect_cluster(env, "auto", probes_with(api, hosts_of("train-2", "svc")));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->has_value());
  EXPECT_EQ((*c)->method, "k8s");
  EXPECT_EQ((*c)->num_processes, 4);
  EXPECT_EQ((*c)->process_id, 2);
  EXPECT_EQ((*c)->coordinator_address, absl::StrCat("train-0.svc:", kDefaultCoordinatorPort));
  EXPECT_TRUE((*c)->unresolved.empty()) << (*c)->unresolved;
  // initialize()'s resolution takes the same.
  auto resolved = resolve_config(InitializeOptions{}, env, probes_with(api, hosts_of("train-2", "svc")));
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->num_processes, 4);
  EXPECT_EQ(resolved->process_id, 2);
  EXPECT_EQ(resolved->detected_by, "k8s");
}

TEST(DetectKubernetes, MyVariablesSkipTheApi) {
  auto api = std::make_shared<FakeApi>();
  const EnvMap env = {{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "train-1"}, {"MCX_NUM_PROCESSES", "2"}};
  auto c = *detect_cluster(env, "auto", probes_with(api, hosts_of("train-1", "svc")));
  EXPECT_EQ(api->calls, 0);
  EXPECT_EQ(c->num_processes, 2);
  EXPECT_EQ(c->coordinator_address, absl::StrCat("train-0.svc:", kDefaultCoordinatorPort));
  // MCX_K8S_SUBDOMAIN wins over /etc/hosts, MCX_PROCESS_ID over the index.
  EnvMap named = env;
  named["MCX_K8S_SUBDOMAIN"] = "other";
  named["MCX_PROCESS_ID"] = "0";
  auto d = *detect_cluster(named, "auto", probes_with(api, hosts_of("train-1", "svc")));
  EXPECT_EQ(d->coordinator_address, absl::StrCat("train-0.other:", kDefaultCoordinatorPort));
  EXPECT_EQ(d->process_id, 0);
}

TEST(DetectKubernetes, AJobSetIsOneJobOfProcessesNumberedAcrossItsJobs) {
  auto api = std::make_shared<FakeApi>();
  api->jobsets["train"] = jobset_json();
  api->jobs["train-driver-0"] = job_json("train-driver-0", 1, 1, jobset_labels("driver", 0));
  api->jobs["train-workers-0"] = job_json("train-workers-0", 4, 4, jobset_labels("workers", 0));
  api->jobs["train-workers-1"] = job_json("train-workers-1", 4, 4, jobset_labels("workers", 1));
  // Pod 2 of the second workers Job: after the driver (1) and the first workers Job (4).
  const EnvMap env = {{"JOB_COMPLETION_INDEX", "2"}, {"HOSTNAME", "train-workers-1-2"}};
  auto c = *detect_cluster(env, "auto", probes_with(api, hosts_of("train-workers-1-2", "train")));
  EXPECT_EQ(c->num_processes, 9);
  EXPECT_EQ(c->process_id, 1 + 4 + 2);
  EXPECT_EQ(c->coordinator_address, absl::StrCat("train-driver-0-0.train:", kDefaultCoordinatorPort));
  auto driver = *detect_cluster({{"JOB_COMPLETION_INDEX", "0"}, {"HOSTNAME", "train-driver-0-0"}}, "auto",
                                probes_with(api, std::nullopt));
  EXPECT_EQ(driver->process_id, 0);
  // Without /etc/hosts the JobSet's subdomain is its name (JobSet's default), or its spec.network.subdomain.
  EXPECT_EQ(driver->coordinator_address, absl::StrCat("train-driver-0-0.train:", kDefaultCoordinatorPort));
  api->jobsets["train"] = jobset_json(R"("network": {"subdomain": "net"}, )");
  auto net = *detect_cluster({{"JOB_COMPLETION_INDEX", "3"}, {"HOSTNAME", "train-workers-0-3"}}, "auto",
                             probes_with(api, std::nullopt));
  EXPECT_EQ(net->process_id, 1 + 3);
  EXPECT_EQ(net->coordinator_address, absl::StrCat("train-driver-0-0.net:", kDefaultCoordinatorPort));
}

TEST(DetectKubernetes, AJobThatDoesNotRunAllItsPodsAtOnceIsRefused) {
  auto api = std::make_shared<FakeApi>();
  api->jobs["train"] = job_json("train", 8, 2);
  auto c = detect_cluster({{"JOB_COMPLETION_INDEX", "0"}, {"HOSTNAME", "train-0"}}, "auto", probes_with(api, hosts_of("train-0", "svc")));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("runs at most 2 of its 8 pods at once"));
  EXPECT_THAT(c.status().message(), HasSubstr("set parallelism to 8"));
}

TEST(DetectKubernetes, WhatTheApiCannotTellIsNamedWhenInitializeNeedsIt) {
  auto api = std::make_shared<FakeApi>();
  api->failure = absl::PermissionDeniedError("HTTP 403: the pod's service account may not get jobs");
  const EnvMap env = {{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "train-1"}};
  auto c = *detect_cluster(env, "auto", probes_with(api, hosts_of("train-1", "svc")));
  EXPECT_FALSE(c->num_processes.has_value());
  EXPECT_EQ(c->process_id, 1);
  EXPECT_THAT(c->unresolved, HasSubstr("may not get jobs"));
  auto resolved = resolve_config(InitializeOptions{}, env, probes_with(api, hosts_of("train-1", "svc")));
  EXPECT_THAT(resolved.status().message(), HasSubstr("number of processes unknown"));
  EXPECT_THAT(resolved.status().message(), HasSubstr("may not get jobs"));
  // Passing the count in the options is enough.
  InitializeOptions o;
  o.num_processes = 2;
  EXPECT_TRUE(resolve_config(o, env, probes_with(api, hosts_of("train-1", "svc"))).ok());
  // No API server at all, and no subdomain: both reasons are named.
  ClusterProbes none;
  none.etc_hosts = "10.8.0.12\ttrain-1\n";
  auto bare = resolve_config(InitializeOptions{}, env, none);
  EXPECT_THAT(bare.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST is not set"));
  EXPECT_THAT(bare.status().message(), HasSubstr("headless Service"));
}

TEST(DetectKubernetes, APodOfAnIndexedJobIsLaunchedAsAJobBeforeItsSizeIsKnown) {
  EXPECT_TRUE(launched_as_job({{"JOB_COMPLETION_INDEX", "0"}, {"HOSTNAME", "train-0"}}));
  EXPECT_FALSE(launched_as_job({{"JOB_COMPLETION_INDEX", "0"}, {"HOSTNAME", "train-0"}, {"MCX_NUM_PROCESSES", "1"}}));
}

// ---------------------------------------------------------------------------------------------------------------
// Over real TLS: https_get and the in-cluster API client.

class InCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_.make_ca("ca");
    certs_.make_leaf("apiserver", "ca");
    certs_.make_ca("other");
    dir_ = certs_.path("serviceaccount");
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/token") << "secret-token\n";
    std::ofstream(dir_ + "/namespace") << "team-a";
    std::filesystem::copy_file(certs_.path("ca.pem"), dir_ + "/ca.crt");
  }
  std::unique_ptr<TestHttpsServer> serve(TestHttpsServer::Handler handler) {
    return std::make_unique<TestHttpsServer>(certs_.path("apiserver.pem"), certs_.path("apiserver.key"),
                                             std::move(handler));
  }
  Certs certs_;
  std::string dir_;
};

TEST_F(InCluster, HttpsGetReadsLengthChunkedAndCloseDelimitedBodies) {
  auto server = serve([](const std::string& request) -> std::optional<std::string> {
    if (absl::StrContains(request, "GET /length ")) return http_response(200, "{\"a\": 1}");
    if (absl::StrContains(request, "GET /chunked ")) {
      return std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n5;ext=1\r\n: 12}\r\n0\r\n\r\n");
    }
    return std::string("HTTP/1.0 404 Not Found\r\n\r\nnothing here");
  });
  HttpsRequest r{"127.0.0.1", server->port(), "/length", certs_.path("ca.pem"), {{"X-Test", "1"}},
                 absl::Now() + absl::Seconds(20)};
  auto length = https_get(r);
  ASSERT_TRUE(length.ok()) << length.status();
  EXPECT_EQ(length->status, 200);
  EXPECT_EQ(length->body, "{\"a\": 1}");
  EXPECT_THAT(server->requests().at(0), HasSubstr("X-Test: 1\r\n"));
  r.path = "/chunked";
  EXPECT_EQ(https_get(r)->body, "{\"a\": 12}");
  r.path = "/else";
  auto closed = https_get(r);
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->status, 404);
  EXPECT_EQ(closed->body, "nothing here");
  // "localhost" is checked as a DNS name (the certificate has DNS:localhost).
  r.host = "localhost";
  r.path = "/length";
  EXPECT_EQ(https_get(r)->status, 200);
}

TEST_F(InCluster, HttpsGetRefusesAnUntrustedServerAndKeepsItsDeadline) {
  auto server = serve([](const std::string&) -> std::optional<std::string> { return std::nullopt; });
  HttpsRequest r{"127.0.0.1", server->port(), "/x", certs_.path("other.pem"), {}, absl::Now() + absl::Seconds(20)};
  auto untrusted = https_get(r);
  EXPECT_EQ(untrusted.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(untrusted.status().message(), HasSubstr("TLS handshake failed"));
  EXPECT_THAT(untrusted.status().message(), HasSubstr("certificate"));
  // Trusted, but the server never answers.
  r.ca_file = certs_.path("ca.pem");
  const absl::Time start = absl::Now();
  r.deadline = start + absl::Milliseconds(500);
  auto silent = https_get(r);
  EXPECT_EQ(silent.status().code(), absl::StatusCode::kDeadlineExceeded) << silent.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  r.path = "no-slash";
  EXPECT_EQ(https_get(r).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InCluster, TheApiServerIsAskedWithTheServiceAccountAndRetriedWhileBusy) {
  std::atomic<int> busy{1};
  auto server = serve([&](const std::string& request) -> std::optional<std::string> {
    if (busy.fetch_sub(1) > 0) return http_response(503, "{\"message\": \"etcd leader changed\"}");
    if (absl::StrContains(request, "GET /apis/batch/v1/namespaces/team-a/jobs/train ")) {
      return http_response(200, job_json("train", 2, 2));
    }
    return http_response(403, "{\"reason\": \"Forbidden\"}");
  });
  auto api = in_cluster_kubernetes_api("127.0.0.1", server->port(), dir_);
  ASSERT_TRUE(api.ok()) << api.status();
  auto job = (*api)->read_job("train", absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->completions, 2);
  const std::vector<std::string> requests = server->requests();
  ASSERT_EQ(requests.size(), 2u);  // the 503 was retried
  EXPECT_THAT(requests[1], HasSubstr("Authorization: Bearer secret-token\r\n"));
  auto forbidden = (*api)->read_jobset("train", absl::Now() + absl::Seconds(20));
  EXPECT_EQ(forbidden.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(forbidden.status().message(), HasSubstr("may not get jobsets (API group jobset.x-k8s.io)"));
  EXPECT_EQ(in_cluster_kubernetes_api("127.0.0.1", server->port(), dir_ + "-missing").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(InCluster, ProcessProbesFindTheApiServerFromTheEnvironment) {
  auto server = serve([](const std::string&) -> std::optional<std::string> {
    return http_response(200, job_json("train", 3, 3));
  });
  const EnvMap env = {{"JOB_COMPLETION_INDEX", "2"},
                      {"HOSTNAME", "train-2"},
                      {"KUBERNETES_SERVICE_HOST", "127.0.0.1"},
                      {"KUBERNETES_SERVICE_PORT", std::to_string(server->port())},
                      {"MCX_K8S_SERVICE_ACCOUNT_DIR", dir_},
                      {"MCX_K8S_SUBDOMAIN", "svc"}};
  ClusterProbes probes = process_cluster_probes(env);
  ASSERT_NE(probes.kubernetes, nullptr) << probes.kubernetes_unavailable;
  auto resolved = resolve_config(InitializeOptions{}, env, probes);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->num_processes, 3);
  EXPECT_EQ(resolved->process_id, 2);
  EXPECT_EQ(resolved->coordinator_address, absl::StrCat("train-0.svc:", kDefaultCoordinatorPort));
  EnvMap no_account = env;
  no_account["MCX_K8S_SERVICE_ACCOUNT_DIR"] = dir_ + "-missing";
  ClusterProbes without = process_cluster_probes(no_account);
  EXPECT_EQ(without.kubernetes, nullptr);
  EXPECT_THAT(without.kubernetes_unavailable, HasSubstr("service account"));
}

}  // namespace
}  // namespace mcx::distributed
