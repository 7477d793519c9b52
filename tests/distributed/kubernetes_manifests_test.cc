// The Kubernetes examples (examples/kubernetes/*.yaml, converted to JSON at build time) produce a working job:
// for every pod the Job or JobSet controller would make, the environment it gets (JOB_COMPLETION_INDEX, its
// hostname, the container's env), its /etc/hosts line (the kubelet's, with the subdomain) and the Job and JobSet
// objects the API server would return are fed to cluster detection; every pod must find a distinct process id
// in 0..N-1, the same N and the same coordinator, which must be the DNS name of the pod that is process 0. The
// Service a plain Job's pods use must be headless, select the pods and be their subdomain; the Role must grant
// what detection reads.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mcx/distributed/cluster.h"
#include "mcx/distributed/kubernetes_api.h"

namespace mcx::distributed {
namespace {

using Json = nlohmann::json;

// The documents of one converted manifest.
std::vector<Json> manifest(const std::string& name) {
  const std::string path = absl::StrCat(MCX_K8S_EXAMPLES_JSON_DIR, "/", name, ".json");
  std::ifstream in(path);
  EXPECT_TRUE(in) << "missing " << path;
  std::stringstream text;
  text << in.rdbuf();
  const Json all = Json::parse(text.str());
  return std::vector<Json>(all.begin(), all.end());
}

const Json* find_kind(const std::vector<Json>& docs, const std::string& kind) {
  for (const Json& d : docs) {
    if (d.value("kind", "") == kind) return &d;
  }
  return nullptr;
}

// Serves the Jobs and the JobSet of the manifest, as the API server would after the controllers made them.
class ManifestApi : public KubernetesApi {
 public:
  absl::StatusOr<KubernetesJob> read_job(const std::string& name, absl::Time) const override {
    auto it = jobs.find(name);
    if (it == jobs.end()) return absl::NotFoundError(name);
    return parse_kubernetes_job(it->second.dump());
  }
  absl::StatusOr<KubernetesJobSet> read_jobset(const std::string& name, absl::Time) const override {
    if (!jobset || (*jobset)["metadata"]["name"] != name) return absl::NotFoundError(name);
    return parse_kubernetes_jobset(jobset->dump());
  }
  std::map<std::string, Json> jobs;
  std::optional<Json> jobset;
};

// One pod as the controllers and the kubelet make it.
struct Pod {
  std::string hostname;
  int index = 0;
  std::string subdomain;
  Json container;  // the pod template's first container
};

ClusterInfo detect_pod(const Pod& pod, const std::shared_ptr<ManifestApi>& api) {
  EnvMap env = {{"JOB_COMPLETION_INDEX", std::to_string(pod.index)}, {"HOSTNAME", pod.hostname}};
  for (const Json& e : pod.container.value("env", Json::array())) env[e["name"]] = e["value"];
  ClusterProbes probes;
  probes.kubernetes = api;
  probes.etc_hosts = absl::StrCat("127.0.0.1\tlocalhost\n10.4.0.7\t", pod.hostname, ".", pod.subdomain,
                                  ".default.svc.cluster.local\t", pod.hostname, "\n");
  absl::StatusOr<std::optional<ClusterInfo>> c = detect_cluster(env, "auto", probes);
  EXPECT_TRUE(c.ok()) << pod.hostname << ": " << c.status();
  EXPECT_TRUE(c.ok() && c->has_value()) << pod.hostname;
  return c.ok() && c->has_value() ? **c : ClusterInfo{};
}

// Every pod finds its own id, the same size and the same coordinator: process 0's DNS name.
void expect_one_job(const std::vector<Pod>& pods, const std::shared_ptr<ManifestApi>& api) {
  ASSERT_FALSE(pods.empty());
  std::set<int> ids;
  std::optional<std::string> coordinator;
  std::string first;
  for (const Pod& pod : pods) {
    const ClusterInfo c = detect_pod(pod, api);
    EXPECT_EQ(c.method, "k8s");
    EXPECT_TRUE(c.unresolved.empty()) << pod.hostname << ": " << c.unresolved;
    EXPECT_EQ(c.num_processes, static_cast<int>(pods.size())) << pod.hostname;
    ASSERT_TRUE(c.process_id.has_value());
    ids.insert(*c.process_id);
    if (*c.process_id == 0) first = absl::StrCat(pod.hostname, ".", pod.subdomain, ":", kDefaultCoordinatorPort);
    if (!coordinator) coordinator = c.coordinator_address;
    EXPECT_EQ(c.coordinator_address, coordinator) << pod.hostname;
  }
  EXPECT_EQ(ids.size(), pods.size());
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), static_cast<int>(pods.size()) - 1);
  EXPECT_EQ(coordinator, first);
}

TEST(KubernetesManifests, TheIndexedJobExampleIsOneJobOfProcesses) {
  const std::vector<Json> docs = manifest("indexed_job");
  const Json* service = find_kind(docs, "Service");
  const Json* job = find_kind(docs, "Job");
  ASSERT_NE(service, nullptr);
  ASSERT_NE(job, nullptr);
  const Json& pod_spec = (*job)["spec"]["template"]["spec"];
  // The headless Service selects the pods and is their subdomain (JAX's K8s cluster asks for the same).
  EXPECT_EQ((*service)["spec"]["clusterIP"], "None");
  EXPECT_EQ(pod_spec["subdomain"], (*service)["metadata"]["name"]);
  const Json& labels = (*job)["spec"]["template"]["metadata"]["labels"];
  for (const auto& [key, value] : (*service)["spec"]["selector"].items()) EXPECT_EQ(labels.value(key, ""), value) << key;
  EXPECT_EQ((*job)["spec"]["completionMode"], "Indexed");

  auto api = std::make_shared<ManifestApi>();
  const std::string name = (*job)["metadata"]["name"];
  api->jobs[name] = *job;
  std::vector<Pod> pods;
  for (int i = 0; i < (*job)["spec"]["completions"].get<int>(); ++i) {
    pods.push_back({absl::StrCat(name, "-", i), i, pod_spec["subdomain"], pod_spec["containers"][0]});
  }
  expect_one_job(pods, api);
}

TEST(KubernetesManifests, TheJobSetExampleIsOneJobOfProcessesAcrossItsJobs) {
  const std::vector<Json> docs = manifest("jobset");
  const Json* set = find_kind(docs, "JobSet");
  ASSERT_NE(set, nullptr);
  auto api = std::make_shared<ManifestApi>();
  api->jobset = *set;
  const std::string name = (*set)["metadata"]["name"];
  const std::string subdomain = (*set)["spec"].value("network", Json::object()).value("subdomain", name);
  std::vector<Pod> pods;
  for (const Json& r : (*set)["spec"]["replicatedJobs"]) {
    const std::string rname = r["name"];
    for (int j = 0; j < r.value("replicas", 1); ++j) {
      // The JobSet controller names the Job <jobset>-<replicated job>-<index> and labels it.
      Json job = r["template"];
      const std::string job_name = absl::StrCat(name, "-", rname, "-", j);
      job["metadata"]["name"] = job_name;
      job["metadata"]["labels"] = {{"jobset.sigs.k8s.io/jobset-name", name},
                                   {"jobset.sigs.k8s.io/replicatedjob-name", rname},
                                   {"jobset.sigs.k8s.io/job-index", std::to_string(j)}};
      api->jobs[job_name] = job;
      const Json& pod_spec = job["spec"]["template"]["spec"];
      for (int i = 0; i < job["spec"]["completions"].get<int>(); ++i) {
        pods.push_back({absl::StrCat(job_name, "-", i), i, subdomain, pod_spec["containers"][0]});
      }
    }
  }
  expect_one_job(pods, api);
}

TEST(KubernetesManifests, TheRoleGrantsWhatDetectionReads) {
  const std::vector<Json> docs = manifest("rbac");
  const Json* role = find_kind(docs, "Role");
  ASSERT_NE(role, nullptr);
  std::set<std::string> granted;
  for (const Json& rule : (*role)["rules"]) {
    for (const Json& group : rule["apiGroups"]) {
      for (const Json& resource : rule["resources"]) {
        for (const Json& verb : rule["verbs"]) {
          granted.insert(absl::StrCat(group.get<std::string>(), "/", resource.get<std::string>(), ":", verb.get<std::string>()));
        }
      }
    }
  }
  EXPECT_TRUE(granted.count("batch/jobs:get"));
  EXPECT_TRUE(granted.count("jobset.x-k8s.io/jobsets:get"));
  // The examples run under the Role's service account.
  const Json* account = find_kind(docs, "ServiceAccount");
  ASSERT_NE(account, nullptr);
  for (const char* example : {"indexed_job", "jobset"}) {
    const std::string text = manifest(example).back().dump();
    EXPECT_NE(text.find(absl::StrCat("\"serviceAccountName\":\"", (*account)["metadata"]["name"].get<std::string>(), "\"")),
              std::string::npos)
        << example;
  }
}

}  // namespace
}  // namespace mcx::distributed
