// The Kubernetes API as cluster detection uses it (kubernetes_cluster.h): read the Job a pod belongs to and,
// for a Job that a JobSet made, that JobSet. Everything else a pod needs (its index, hostname, subdomain) is in
// its environment and /etc/hosts; only the counts are not.
//
// in_cluster_kubernetes_api() talks to the API server from inside a pod, as client libraries' "in-cluster
// config" does: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, verified against the service
// account's ca.crt, authenticated by its token (read again at each request: projected tokens rotate), in its
// namespace. The pod's service account needs "get" on jobs (group batch) and, in a JobSet, on jobsets (group
// jobset.x-k8s.io): docs/distributed.md has the Role.
//
// Errors of read_job/read_jobset: PermissionDenied (401/403) naming the permission to grant; NotFound (404);
// DeadlineExceeded when the server did not answer by the deadline (answers 5xx, 429 and connection failures
// are retried with backoff until then; the last failure is named); DataLoss for an answer that is not the
// object expected. in_cluster_kubernetes_api: FailedPrecondition when a service account file is missing.
// Thread-safety: the objects are immutable; calls may run concurrently.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mcx::distributed {

// The fields of a batch/v1 Job that detection reads.
struct KubernetesJob {
  std::string name;
  int completions = 1;  // spec.completions (an indexed Job has one; absent means parallelism)
  int parallelism = 1;  // spec.parallelism (absent means 1)
  std::map<std::string, std::string> labels;
};

// The fields of a jobset.x-k8s.io JobSet that detection reads.
struct KubernetesJobSet {
  struct ReplicatedJob {
    std::string name;
    int replicas = 1;     // Jobs made from the template
    int completions = 1;  // pods of each Job (template spec.completions, else its parallelism)
    int parallelism = 1;
  };
  std::string name;
  std::vector<ReplicatedJob> replicated_jobs;  // in spec order
  std::optional<std::string> subdomain;        // spec.network.subdomain (absent: the JobSet's name)
};

// Parse the API server's JSON for one object. DataLoss naming the field when it is not the object expected.
absl::StatusOr<KubernetesJob> parse_kubernetes_job(std::string_view json);
absl::StatusOr<KubernetesJobSet> parse_kubernetes_jobset(std::string_view json);

class KubernetesApi {
 public:
  virtual ~KubernetesApi() = default;
  // The Job or JobSet of that name in the pod's namespace.
  virtual absl::StatusOr<KubernetesJob> read_job(const std::string& name, absl::Time deadline) const = 0;
  virtual absl::StatusOr<KubernetesJobSet> read_jobset(const std::string& name, absl::Time deadline) const = 0;
};

inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

// The API server at host:port as seen from a pod whose service account files (token, ca.crt, namespace) are in
// service_account_dir.
absl::StatusOr<std::unique_ptr<KubernetesApi>> in_cluster_kubernetes_api(std::string host, int port,
                                                                         std::string service_account_dir);

}  // namespace mcx::distributed
