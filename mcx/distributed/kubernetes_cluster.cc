#include "mcx/distributed/kubernetes_cluster.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mcx::distributed {
namespace {

constexpr const char* kJobSetNameLabel = "jobset.sigs.k8s.io/jobset-name";
constexpr const char* kReplicatedJobLabel = "jobset.sigs.k8s.io/replicatedjob-name";
constexpr const char* kJobIndexLabel = "jobset.sigs.k8s.io/job-index";

// The Job's name from the pod's hostname "<job>-<index>".
absl::StatusOr<std::string> job_name_from_hostname(const std::optional<std::string>& host, int index) {
  const std::string suffix = absl::StrCat("-", index);
  if (!host || host->size() <= suffix.size() || host->compare(host->size() - suffix.size(), suffix.size(), suffix) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[cluster] HOSTNAME='", host.value_or(""), "' does not end in '", suffix,
        "' (JOB_COMPLETION_INDEX), as the pods of an Indexed Job are named; set MCX_COORDINATOR_ADDRESS"));
  }
  return host->substr(0, host->size() - suffix.size());
}

absl::Status all_pods_at_once(std::string_view what, int completions, int parallelism) {
  if (parallelism >= completions) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "[cluster] ", std::string(what), " runs at most ", parallelism, " of its ", completions,
      " pods at once (parallelism < completions): the processes of a job all run together, so set parallelism to ",
      completions));
}

// What the API server tells about this pod's job: the count, this pod's place and the first pod's name.
struct ApiFacts {
  int num_processes = 0;
  int process_id = 0;
  std::string first_pod;                  // hostname of process 0
  std::optional<std::string> subdomain;  // a JobSet's (its spec, else its name)
};

absl::StatusOr<ApiFacts> ask_api(const KubernetesApi& api, const std::string& job_name, int index,
                                 absl::Time deadline) {
  absl::StatusOr<KubernetesJob> job = api.read_job(job_name, deadline);
  if (!job.ok()) return job.status();
  ApiFacts facts;
  auto set_name = job->labels.find(kJobSetNameLabel);
  if (set_name == job->labels.end()) {
    if (absl::Status s = all_pods_at_once(absl::StrCat("Job ", job->name), job->completions, job->parallelism); !s.ok()) {
      return s;
    }
    if (index >= job->completions) {
      return absl::InvalidArgumentError(absl::StrCat("[cluster] JOB_COMPLETION_INDEX=", index, " is not below Job ",
                                                     job->name, "'s completions (", job->completions, ")"));
    }
    facts.num_processes = job->completions;
    facts.process_id = index;
    facts.first_pod = absl::StrCat(job->name, "-0");
    return facts;
  }
  absl::StatusOr<KubernetesJobSet> set = api.read_jobset(set_name->second, deadline);
  if (!set.ok()) return set.status();
  auto replicated = job->labels.find(kReplicatedJobLabel);
  auto job_index_label = job->labels.find(kJobIndexLabel);
  int job_index = -1;
  if (replicated == job->labels.end() || job_index_label == job->labels.end() ||
      !absl::SimpleAtoi(job_index_label->second, &job_index) || job_index < 0) {
    return absl::DataLossError(absl::StrCat("[cluster] Job ", job->name, " of JobSet ", set->name, " lacks the labels ",
                                            kReplicatedJobLabel, " and ", kJobIndexLabel,
                                            " (a non-negative integer) that the JobSet controller sets"));
  }
  int64_t before = -1, total = 0;
  for (const KubernetesJobSet::ReplicatedJob& r : set->replicated_jobs) {
    if (absl::Status s = all_pods_at_once(absl::StrCat("replicated job ", r.name, " of JobSet ", set->name),
                                          r.completions, r.parallelism);
        !s.ok()) {
      return s;
    }
    if (r.name == replicated->second) {
      if (job_index >= r.replicas || index >= r.completions) {
        return absl::InvalidArgumentError(absl::StrCat("[cluster] pod ", index, " of job ", job_index,
                                                       " is outside replicated job ", r.name, " (", r.replicas,
                                                       " jobs of ", r.completions, " pods)"));
      }
      before = total + int64_t{job_index} * r.completions + index;
    }
    total += int64_t{r.replicas} * r.completions;
  }
  if (before < 0) {
    return absl::DataLossError(absl::StrCat("[cluster] JobSet ", set->name, " has no replicated job '",
                                            replicated->second, "' (Job ", job->name, "'s label)"));
  }
  if (total > (1 << 30)) return absl::InvalidArgumentError(absl::StrCat("[cluster] JobSet ", set->name, " has ", total, " pods"));
  facts.num_processes = static_cast<int>(total);
  facts.process_id = static_cast<int>(before);
  facts.first_pod = absl::StrCat(set->name, "-", set->replicated_jobs.front().name, "-0-0");
  facts.subdomain = set->subdomain.value_or(set->name);
  return facts;
}

}  // namespace

std::optional<std::string> pod_subdomain(std::string_view etc_hosts, std::string_view hostname) {
  if (hostname.empty()) return std::nullopt;
  const std::string prefix = absl::StrCat(std::string(hostname), ".");
  for (absl::string_view line : absl::StrSplit(absl::string_view(etc_hosts.data(), etc_hosts.size()), '\n')) {
    line = line.substr(0, line.find('#'));
    for (absl::string_view name : absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
      absl::string_view rest = name.substr(prefix.size());
      absl::string_view label = rest.substr(0, rest.find('.'));
      // "<host>.<subdomain>.<namespace>.svc...": a bare "<host>.<domain>" is not a pod subdomain.
      if (!label.empty() && rest.find(".svc") != absl::string_view::npos) return std::string(label);
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<ClusterInfo>> detect_kubernetes(const EnvMap& env, const ClusterProbes& probes) {
  absl::StatusOr<std::optional<int>> index = env_int(env, "JOB_COMPLETION_INDEX");
  if (!index.ok()) return index.status();
  if (!*index) return std::optional<ClusterInfo>();
  absl::StatusOr<std::optional<int>> n = env_int(env, "MCX_NUM_PROCESSES");
  if (!n.ok()) return n.status();
  absl::StatusOr<std::optional<int>> id = env_int(env, "MCX_PROCESS_ID");
  if (!id.ok()) return id.status();
  ClusterInfo c;
  c.method = "k8s";
  c.num_processes = *n;
  c.process_id = id->value_or(**index);
  c.coordinator_address = env_value(env, "MCX_COORDINATOR_ADDRESS");
  const std::optional<std::string> host = env_value(env, "HOSTNAME");
  std::optional<std::string> subdomain = env_value(env, "MCX_K8S_SUBDOMAIN");
  if (!subdomain && probes.etc_hosts && host) subdomain = pod_subdomain(*probes.etc_hosts, *host);

  std::string first_pod;
  if (!c.num_processes || !c.coordinator_address) {
    absl::StatusOr<std::string> job = job_name_from_hostname(host, **index);
    if (!job.ok()) return job.status();
    first_pod = absl::StrCat(*job, "-0");
    if (!c.num_processes && !probes.kubernetes) {
      c.unresolved = probes.kubernetes_unavailable.empty()
                         ? std::string("no Kubernetes API server to ask for the Job's size (KUBERNETES_SERVICE_HOST "
                                       "is not set)")
                         : absl::StrCat("no Kubernetes API server to ask for the Job's size: ",
                                        probes.kubernetes_unavailable);
    } else if (!c.num_processes) {
      absl::StatusOr<ApiFacts> facts = ask_api(*probes.kubernetes, *job, **index, absl::Now() + probes.api_timeout);
      if (facts.status().code() == absl::StatusCode::kInvalidArgument) {
        return facts.status();  // the Job itself cannot run as one job of processes
      }
      if (!facts.ok()) {
        c.unresolved = absl::StrCat("the Kubernetes API server could not tell the Job's size: ",
                                    facts.status().message());
      } else {
        c.num_processes = facts->num_processes;
        if (!*id) c.process_id = facts->process_id;
        first_pod = facts->first_pod;
        if (!subdomain) subdomain = facts->subdomain;
      }
    }
  }
  if (!c.coordinator_address) {
    if (subdomain) {
      c.coordinator_address = absl::StrCat(first_pod, ".", *subdomain, ":", kDefaultCoordinatorPort);
    } else {
      absl::StrAppend(&c.unresolved, c.unresolved.empty() ? "" : "; ",
                      "the pod has no subdomain (none in /etc/hosts, MCX_K8S_SUBDOMAIN unset), so process 0 has no "
                      "DNS name: give the Job a headless Service (clusterIP: None, selector job-name: <job>, "
                      "publishNotReadyAddresses: true) and set the pod template's subdomain to its name");
    }
  }
  return std::optional<ClusterInfo>(std::move(c));
}

}  // namespace mcx::distributed
