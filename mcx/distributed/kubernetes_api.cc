#include "mcx/distributed/kubernetes_api.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "mcx/distributed/https_get.h"

namespace mcx::distributed {
namespace {

using Json = nlohmann::json;

absl::Status not_expected(std::string_view kind, std::string_view field, std::string_view expected) {
  return absl::DataLossError(absl::StrCat("[kubernetes] the API server's ", std::string(kind), " has no ",
                                          std::string(expected), " at ", std::string(field)));
}

// An API object: its metadata (with a string name) and its spec (an empty object when absent).
struct ApiObject {
  Json metadata;
  std::string name;
  Json spec;
};

absl::StatusOr<ApiObject> parse_object(std::string_view text, std::string_view kind) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat("[kubernetes] expected a ", std::string(kind), " object as JSON, found '",
                                            std::string(text.substr(0, 120)), "'"));
  }
  if (!j.contains("metadata") || !j["metadata"].is_object() || !j["metadata"].contains("name") ||
      !j["metadata"]["name"].is_string()) {
    return not_expected(kind, "metadata.name", "string");
  }
  ApiObject o;
  o.name = j["metadata"]["name"].get<std::string>();
  o.metadata = std::move(j["metadata"]);
  o.spec = j.contains("spec") ? std::move(j["spec"]) : Json::object();
  return o;
}

// The integer at j[key] when present; fallback when absent; an error when present and not a positive integer.
absl::StatusOr<int> positive_int(const Json& j, const char* key, int fallback, std::string_view kind,
                                 std::string_view where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  const Json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30)) {
    return not_expected(kind, absl::StrCat(std::string(where), ".", key), "positive integer");
  }
  return static_cast<int>(v.get<int64_t>());
}

// completions and parallelism of a Job spec: completions defaults to parallelism (a Job without completions
// runs parallelism pods).
absl::Status read_counts(const Json& spec, std::string_view kind, std::string_view where, int* completions,
                         int* parallelism) {
  absl::StatusOr<int> p = positive_int(spec, "parallelism", 1, kind, where);
  if (!p.ok()) return p.status();
  absl::StatusOr<int> c = positive_int(spec, "completions", *p, kind, where);
  if (!c.ok()) return c.status();
  *parallelism = *p;
  *completions = *c;
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[kubernetes] cannot read the pod's service account file ", path,
        " (is automountServiceAccountToken off? set MCX_NUM_PROCESSES instead of asking the API server)"));
  }
  std::stringstream s;
  s << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(s.str()));
}

bool retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded;
}

class InClusterApi : public KubernetesApi {
 public:
  InClusterApi(std::string host, int port, std::string dir, std::string ns)
      : host_(std::move(host)), port_(port), dir_(std::move(dir)), namespace_(std::move(ns)) {}

  absl::StatusOr<KubernetesJob> read_job(const std::string& name, absl::Time deadline) const override {
    absl::StatusOr<std::string> body =
        get(absl::StrCat("/apis/batch/v1/namespaces/", namespace_, "/jobs/", name), "job", "jobs", "batch", deadline);
    if (!body.ok()) return body.status();
    return parse_kubernetes_job(*body);
  }

  absl::StatusOr<KubernetesJobSet> read_jobset(const std::string& name, absl::Time deadline) const override {
    absl::StatusOr<std::string> body = get(absl::StrCat("/apis/jobset.x-k8s.io/v1alpha2/namespaces/", namespace_,
                                                        "/jobsets/", name),
                                           "jobset", "jobsets", "jobset.x-k8s.io", deadline);
    if (!body.ok()) return body.status();
    return parse_kubernetes_jobset(*body);
  }

 private:
  // One GET, retried with backoff (0.1 s doubling to 2 s) while the server is unreachable or busy.
  absl::StatusOr<std::string> get(const std::string& path, std::string_view kind, std::string_view resource,
                                  std::string_view group, absl::Time deadline) const {
    const std::string what = absl::StrCat("[kubernetes] GET ", path);
    absl::Duration backoff = absl::Milliseconds(100);
    absl::Status last;
    while (true) {
      absl::StatusOr<std::string> token = read_file(absl::StrCat(dir_, "/token"));
      if (!token.ok()) return token.status();
      HttpsRequest request{host_, port_, path, absl::StrCat(dir_, "/ca.crt"),
                           {{"Authorization", absl::StrCat("Bearer ", *token)}, {"Accept", "application/json"}},
                           deadline};
      absl::StatusOr<HttpsResponse> response = https_get(request);
      if (response.ok()) {
        const int status = response->status;
        if (status == 200) return std::move(response->body);
        if (status == 401 || status == 403) {
          return absl::PermissionDeniedError(absl::StrCat(
              what, ": HTTP ", status, ": the pod's service account may not get ", std::string(resource),
              " (API group ", std::string(group), ") in namespace ", namespace_,
              ": grant it a Role with verbs [get] on that resource (docs/distributed.md, \"Kubernetes\"), or set "
              "MCX_NUM_PROCESSES (and MCX_PROCESS_ID in a JobSet) to skip the API server"));
        }
        if (status == 404) {
          return absl::NotFoundError(absl::StrCat(what, ": HTTP 404: no ", std::string(kind), " of that name in namespace ",
                                                  namespace_));
        }
        last = absl::UnavailableError(absl::StrCat(what, ": HTTP ", status, ": ", response->body.substr(0, 200)));
        if (status != 429 && status < 500) return last;
      } else {
        if (!retryable(response.status())) return response.status();
        last = response.status();
      }
      if (absl::Now() + backoff >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": no answer before the deadline; the last attempt: ", last.message()));
      }
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(backoff));
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  }

  const std::string host_;
  const int port_;
  const std::string dir_;
  const std::string namespace_;
};

}  // namespace

absl::StatusOr<KubernetesJob> parse_kubernetes_job(std::string_view text) {
  absl::StatusOr<ApiObject> o = parse_object(text, "Job");
  if (!o.ok()) return o.status();
  KubernetesJob job;
  job.name = o->name;
  if (absl::Status s = read_counts(o->spec, "Job", "spec", &job.completions, &job.parallelism); !s.ok()) return s;
  const Json& metadata = o->metadata;
  if (metadata.contains("labels") && metadata["labels"].is_object()) {
    for (const auto& [key, value] : metadata["labels"].items()) {
      if (value.is_string()) job.labels[key] = value.get<std::string>();
    }
  }
  return job;
}

absl::StatusOr<KubernetesJobSet> parse_kubernetes_jobset(std::string_view text) {
  absl::StatusOr<ApiObject> o = parse_object(text, "JobSet");
  if (!o.ok()) return o.status();
  KubernetesJobSet set;
  set.name = o->name;
  const Json& spec = o->spec;
  if (!spec.is_object() || !spec.contains("replicatedJobs") || !spec["replicatedJobs"].is_array() ||
      spec["replicatedJobs"].empty()) {
    return not_expected("JobSet", "spec.replicatedJobs", "non-empty list");
  }
  for (size_t i = 0; i < spec["replicatedJobs"].size(); ++i) {
    const Json& r = spec["replicatedJobs"][i];
    const std::string where = absl::StrCat("spec.replicatedJobs[", i, "]");
    KubernetesJobSet::ReplicatedJob rj;
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string()) {
      return not_expected("JobSet", absl::StrCat(where, ".name"), "string");
    }
    rj.name = r["name"].get<std::string>();
    absl::StatusOr<int> replicas = positive_int(r, "replicas", 1, "JobSet", where);
    if (!replicas.ok()) return replicas.status();
    rj.replicas = *replicas;
    const Json job_spec = r.contains("template") && r["template"].is_object() && r["template"].contains("spec")
                              ? r["template"]["spec"]
                              : Json::object();
    if (absl::Status s = read_counts(job_spec, "JobSet", absl::StrCat(where, ".template.spec"), &rj.completions,
                                     &rj.parallelism);
        !s.ok()) {
      return s;
    }
    set.replicated_jobs.push_back(std::move(rj));
  }
  if (spec.contains("network") && spec["network"].is_object() && spec["network"].contains("subdomain") &&
      spec["network"]["subdomain"].is_string()) {
    set.subdomain = spec["network"]["subdomain"].get<std::string>();
  }
  return set;
}

absl::StatusOr<std::unique_ptr<KubernetesApi>> in_cluster_kubernetes_api(std::string host, int port,
                                                                         std::string service_account_dir) {
  absl::StatusOr<std::string> ns = read_file(absl::StrCat(service_account_dir, "/namespace"));
  if (!ns.ok()) return ns.status();
  for (const char* file : {"/token", "/ca.crt"}) {
    if (!std::ifstream(absl::StrCat(service_account_dir, file))) {
      return absl::FailedPreconditionError(absl::StrCat("[kubernetes] the pod's service account has no ",
                                                        service_account_dir, file,
                                                        "; set MCX_NUM_PROCESSES instead of asking the API server"));
    }
  }
  return std::unique_ptr<KubernetesApi>(new InClusterApi(std::move(host), port, std::move(service_account_dir), *ns));
}

}  // namespace mcx::distributed
