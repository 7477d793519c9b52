#include "mcx/distributed/cluster.h"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mcx/core/error.h"
#include "mcx/distributed/kubernetes_cluster.h"

extern char** environ;

namespace mcx::distributed {
namespace {

#define MCX_GET_INT(var, env, name)                      \
  std::optional<int> var;                                \
  {                                                      \
    auto r_ = env_int(env, name);                        \
    if (!r_.ok()) return r_.status();                    \
    var = *r_;                                           \
  }

// Replaces the port of "host:port" (or appends one); IPv6 hosts keep their brackets.
std::string with_port(const std::string& address, int port) {
  std::string host = address;
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close != std::string::npos) host = host.substr(0, close + 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  } else if (std::count(host.begin(), host.end(), ':') > 1) {
    host = absl::StrCat("[", host, "]");  // bare IPv6
  }
  return absl::StrCat(host, ":", port);
}

// Open MPI's process counts and ids (both launchers set them), and MCX_COORDINATOR_ADDRESS when given.
absl::StatusOr<ClusterInfo> open_mpi_processes(const EnvMap& env, std::string method) {
  ClusterInfo c;
  c.method = std::move(method);
  MCX_GET_INT(size, env, "OMPI_COMM_WORLD_SIZE");
  MCX_GET_INT(rank, env, "OMPI_COMM_WORLD_RANK");
  MCX_GET_INT(local, env, "OMPI_COMM_WORLD_LOCAL_RANK");
  c.num_processes = size;
  c.process_id = rank;
  c.local_process_id = local;
  c.coordinator_address = env_value(env, "MCX_COORDINATOR_ADDRESS");
  return c;
}

absl::StatusOr<std::optional<ClusterInfo>> detect_ompi(const EnvMap& env) {
  if (!env_value(env, "OMPI_COMM_WORLD_SIZE")) return std::optional<ClusterInfo>();
  MCX_ASSIGN_OR_RETURN(ClusterInfo c, open_mpi_processes(env, "ompi"));
  if (c.coordinator_address) return std::optional<ClusterInfo>(c);  // MCX_COORDINATOR_ADDRESS
  if (auto uri = env_value(env, "OMPI_MCA_orte_hnp_uri")) {
    // "<jobid>.0;tcp://10.0.0.1,192.168.1.2:40123" or "...;tcp6://[::1]:40123"
    int64_t jobid;
    std::string job = uri->substr(0, uri->find('.'));
    if (!absl::SimpleAtoi(job, &jobid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("[cluster] cannot parse the job id of OMPI_MCA_orte_hnp_uri='", *uri, "'"));
    }
    std::smatch m;
    static const std::regex re(R"(tcp://([^,:;]+)[,:]|tcp6://\[([^,\]]+)[,\]])");
    if (!std::regex_search(*uri, m, re)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[cluster] cannot find the launcher's IP address in OMPI_MCA_orte_hnp_uri='", *uri,
          "'; set MCX_COORDINATOR_ADDRESS"));
    }
    int port = static_cast<int>((jobid / 4096) % 4096 + 61440);
    c.coordinator_address = m[1].matched ? absl::StrCat(m[1].str(), ":", port) : absl::StrCat("[", m[2].str(), "]:", port);
    // Inside a Slurm allocation rank 0 runs on its first node, wherever mpirun itself runs.
    std::optional<std::string> nodes = env_value(env, "SLURM_JOB_NODELIST");
    if (!nodes) nodes = env_value(env, "SLURM_NODELIST");
    if (nodes) {
      MCX_ASSIGN_OR_RETURN(std::vector<std::string> hosts, expand_slurm_nodelist(*nodes));
      if (!hosts.empty()) c.coordinator_address = absl::StrCat(hosts.front(), ":", port);
    }
  }
  return std::optional<ClusterInfo>(c);
}

// Open MPI 5's launcher (PRRTE, over PMIx) sets PRTE_LAUNCHED=1 and no OMPI_MCA_orte_hnp_uri: the launcher's
// address is in its PMIx server URI, the job id in the PMIx namespace ("prterun-<host>-<jobid>@1").
absl::StatusOr<std::optional<ClusterInfo>> detect_prrte(const EnvMap& env) {
  if (env_value(env, "PRTE_LAUNCHED") != std::optional<std::string>("1")) return std::optional<ClusterInfo>();
  MCX_ASSIGN_OR_RETURN(ClusterInfo c, open_mpi_processes(env, "prrte"));
  if (c.coordinator_address) return std::optional<ClusterInfo>(c);
  std::optional<std::string> uri;
  std::string uri_var;
  for (const char* var : {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                          "PMIX_SERVER_URI2"}) {
    if ((uri = env_value(env, var))) {
      uri_var = var;
      break;
    }
  }
  if (!uri) {
    return absl::InvalidArgumentError(
        "[cluster] PRTE_LAUNCHED=1 but no PMIX_SERVER_URI* variable names the launcher; set MCX_COORDINATOR_ADDRESS");
  }
  std::smatch m;
  static const std::regex host_re(R"(tcp4://([^,:;]+):|tcp6://\[([^,\]]+)\])");
  if (!std::regex_search(*uri, m, host_re)) {
    return absl::InvalidArgumentError(absl::StrCat("[cluster] cannot find the launcher's IP address in ", uri_var, "='",
                                                   *uri, "'; set MCX_COORDINATOR_ADDRESS"));
  }
  const std::string host = m[1].matched ? m[1].str() : absl::StrCat("[", m[2].str(), "]");
  const std::string ns = env_value(env, "PMIX_NAMESPACE").value_or("");
  std::smatch j;
  static const std::regex job_re(R"(-(\d+)@)");
  int64_t jobid = 0;
  if (!std::regex_search(ns, j, job_re) || !absl::SimpleAtoi(j[1].str(), &jobid)) {
    return absl::InvalidArgumentError(absl::StrCat("[cluster] cannot parse the job id of PMIX_NAMESPACE='", ns,
                                                   "' (expected '<name>-<jobid>@<n>'); set MCX_COORDINATOR_ADDRESS"));
  }
  c.coordinator_address = absl::StrCat(host, ":", jobid % 4096 + 61440);
  return std::optional<ClusterInfo>(c);
}

absl::StatusOr<std::optional<ClusterInfo>> detect_slurm(const EnvMap& env) {
  if (!env_value(env, "SLURM_JOB_ID") || !env_value(env, "SLURM_NTASKS") || !env_value(env, "SLURM_PROCID")) {
    return std::optional<ClusterInfo>();
  }
  ClusterInfo c;
  c.method = "slurm";
  MCX_GET_INT(jobid, env, "SLURM_JOB_ID");
  MCX_GET_INT(ntasks, env, "SLURM_NTASKS");
  MCX_GET_INT(procid, env, "SLURM_PROCID");
  MCX_GET_INT(local, env, "SLURM_LOCALID");
  c.num_processes = ntasks;
  c.process_id = procid;
  c.local_process_id = local;
  if (auto addr = env_value(env, "MCX_COORDINATOR_ADDRESS")) {
    c.coordinator_address = *addr;
  } else {
    std::optional<std::string> list = env_value(env, "SLURM_STEP_NODELIST");
    if (!list) list = env_value(env, "SLURM_JOB_NODELIST");
    if (list) {
      absl::StatusOr<std::vector<std::string>> hosts = expand_slurm_nodelist(*list);
      if (!hosts.ok()) return hosts.status();
      if (hosts->empty()) return absl::InvalidArgumentError("[cluster] the Slurm node list is empty");
      c.coordinator_address = absl::StrCat((*hosts)[0], ":", *jobid % 4096 + 61440);
    }
  }
  return std::optional<ClusterInfo>(c);
}

absl::StatusOr<std::optional<ClusterInfo>> detect_env(const EnvMap& env) {
  if (!env_value(env, "MCX_COORDINATOR_ADDRESS") && !env_value(env, "MCX_NUM_PROCESSES") && !env_value(env, "MCX_PROCESS_ID")) {
    return std::optional<ClusterInfo>();
  }
  ClusterInfo c;
  c.method = "env";
  MCX_GET_INT(n, env, "MCX_NUM_PROCESSES");
  MCX_GET_INT(id, env, "MCX_PROCESS_ID");
  c.num_processes = n;
  c.process_id = id;
  c.coordinator_address = env_value(env, "MCX_COORDINATOR_ADDRESS");
  return std::optional<ClusterInfo>(c);
}

}  // namespace

std::optional<std::string> env_value(const EnvMap& env, std::string_view name) {
  auto it = env.find(std::string(name));
  if (it == env.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::optional<int>> env_int(const EnvMap& env, std::string_view name) {
  std::optional<std::string> v = env_value(env, name);
  if (!v) return std::optional<int>();
  int out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("[cluster] environment variable ", std::string(name), "='", *v, "' is not an integer"));
  }
  return std::optional<int>(out);
}

EnvMap process_env() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

ClusterProbes process_cluster_probes(const EnvMap& env) {
  ClusterProbes probes;
  if (!env_value(env, "JOB_COMPLETION_INDEX")) return probes;  // only the Kubernetes detector looks further
  if (std::ifstream hosts("/etc/hosts"); hosts) {
    std::stringstream text;
    text << hosts.rdbuf();
    probes.etc_hosts = text.str();
  }
  const std::optional<std::string> host = env_value(env, "KUBERNETES_SERVICE_HOST");
  if (!host) return probes;
  int port = 443;
  if (auto p = env_value(env, "KUBERNETES_SERVICE_PORT"); p && !absl::SimpleAtoi(*p, &port)) {
    probes.kubernetes_unavailable = absl::StrCat("KUBERNETES_SERVICE_PORT='", *p, "' is not an integer");
    return probes;
  }
  absl::StatusOr<std::unique_ptr<KubernetesApi>> api =
      in_cluster_kubernetes_api(*host, port, env_value(env, "MCX_K8S_SERVICE_ACCOUNT_DIR").value_or(kServiceAccountDir));
  if (api.ok()) {
    probes.kubernetes = std::move(*api);
  } else {
    probes.kubernetes_unavailable = std::string(api.status().message());
  }
  return probes;
}

bool launched_as_job(const EnvMap& env) {
  absl::StatusOr<std::optional<ClusterInfo>> c = detect_cluster(env);
  if (!c.ok() || !c->has_value()) return false;
  const ClusterInfo& info = **c;
  return info.num_processes ? *info.num_processes > 1 : info.method == "k8s";
}

absl::StatusOr<std::optional<ClusterInfo>> detect_cluster(const EnvMap& env, std::string_view method,
                                                          const ClusterProbes& probes) {
  using Detector = std::function<absl::StatusOr<std::optional<ClusterInfo>>(const EnvMap&)>;
  const std::vector<std::pair<std::string, Detector>> detectors = {
      {"prrte", detect_prrte}, {"ompi", detect_ompi}, {"slurm", detect_slurm},
      {"k8s", [&](const EnvMap& e) { return detect_kubernetes(e, probes); }}, {"env", detect_env}};
  if (method == "none") return std::optional<ClusterInfo>();
  bool known = method == "auto";
  absl::StatusOr<std::optional<ClusterInfo>> found = std::optional<ClusterInfo>();
  for (const auto& [name, fn] : detectors) {
    if (method != "auto" && method != name) continue;
    known = true;
    found = fn(env);
    if (!found.ok() || found->has_value()) break;
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat("[cluster] unknown cluster detection method '",
                                                   std::string(method), "' (expected auto, prrte, ompi, slurm, k8s, "
                                                   "env or none)"));
  }
  if (!found.ok() || !found->has_value()) return found;
  ClusterInfo& c = **found;
  MCX_GET_INT(port, env, "MCX_COORDINATOR_PORT");
  if (port && c.coordinator_address) c.coordinator_address = with_port(*c.coordinator_address, *port);
  return found;
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string host_identity(const EnvMap& env) {
  if (std::optional<std::string> id = env_value(env, "MCX_HOST_ID"); id && !id->empty()) return *id;
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char net[64] = {};
  const ssize_t n = readlink("/proc/self/ns/net", net, sizeof net - 1);
  return absl::StrCat(host_name(), " boot ", boot.empty() ? "?" : boot, " net ", n > 0 ? std::string(net, n) : "?");
}

absl::StatusOr<std::vector<std::string>> expand_slurm_nodelist(std::string_view list) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("[cluster] cannot parse the Slurm node list '", std::string(list),
                                                   "': ", std::string(why)));
  };
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    // One element: prefix [ranges] suffix..., up to a comma outside brackets.
    size_t start = i;
    int depth = 0;
    while (i < list.size() && (depth > 0 || list[i] != ',')) {
      if (list[i] == '[') {
        if (++depth > 1) return bad("nested brackets");
      } else if (list[i] == ']') {
        if (--depth < 0) return bad("unbalanced ']'");
      }
      ++i;
    }
    if (depth != 0) return bad("unbalanced '['");
    std::string_view elem = list.substr(start, i - start);
    if (elem.empty()) return bad("empty element");
    ++i;  // skip ','
    // Expand the bracket groups left to right (a host may have several, e.g. rack[1-2]-node[01-02]).
    std::vector<std::string> names{""};
    size_t j = 0;
    while (j < elem.size()) {
      size_t open = elem.find('[', j);
      std::string_view lit = elem.substr(j, open == std::string_view::npos ? std::string_view::npos : open - j);
      for (auto& n : names) n.append(lit);
      if (open == std::string_view::npos) break;
      size_t close = elem.find(']', open);
      std::string_view body = elem.substr(open + 1, close - open - 1);
      if (body.empty()) return bad("empty brackets");
      std::vector<std::string> parts;
      size_t k = 0;
      while (k <= body.size()) {
        size_t comma = body.find(',', k);
        std::string_view r = body.substr(k, comma == std::string_view::npos ? std::string_view::npos : comma - k);
        if (r.empty()) return bad("empty range");
        size_t dash = r.find('-');
        std::string_view lo = r.substr(0, dash);
        std::string_view hi = dash == std::string_view::npos ? lo : r.substr(dash + 1);
        int64_t a, b;
        if (!absl::SimpleAtoi(absl::string_view(lo.data(), lo.size()), &a) ||
            !absl::SimpleAtoi(absl::string_view(hi.data(), hi.size()), &b) || lo.empty() || hi.empty()) {
          return bad(absl::StrCat("'", std::string(r), "' is not a number or a range"));
        }
        if (b < a) return bad(absl::StrCat("range '", std::string(r), "' ends below its start"));
        if (b - a > 100000) return bad("range too large");
        size_t width = lo.size();
        for (int64_t v = a; v <= b; ++v) {
          std::string s = std::to_string(v);
          if (s.size() < width) s.insert(0, width - s.size(), '0');
          parts.push_back(std::move(s));
        }
        if (comma == std::string_view::npos) break;
        k = comma + 1;
      }
      std::vector<std::string> next;
      for (const auto& n : names) {
        for (const auto& p : parts) next.push_back(n + p);
      }
      names = std::move(next);
      j = close + 1;
    }
    for (auto& n : names) out.push_back(std::move(n));
  }
  return out;
}

}  // namespace mcx::distributed
