// Cluster auto-detection: where the coordinator is, how many processes, which one this is.
//
// Pure functions over an environment map, so every detector is unit-testable. Detectors run in this
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
//               (jobid / 4096) % 4096 + 61440, as JAX does.
//   2. "slurm"  present when SLURM_JOB_ID, SLURM_NTASKS and SLURM_PROCID are set. num_processes =
//               SLURM_NTASKS, process_id = SLURM_PROCID, local_process_id = SLURM_LOCALID. Coordinator:
//               MCX_COORDINATOR_ADDRESS, else the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST),
//               port SLURM_JOB_ID % 4096 + 61440.
//   3. "k8s"    a Kubernetes indexed Job: present when JOB_COMPLETION_INDEX is set. process_id =
//               JOB_COMPLETION_INDEX; num_processes = MCX_NUM_PROCESSES (set it to the Job's parallelism).
//               Coordinator: MCX_COORDINATOR_ADDRESS, else "<job>-0.<subdomain>:<port>" where <job> is
//               HOSTNAME without its "-<index>" suffix, <subdomain> is MCX_K8S_SUBDOMAIN (the Job's
//               headless Service) and port is kDefaultCoordinatorPort.
//   4. "env"    mcx's own: MCX_COORDINATOR_ADDRESS, MCX_NUM_PROCESSES, MCX_PROCESS_ID (present when any
//               is set).
// MCX_COORDINATOR_PORT, when set, replaces the port of any detected coordinator address.
// MCX_CLUSTER_DETECTION = auto (default) | prrte | ompi | slurm | k8s | env | none selects a detector. (Slurm's
// pmix plugin, srun --mpi=pmix, keeps the SLURM_* variables: "slurm" detects it.)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mcx::distributed {

using EnvMap = std::map<std::string, std::string>;

inline constexpr int kDefaultCoordinatorPort = 55527;

struct ClusterInfo {
  std::string method;  // "prrte", "ompi", "slurm", "k8s", "env"
  std::optional<std::string> coordinator_address;
  std::optional<int> num_processes;
  std::optional<int> process_id;
  std::optional<int> local_process_id;  // index among the processes on this host
};

// The current process environment as a map.
EnvMap process_env();

// Runs detection. `method` = "auto" tries the detectors in order; a named method runs only that one;
// "none" detects nothing. Returns nullopt when no detector's variables are present. Errors:
// InvalidArgument naming the variable and its value when one is malformed (not an integer, a node list
// that does not parse, an unknown method).
absl::StatusOr<std::optional<ClusterInfo>> detect_cluster(const EnvMap& env, std::string_view method = "auto");

// Whether env says this process is one of several of a job (mcx-run, mpirun, Slurm, an indexed k8s Job, MCX_*
// variables): a cluster is detected and it has more than one process. A program that also runs alone uses it
// to decide whether to call initialize(). A malformed variable counts as "not a job" here; initialize()
// reports it.
bool launched_as_job(const EnvMap& env);

// Expands a Slurm node list: "node[001-003,007],gpu7" -> {node001, node002, node003, node007, gpu7}.
// Zero padding is kept; nested brackets are not Slurm syntax and are refused. InvalidArgument on a
// malformed list (unbalanced brackets, a range whose end is below its start, an empty element).
absl::StatusOr<std::vector<std::string>> expand_slurm_nodelist(std::string_view nodelist);

}  // namespace mcx::distributed
