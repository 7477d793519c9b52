// mcx-ctl: an operator's client for a running coordination service. It observes and edits without joining
// the job as a task (no registration, no heartbeats; its calls are not task-scoped).
//
//   mcx-ctl --coordinator HOST:PORT [--json] [--timeout S] [mTLS flags] status
//   mcx-ctl ... kv get KEY | kv set KEY VALUE [--no-overwrite] | kv ls PREFIX | kv rm KEY | kv incr KEY [DELTA]
//   (kv get prints the value's bytes as they are; kv ls prints "key<TAB>value" lines, C-escaped)
//   mcx-ctl ... barriers
//
// Exit codes: 0 ok, 1 the call failed (message on stderr, e.g. key not found), 2 usage error,
// 3 the coordinator could not be reached.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mcx/distributed/coordination/client.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "tools/common/env_names.h"
#include "tools/common/mtls_flags.h"

namespace {

using json = nlohmann::json;
namespace md = mcx::distributed;

double seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

std::string hex(uint64_t v) { return absl::StrCat(absl::Hex(v, absl::kZeroPad16)); }

json status_json(const absl::Status& s) {
  if (s.ok()) return nullptr;
  return json{{"code", absl::StatusCodeToString(s.code())}, {"message", std::string(s.message())}};
}

json barriers_json(const std::vector<md::BarrierStatus>& barriers) {
  json out = json::array();
  for (const auto& b : barriers) {
    out.push_back({{"name", b.name},
                   {"counter", b.counter},
                   {"arrived", b.arrived},
                   {"missing", b.missing},
                   {"age_s", seconds(b.age)},
                   {"timeout_s", seconds(b.timeout)}});
  }
  return out;
}

json service_json(const md::ServiceStatus& s) {
  json tasks = json::array();
  for (const auto& t : s.tasks) {
    json j{{"id", t.info.id},
           {"state", std::string(md::task_state_name(t.info.state))},
           {"incarnation", hex(t.info.incarnation)},
           {"watching", t.watching},
           {"rejoined", t.rejoined},
           {"last_heartbeat_age_s", nullptr},
           {"error", status_json(t.info.error)}};
    if (t.last_heartbeat_age) j["last_heartbeat_age_s"] = seconds(*t.last_heartbeat_age);
    tasks.push_back(std::move(j));
  }
  return json{{"service_incarnation", hex(s.service_incarnation)},
              {"num_tasks", s.num_tasks},
              {"recoverable", s.recoverable},
              {"heartbeat_timeout_s", seconds(s.heartbeat_timeout)},
              {"job_state_version", s.job_state_version},
              {"job_error", status_json(s.job_error)},
              {"kv_keys", s.kv_keys},
              {"kv_bytes", s.kv_bytes},
              {"rebuilt", s.rebuilt},
              {"live_set_generation", s.live_set_generation},
              {"tasks", tasks},
              {"barriers", barriers_json(s.barriers)}};
}

std::string ids(const std::vector<md::TaskId>& v) { return "[" + absl::StrJoin(v, ",") + "]"; }

void print_barriers(const std::vector<md::BarrierStatus>& barriers) {
  if (barriers.empty()) {
    std::cout << "no barriers in flight\n";
    return;
  }
  std::cout << absl::StrFormat("%-32s %7s %9s %8s %9s  %s\n", "BARRIER", "COUNTER", "ARRIVED", "AGE", "TIMEOUT",
                               "MISSING");
  for (const auto& b : barriers) {
    size_t total = b.arrived.size() + b.missing.size();
    std::cout << absl::StrFormat("%-32s %7d %9s %7.1fs %8.1fs  %s\n", b.name, b.counter,
                                 absl::StrCat(b.arrived.size(), "/", total), seconds(b.age), seconds(b.timeout),
                                 ids(b.missing));
  }
}

void print_status(const md::ServiceStatus& s, const std::string& target) {
  int connected = 0;
  for (const auto& t : s.tasks) connected += t.info.state == md::TaskState::kConnected;
  std::cout << absl::StrFormat("coordinator %s  incarnation %s  %s  heartbeat timeout %.1fs\n", target,
                               hex(s.service_incarnation), s.recoverable ? "recoverable" : "fate-sharing",
                               seconds(s.heartbeat_timeout));
  std::cout << absl::StrFormat("tasks %d/%d connected  job state v%d  kv %d keys, %d bytes\n", connected,
                               s.num_tasks, s.job_state_version, s.kv_keys, s.kv_bytes);
  if (!s.job_error.ok()) std::cout << "JOB FAILED: " << s.job_error.ToString() << "\n";
  if (s.rebuilt) {
    std::vector<md::TaskId> rejoined;
    for (const auto& t : s.tasks) {
      if (t.rejoined) rejoined.push_back(t.info.id);
    }
    std::cout << absl::StrFormat("rebuilt after a coordinator restart: tasks %s rejoined  live-set generation %d\n",
                                 ids(rejoined), s.live_set_generation);
  }
  std::cout << absl::StrFormat("%-5s %-13s %-16s %-10s %-8s %s\n", "TASK", "STATE", "INCARNATION", "HEARTBEAT",
                               "WATCHED", "ERROR");
  for (const auto& t : s.tasks) {
    std::string age = t.last_heartbeat_age ? absl::StrFormat("%.2fs ago", seconds(*t.last_heartbeat_age)) : "-";
    std::cout << absl::StrFormat("%-5d %-13s %-16s %-10s %-8s %s\n", t.info.id, std::string(md::task_state_name(t.info.state)),
                                 t.info.incarnation ? hex(t.info.incarnation) : "-", age,
                                 t.watching ? "yes" : "no", t.info.error.ok() ? "" : t.info.error.ToString());
  }
  print_barriers(s.barriers);
}

int fail(const absl::Status& s, const std::string& what) {
  std::cerr << "[mcx-ctl] " << what << ": " << s.ToString() << std::endl;
  if (s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) return 3;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mcx-ctl: inspect and edit a running mcx coordination service"};
  app.require_subcommand(1);
  std::string address;
  double timeout = 5;
  bool as_json = false;
  app.add_option("-c,--coordinator", address, "HOST:PORT of the coordination service")
      ->envname(mcx::tools::kEnvCoordinatorAddress)->required();
  app.add_option("--timeout", timeout, "seconds to wait for each call")->capture_default_str();
  app.add_flag("--json", as_json, "print JSON instead of text");
  mcx::tools::MtlsFlags mtls;
  mcx::tools::add_mtls_flags(app, mtls, /*per_task=*/false);

  auto* status_cmd = app.add_subcommand("status", "every task's state, incarnation, heartbeat age; barriers");
  auto* barriers_cmd = app.add_subcommand("barriers", "barriers in flight and who is missing");
  auto* kv = app.add_subcommand("kv", "key-value store");
  kv->require_subcommand(1);
  std::string key, value, prefix;
  int64_t delta = 1;
  bool no_overwrite = false;
  auto* kv_get = kv->add_subcommand("get", "print a value");
  kv_get->add_option("key", key)->required();
  auto* kv_set = kv->add_subcommand("set", "set a value (overwrites unless --no-overwrite)");
  kv_set->add_option("key", key)->required();
  kv_set->add_option("value", value)->required();
  kv_set->add_flag("--no-overwrite", no_overwrite, "fail if the key exists");
  auto* kv_ls = kv->add_subcommand("ls", "list the entries under a directory prefix");
  kv_ls->add_option("prefix", prefix)->required();
  auto* kv_rm = kv->add_subcommand("rm", "delete a key and everything under key/");
  kv_rm->add_option("key", key)->required();
  auto* kv_incr = kv->add_subcommand("incr", "atomically add DELTA (default 1) to an integer value");
  kv_incr->add_option("key", key)->required();
  kv_incr->add_option("delta", delta);
  std::string reason;
  auto* end_job_cmd = app.add_subcommand(
      "end-job", "end the job: every task hears the job error (with identity binding, an admin certificate only)");
  end_job_cmd->add_option("--reason", reason, "why, for the tasks' logs and the audit log");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  md::GrpcClientOptions co;
  co.address = address;
  co.mtls = mcx::tools::to_mtls_options(mtls);
  auto client_or = md::make_grpc_client(co);
  if (!client_or.ok()) return fail(client_or.status(), "cannot create a client");
  md::CoordinationClient& client = **client_or;
  absl::Duration t = absl::Seconds(timeout);

  if (status_cmd->parsed() || barriers_cmd->parsed()) {
    auto s = client.status(t);
    if (!s.ok()) return fail(s.status(), "status");
    if (status_cmd->parsed()) {
      if (as_json) std::cout << service_json(*s).dump(2) << std::endl;
      else print_status(*s, client.target());
    } else {
      if (as_json) std::cout << barriers_json(s->barriers).dump(2) << std::endl;
      else print_barriers(s->barriers);
    }
    return 0;
  }
  if (kv_get->parsed()) {
    auto v = client.kv_try_get(key, t);
    if (!v.ok()) return fail(v.status(), absl::StrCat("kv get '", key, "'"));
    if (as_json) std::cout << json{{"key", key}, {"value", *v}}.dump() << std::endl;
    else std::cout << *v << std::endl;
    return 0;
  }
  if (kv_set->parsed()) {
    absl::Status s = client.kv_insert(key, value, !no_overwrite, t);
    if (!s.ok()) return fail(s, absl::StrCat("kv set '", key, "'"));
    return 0;
  }
  if (kv_ls->parsed()) {
    auto entries = client.kv_dir(prefix, t);
    if (!entries.ok()) return fail(entries.status(), absl::StrCat("kv ls '", prefix, "'"));
    if (as_json) {
      json out = json::array();
      for (const auto& e : *entries) out.push_back({{"key", e.key}, {"value", e.value}});
      std::cout << out.dump(2) << std::endl;
    } else {
      // One line per entry: keys and values are C-escaped (values are bytes and may hold newlines).
      for (const auto& e : *entries) std::cout << absl::CEscape(e.key) << "\t" << absl::CEscape(e.value) << "\n";
    }
    return 0;
  }
  if (kv_rm->parsed()) {
    auto n = client.kv_delete(key, t);
    if (!n.ok()) return fail(n.status(), absl::StrCat("kv rm '", key, "'"));
    if (as_json) std::cout << json{{"deleted", *n}}.dump() << std::endl;
    else std::cout << "deleted " << *n << " key(s)\n";
    return 0;
  }
  if (end_job_cmd->parsed()) {
    absl::Status s = client.end_job(reason, t);
    if (!s.ok()) return fail(s, "end-job");
    std::cout << "the job was ended" << std::endl;
    return 0;
  }
  if (kv_incr->parsed()) {
    auto n = client.kv_increment(key, delta, t);
    if (!n.ok()) return fail(n.status(), absl::StrCat("kv incr '", key, "'"));
    std::cout << *n << std::endl;
    return 0;
  }
  return 2;
}
