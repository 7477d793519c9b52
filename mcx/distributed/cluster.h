// Cluster auto-detection: where the coordinator is, how many processes, which one this is.
//
// Functions of an environment map and the probes given (/etc/hosts, a Kubernetes API server: ClusterProbes), so
// every detector is unit-testable with maps and fakes. Detectors run in this
// order; the first whose variables are present wins, and it fills only what it knows (initialize()
// lets explicit options override each field):
//   0. "prrte"  Open MPI 5 (mpirun is PRRTE over PMIx): present when PRTE_LAUNCHED=1; the counts and ids from the OMPI_COMM_WORLD_* variables, as "ompi".
//               Coordinator: MCX_COORDINATOR_ADDRESS, else the launcher's IP from its PMIx server URI
//               (PMIX_SERVER_URI41, ..4, ..3, ..21, ..2: "prterun-h-4242@0.0;tcp4://10.0.0.1:40123") with port
//               jobid % 4096 + 61440, the job id parsed from PMIX_NAMESPACE ("prterun-h-4242@1"), as JAX does.
//   1. "ompi"   OpenMPI (mpirun): present when OMPI_COMM_WORLD_SIZE is set. num_processes =
//               OMPI_COMM_WORLD_SIZE, process_id = OMPI_COMM_WORLD_RANK, local_process_id =
//               OMPI_COMM_WORLD_LOCAL_RANK. Coordinator: MCX_COORDINATOR_ADDRESS if set, else the launcher's
//               IP parsed from OMPI_MCA_orte_hnp_uri ("<jobid>.0;tcp://10.0.0.1,...:port") with port
//               (jobid / 4096) % 4096 + 61440, as JAX does; except inside a Slurm allocation (SLURM_JOB_NODELIST
//               set), where the host is the allocation's first node, on which OpenMPI's mappings place rank 0:
//               `salloc -N 2 mpirun ...` runs mpirun on the submitting host, outside the allocation, where no
//               process of the job is (JAX's rule points every process there).
//   2. "slurm"  present when SLURM_JOB_ID, SLURM_NTASKS and SLURM_PROCID are set. num_processes =
//               SLURM_NTASKS, process_id = SLURM_PROCID, local_process_id = SLURM_LOCALID. Coordinator:
//               MCX_COORDINATOR_ADDRESS, else the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST),
//               port SLURM_JOB_ID % 4096 + 61440.
//   3. "k8s"    a Kubernetes Indexed Job or JobSet: present when JOB_COMPLETION_INDEX is set; kubernetes_cluster.h
//               says where each field comes from (the variables, /etc/hosts, the API server for the counts).
//   4. "env"    mcx's own: MCX_COORDINATOR_ADDRESS, MCX_NUM_PROCESSES, MCX_PROCESS_ID (present when any
//               is set).
// MCX_COORDINATOR_PORT, when set, replaces the port of any detected coordinator address.
// MCX_CLUSTER_DETECTION = auto (default) | prrte | ompi | slurm | k8s | env | none selects a detector. (Slurm's
// pmix plugin, srun --mpi=pmix, keeps the SLURM_* variables: "slurm" detects it.)
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mcx/distributed/kubernetes_api.h"

namespace mcx::distributed {

using EnvMap = std::map<std::string, std::string>;

inline constexpr int kDefaultCoordinatorPort = 55527;

struct ClusterInfo {
  std::string method;  // "prrte", "ompi", "slurm", "k8s", "env"
  std::optional<std::string> coordinator_address;
  std::optional<int> num_processes;
  std::optional<int> process_id;
  std::optional<int> local_process_id;  // index among the processes on this host
  std::string unresolved;  // why a field the detector should know is unset (the API server refused), for errors
};

// What detection may look at besides the environment. Empty (the default): the environment alone.
struct ClusterProbes {
  std::optional<std::string> etc_hosts;             // the text of /etc/hosts
  std::shared_ptr<const KubernetesApi> kubernetes;  // the API server; null when there is none to ask
  std::string kubernetes_unavailable;               // why kubernetes is null, when the environment names one
  absl::Duration api_timeout = absl::Seconds(60);   // for all API requests of one detection together
};

// This process's, for a pod of an Indexed Job (JOB_COMPLETION_INDEX set; empty otherwise): /etc/hosts, and the
// in-cluster API server when KUBERNETES_SERVICE_HOST is set (the service account's files read from
// kServiceAccountDir, or MCX_K8S_SERVICE_ACCOUNT_DIR). Connects to nothing.
ClusterProbes process_cluster_probes(const EnvMap& env);

// The current process environment as a map.
EnvMap process_env();

// env[name] when set (an empty value counts as set).
std::optional<std::string> env_value(const EnvMap& env, std::string_view name);
// env[name] as an integer when set; InvalidArgument "[cluster] environment variable NAME='v' is not an integer".
absl::StatusOr<std::optional<int>> env_int(const EnvMap& env, std::string_view name);

// Runs detection. `method` = "auto" tries the detectors in order; a named method runs only that one;
// "none" detects nothing. Returns nullopt when no detector's variables are present. With probes naming a
// Kubernetes API server, the "k8s" detector may ask it (blocking up to probes.api_timeout). Errors:
// InvalidArgument naming the variable and its value when one is malformed (not an integer, a node list
// that does not parse, an unknown method).
absl::StatusOr<std::optional<ClusterInfo>> detect_cluster(const EnvMap& env, std::string_view method = "auto",
                                                          const ClusterProbes& probes = {});

// Whether env says this process is one of several of a job (mcx-run, mpirun, Slurm, an indexed k8s Job, MCX_*
// variables): a cluster is detected and it has more than one process (a pod of an Indexed Job counts as one of a
// job when its count is not in env: the API server, asked by initialize(), knows it). A program that also runs
// alone uses it to decide whether to call initialize(). A malformed variable counts as "not a job" here; initialize()
// reports it.
bool launched_as_job(const EnvMap& env);

// This machine's name (as its UTS namespace has it), for messages.
std::string host_name();

// The host this process runs on, as the data plane groups processes (Topology::process_hosts): MCX_HOST_ID when
// set (to group processes by hand, or to simulate hosts on one machine), else "<hostname> boot <boot id> net
// <network namespace>", so that machines with the same name (containers) differ by their boot id, and processes
// of one machine in different network namespaces (pods, the tests' namespace hosts), which talk through a
// network, are different hosts.
std::string host_identity(const EnvMap& env);

// Expands a Slurm node list: "node[001-003,007],gpu7" -> {node001, node002, node003, node007, gpu7}.
// Zero padding is kept; nested brackets are not Slurm syntax and are refused. InvalidArgument on a
// malformed list (unbalanced brackets, a range whose end is below its start, an empty element).
absl::StatusOr<std::vector<std::string>> expand_slurm_nodelist(std::string_view nodelist);

}  // namespace mcx::distributed
