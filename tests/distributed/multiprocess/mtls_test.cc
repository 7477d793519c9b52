// mTLS with real certificates made at test time (make_certs.sh): a job with good certificates runs; a
// client without a certificate, with one from another CA, outside the URI prefix, or acting as another
// task (identity binding) is refused; strict mode refuses to start without mTLS.
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/multiprocess/mp_harness.h"

namespace mcx::mptest {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

class Mtls : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(make_certs(dir_.path(), 4)); }

  std::vector<std::string> coordinator_flags(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> f = {"--mtls-cert", dir_.file("coordinator.pem"), "--mtls-key",
                                  dir_.file("coordinator.key"), "--mtls-ca", dir_.file("ca.pem")};
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  }
  // Env for a task using certificate files <name>.pem/.key and the given CA.
  Env tls_env(const std::string& name, const std::string& ca = "ca.pem") const {
    return {{"MCX_MTLS_CERT_FILE", dir_.file(name + ".pem")},
            {"MCX_MTLS_KEY_FILE", dir_.file(name + ".key")},
            {"MCX_MTLS_CA_FILE", dir_.file(ca)}};
  }
  static Env with(Env a, const Env& b) {
    for (const auto& [k, v] : b) a[k] = v;
    return a;
  }

  // Two tasks running the worker in `mode` with their own certificates under the prefix spiffe://mcx/job/;
  // returns their harness indices.
  std::vector<int> start_job(Harness& h, const std::string& addr, const std::vector<std::string>& mode) const {
    std::vector<int> w;
    for (int i = 0; i < 2; ++i) {
      Env env = with(tls_env("task" + std::to_string(i)), {{"MCX_MTLS_PEER_URI_PREFIX", "spiffe://mcx/job/"}});
      std::vector<std::string> argv = {worker_path()};
      argv.insert(argv.end(), mode.begin(), mode.end());
      w.push_back(h.spawn("task" + std::to_string(i), argv, Harness::worker_env(addr, 2, i, env)));
    }
    return w;
  }
  // The "hello" job; returns once both tasks exited.
  std::vector<int> run_hello_job(Harness& h, const std::string& addr) const {
    std::vector<int> w = start_job(h, addr, {"hello"});
    EXPECT_TRUE(h.wait_exits(w, milliseconds(15000))) << h.dump_all();
    return w;
  }
  // mcx-ctl with certificate <cert>; returns its index after it exited.
  int ctl(Harness& h, const std::string& addr, const std::string& cert, const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {tool_path("mcx-ctl"), "--coordinator", addr, "--timeout", "5", "--mtls-cert",
                                     dir_.file(cert + ".pem"), "--mtls-key", dir_.file(cert + ".key"), "--mtls-ca",
                                     dir_.file("ca.pem")};
    argv.insert(argv.end(), args.begin(), args.end());
    int i = h.spawn("ctl-" + cert, argv);
    EXPECT_TRUE(h.wait_exit(i, milliseconds(15000))) << h.dump(i);
    return i;
  }

  TempDir dir_;
};

TEST_F(Mtls, JobWithGoodCertificatesRuns) {
  Harness h;
  std::string addr = h.start_coordinator(2, coordinator_flags({"--mtls-peer-uri-prefix", "spiffe://mcx/job/",
                                                              "--mtls-bind-identity"}));
  ASSERT_FALSE(addr.empty());
  for (int i : run_hello_job(h, addr)) EXPECT_EQ(h.exit_code(i), 0) << h.dump_all();
  EXPECT_THAT(h.err(h.coordinator_index()), HasSubstr("mTLS"));
}

// mcx-run gives each process its own certificate ({id}) and the coordinator its own ({id} = coordinator).
TEST_F(Mtls, McxRunGivesEachProcessItsOwnCertificate) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--mtls-cert", dir_.file("task{id}.pem"),
                              "--mtls-key", dir_.file("task{id}.key"), "--mtls-ca", dir_.file("ca.pem"),
                              "--coordinator-mtls-cert", dir_.file("coordinator.pem"),
                              "--coordinator-mtls-key", dir_.file("coordinator.key"),
                              "--mtls-peer-uri-prefix", "spiffe://mcx/job/", "--mtls-bind-identity",
                              "--require-mtls", "-v", "--", worker_path(), "hello"});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(20000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  for (int i = 0; i < 3; ++i)
    EXPECT_THAT(h.out(r), HasSubstr("[p" + std::to_string(i) + "] task " + std::to_string(i) + " of 3 passed"));
  EXPECT_THAT(h.err(r), HasSubstr("mTLS"));  // the coordinator's banner (verbose)
}

// The data plane over TLS 1.3 with each process's own certificate bound to its task: every collective of the
// collectives worker across 3 processes x 2 devices, and the job says which transport it used.
TEST_F(Mtls, CollectivesRunOverTlsWithEachProcessesOwnCertificate) {
  Harness h;
  int r = h.spawn("mcx-run", {tool_path("mcx-run"), "-n", "3", "--cpu-devices", "2", "--mtls-cert",
                              dir_.file("task{id}.pem"), "--mtls-key", dir_.file("task{id}.key"), "--mtls-ca",
                              dir_.file("ca.pem"), "--coordinator-mtls-cert", dir_.file("coordinator.pem"),
                              "--coordinator-mtls-key", dir_.file("coordinator.key"), "--mtls-peer-uri-prefix",
                              "spiffe://mcx/job/", "--mtls-bind-identity", "--require-mtls", "--timeout", "60", "--",
                              collectives_worker_path(), "all"},
                  {{"MCX_DATA_PLANE_TLS", "1"}, {"MCX_LOG_LEVEL", "debug"}, {"MCX_DEVICE_TIMEOUT_S", "20"}});
  ASSERT_TRUE(h.wait_exit(r, milliseconds(65000))) << h.dump(r);
  EXPECT_EQ(h.exit_code(r), 0) << h.dump(r);
  const std::string out = h.out(r) + h.err(r);
  for (int p = 0; p < 3; ++p) {
    for (const char* check : {"psum", "all_gather", "all_to_all", "ppermute", "device_put_across_processes"}) {
      EXPECT_THAT(out, HasSubstr("[p" + std::to_string(p) + "] CHECK " + check + " OK")) << out;
    }
  }
  EXPECT_THAT(out, HasSubstr("data plane: tcp+tls"));
  EXPECT_THAT(out, Not(HasSubstr("refused a connection")));
}

TEST_F(Mtls, ClientWithoutCertificateIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(1, coordinator_flags());
  ASSERT_FALSE(addr.empty());
  int w = h.spawn("plain", {worker_path(), "init"}, Harness::worker_env(addr, 1, 0, {{"MCX_INIT_TIMEOUT", "2"}}));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), AnyOf(HasSubstr("UNAVAILABLE"), HasSubstr("DEADLINE_EXCEEDED")));
  EXPECT_THAT(h.err(h.coordinator_index()), ::testing::Not(HasSubstr("task 0 CONNECTED")));
}

TEST_F(Mtls, CertificateFromAnotherCaIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(1, coordinator_flags());
  ASSERT_FALSE(addr.empty());
  // Trusts the right CA for the server, but presents a client certificate the server's CA did not sign.
  Env env = {{"MCX_MTLS_CERT_FILE", dir_.file("other_task0.pem")},
             {"MCX_MTLS_KEY_FILE", dir_.file("other_task0.key")},
             {"MCX_MTLS_CA_FILE", dir_.file("ca.pem")},
             {"MCX_INIT_TIMEOUT", "2"}};
  int w = h.spawn("rogue", {worker_path(), "init"}, Harness::worker_env(addr, 1, 0, env));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), ::testing::Not(HasSubstr("DONE")));
  EXPECT_THAT(h.err(h.coordinator_index()), ::testing::Not(HasSubstr("task 0 CONNECTED")));
}

TEST_F(Mtls, CertificateOutsideThePeerUriPrefixIsRefused) {
  Harness h;
  std::string addr = h.start_coordinator(1, coordinator_flags({"--mtls-peer-uri-prefix", "spiffe://mcx/job/"}));
  ASSERT_FALSE(addr.empty());
  Env env = with(tls_env("outsider"), {{"MCX_INIT_TIMEOUT", "2"}});
  int w = h.spawn("outsider", {worker_path(), "init"}, Harness::worker_env(addr, 1, 0, env));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.err(h.coordinator_index()), ::testing::Not(HasSubstr("task 0 CONNECTED")));
}

TEST_F(Mtls, AnotherTasksCertificateIsRefusedWithIdentityBinding) {
  Harness h;
  std::string addr = h.start_coordinator(2, coordinator_flags({"--mtls-bind-identity"}));
  ASSERT_FALSE(addr.empty());
  // Task 1 presents task 3's (valid, CA-signed) certificate.
  Env env = with(tls_env("task3"), {{"MCX_INIT_TIMEOUT", "3"}});
  int w = h.spawn("task1-as-3", {worker_path(), "init"}, Harness::worker_env(addr, 2, 1, env));
  ASSERT_TRUE(h.wait_exit(w, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), HasSubstr("PERMISSION_DENIED")) << h.dump_all();
  EXPECT_THAT(h.out(w), HasSubstr("task/3")) << h.dump(w);
}

TEST_F(Mtls, StrictModeRefusesToRunWithoutMtls) {
  Harness h;
  int c = h.spawn("coordinator", {tool_path("mcx-coordinator"), "--bind", "127.0.0.1:0", "-n", "1", "--require-mtls"});
  int w = h.spawn("task0", {worker_path(), "init"},
                  Harness::worker_env("127.0.0.1:9", 1, 0, {{"MCX_REQUIRE_MTLS", "1"}}));
  ASSERT_TRUE(h.wait_exits({c, w}, milliseconds(10000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(c), 2) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("mtls"));
  EXPECT_EQ(h.exit_code(w), 1) << h.dump(w);
  EXPECT_THAT(h.out(w), HasSubstr("mtls"));
}

TEST_F(Mtls, McxCtlNeedsACertificateToo) {
  Harness h;
  std::string addr = h.start_coordinator(1, coordinator_flags());
  ASSERT_FALSE(addr.empty());
  int ok = h.spawn("ctl", {tool_path("mcx-ctl"), "--coordinator", addr, "--mtls-cert", dir_.file("task0.pem"),
                           "--mtls-key", dir_.file("task0.key"), "--mtls-ca", dir_.file("ca.pem"), "status"});
  int refused = h.spawn("ctl-plain", {tool_path("mcx-ctl"), "--coordinator", addr, "--timeout", "2", "status"});
  ASSERT_TRUE(h.wait_exits({ok, refused}, milliseconds(15000))) << h.dump_all();
  EXPECT_EQ(h.exit_code(ok), 0) << h.dump(ok);
  EXPECT_THAT(h.out(ok), HasSubstr("DISCONNECTED"));
  EXPECT_EQ(h.exit_code(refused), 3) << h.dump(refused);
}

// Authorization under identity binding (docs/security.md): a job of two tasks runs (its registration, KV
// and barriers pass the rules); then each role, through mcx-ctl: an operator reads but may not write, a task
// may not write under another task's prefix or overwrite a job-wide key another task wrote, an admin deletes
// but may not write, a certificate without a role may do nothing; the audit log records the registrations,
// every denial and the admin's calls.
TEST_F(Mtls, RolesKeyOwnershipAndTheAuditLog) {
  Harness h;
  const std::string audit = dir_.file("audit.jsonl");
  std::string addr = h.start_coordinator(
      2, coordinator_flags({"--mtls-peer-uri-prefix", "spiffe://mcx/job/", "--mtls-bind-identity", "--audit-log", audit}));
  ASSERT_FALSE(addr.empty());
  for (int i : run_hello_job(h, addr)) ASSERT_EQ(h.exit_code(i), 0) << h.dump_all();
  auto ctl = [&](const std::string& cert, const std::vector<std::string>& args) { return this->ctl(h, addr, cert, args); };
  int c = ctl("task0", {"kv", "set", "job/owned-by-0", "a"});
  EXPECT_EQ(h.exit_code(c), 0) << h.dump(c);
  c = ctl("operator", {"status"});
  EXPECT_EQ(h.exit_code(c), 0) << h.dump(c);
  c = ctl("operator", {"kv", "get", "job/owned-by-0"});
  EXPECT_EQ(h.exit_code(c), 0) << h.dump(c);
  c = ctl("operator", {"kv", "set", "job/x", "y"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("operator/alice may not call KvInsert: an operator may only read"));
  c = ctl("task1", {"kv", "set", "mcx/task/0/topology", "forged"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("keys under 'mcx/task/0/' belong to task 0"));
  c = ctl("task1", {"kv", "set", "job/owned-by-0", "overwritten"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("only by the task that wrote it first (task 0)"));
  c = ctl("admin", {"kv", "set", "job/x", "y"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("an admin may delete keys but not write them"));
  c = ctl("admin", {"kv", "rm", "job/owned-by-0"});
  EXPECT_EQ(h.exit_code(c), 0) << h.dump(c);
  // Under the URI prefix but naming no role (the coordinator's own certificate): refused by authorization;
  // outside the prefix (no URI SAN at all): refused by the TLS handshake.
  c = ctl("coordinator", {"status"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("PERMISSION_DENIED"));
  c = ctl("no_uri", {"status"});
  EXPECT_EQ(h.exit_code(c), 3) << h.dump(c);

  std::ifstream in(audit);
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(log, HasSubstr(R"("event":"register","identity":"task/0")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"register","identity":"task/1")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"denied","identity":"operator/alice","rpc":"KvInsert")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"denied","identity":"task/1","rpc":"KvInsert")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"admin","identity":"admin/root","rpc":"KvDelete")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"denied","identity":"a certificate with no role)"));
  EXPECT_THAT(log, HasSubstr(R"("event":"task_state","identity":"task/0")"));
}

// Only an admin ends a running job: an operator and a task are refused; the admin's end-job reaches every task
// (they stop, fate-sharing, naming the admin and the reason) and the audit log records both.
TEST_F(Mtls, AnAdminEndsTheJob) {
  Harness h;
  const std::string audit = dir_.file("audit.jsonl");
  std::string addr = h.start_coordinator(
      2, coordinator_flags({"--mtls-peer-uri-prefix", "spiffe://mcx/job/", "--mtls-bind-identity", "--audit-log", audit}));
  ASSERT_FALSE(addr.empty());
  std::vector<int> w = start_job(h, addr, {"wait", "60"});
  for (int i : w) ASSERT_TRUE(h.wait_output(i, "READY", milliseconds(15000))) << h.dump_all();
  int c = ctl(h, addr, "operator", {"end-job", "--reason", "curious"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("operator/alice may not call EndJob"));
  c = ctl(h, addr, "task0", {"end-job"});
  EXPECT_EQ(h.exit_code(c), 1) << h.dump(c);
  EXPECT_THAT(h.err(c), HasSubstr("task/0 may not end the job: only an admin may"));
  c = ctl(h, addr, "admin", {"end-job", "--reason", "maintenance window"});
  EXPECT_EQ(h.exit_code(c), 0) << h.dump(c);
  ASSERT_TRUE(h.wait_exits(w, milliseconds(10000))) << h.dump_all();
  for (int i : w) {
    EXPECT_NE(h.exit_code(i), 0) << h.dump(i);
    EXPECT_THAT(h.err(i) + h.out(i), HasSubstr("the job was ended by admin/root: maintenance window")) << h.dump(i);
  }
  std::ifstream in(audit);
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_THAT(log, HasSubstr(R"("event":"denied","identity":"operator/alice","rpc":"EndJob")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"denied","identity":"task/0","rpc":"EndJob")"));
  EXPECT_THAT(log, HasSubstr(R"("event":"admin","identity":"admin/root","rpc":"EndJob")"));
  EXPECT_THAT(log, HasSubstr("the job was ended by admin/root: maintenance window"));
}

}  // namespace
}  // namespace mcx::mptest
