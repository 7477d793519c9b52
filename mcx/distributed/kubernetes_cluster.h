// Cluster detection in a Kubernetes Indexed Job or JobSet: the "k8s" detector of cluster.h.
//
// Present when JOB_COMPLETION_INDEX is set (the Job controller sets it in every pod of an Indexed Job; a JobSet's
// Jobs are Indexed Jobs). The pod of index i of Job J has the hostname "J-i". What each field comes from, the
// first that gives it:
//   process_id      MCX_PROCESS_ID; in a JobSet (known from the API server), the number of pods before this one:
//                   replicated jobs in spec order, each replicas x completions pods, then job-index x completions,
//                   plus JOB_COMPLETION_INDEX; else JOB_COMPLETION_INDEX.
//   num_processes   MCX_NUM_PROCESSES; the API server: the Job's completions, or the JobSet's sum of
//                   replicas x completions over its replicated jobs.
//   coordinator     MCX_COORDINATOR_ADDRESS; "<pod 0>.<subdomain>:55527", pod 0 being "J-0" in a Job and
//                   "<jobset>-<first replicated job>-0-0" in a JobSet. The subdomain: MCX_K8S_SUBDOMAIN; this pod's
//                   name in /etc/hosts (the kubelet writes "<ip> <hostname>.<subdomain>.<namespace>.svc.<domain>
//                   <hostname>" for a pod with a subdomain); a JobSet's spec.network.subdomain, else its name.
// The API server is asked only when MCX_NUM_PROCESSES is not set (JAX asks it always; these variables let a pod
// without API access run). When it cannot answer (no service account, a Role without "get" on jobs), the
// fields it would give stay unset and ClusterInfo::unresolved says why; initialize() names it if they are needed.
// Refused (InvalidArgument): a Job whose parallelism is below its completions (its pods do not all run at once,
// and the processes that run would wait for the others); a HOSTNAME that does not end in "-<index>" when the
// coordinator is derived from it; malformed integers.
// JAX's k8s cluster names "<this Job>-0.<jobset>" as coordinator and parallelism as the count, so a JobSet of
// more than one Job starts one coordinator per Job; here the whole JobSet is one job of processes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "mcx/distributed/cluster.h"

namespace mcx::distributed {

absl::StatusOr<std::optional<ClusterInfo>> detect_kubernetes(const EnvMap& env, const ClusterProbes& probes);

// The subdomain of the pod named hostname from /etc/hosts text: the label after "<hostname>." in the pod's fully
// qualified name; nullopt when the pod has none (no subdomain set).
std::optional<std::string> pod_subdomain(std::string_view etc_hosts, std::string_view hostname);

}  // namespace mcx::distributed
