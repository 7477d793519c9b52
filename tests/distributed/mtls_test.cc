// Mutual TLS on the gRPC edge with certificates generated at test time by the openssl CLI: good
// certificates, no client certificate, another CA, URI prefix mismatch, task identity binding, rotation,
// unreadable/mismatched files.
#include "mcx/distributed/security/mtls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "mcx/distributed/rpc/grpc_client.h"
#include "mcx/distributed/rpc/grpc_server.h"
#include "tests/distributed/test_certs.h"

namespace mcx::distributed {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class MtlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new Certs();
    certs_->make_ca("ca");
    certs_->make_ca("ca2");
    certs_->make_leaf("server", "ca", "spiffe://mcx.test/coordinator");
    certs_->make_leaf("task1", "ca", "spiffe://mcx.test/job/task/1");
    certs_->make_leaf("task3", "ca", "spiffe://mcx.test/job/task/3");
    certs_->make_leaf("other_domain", "ca", "spiffe://evil.test/job/task/1");
    certs_->make_leaf("foreign", "ca2", "spiffe://mcx.test/job/task/1");
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void serve(MtlsOptions server_mtls, int num_tasks = 4) {
    ServiceOptions o;
    o.num_tasks = num_tasks;
    service_ = *CoordinationService::create(o);
    auto s = GrpcCoordinationServer::start(service_.get(), {"127.0.0.1:0", server_mtls});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::string addr() const { return absl::StrCat("127.0.0.1:", server_->port()); }
  absl::Status try_kv(const MtlsOptions& client_mtls) {
    auto c = make_grpc_client({addr(), client_mtls});
    if (!c.ok()) return c.status();
    return (*c)->kv_insert(absl::StrCat("k", counter_++), "v", false, absl::Seconds(2));
  }
  static Certs* certs_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<GrpcCoordinationServer> server_;
  int counter_ = 0;
};
Certs* MtlsTest::certs_ = nullptr;

TEST_F(MtlsTest, GoodCertificatesWork) {
  serve(certs_->opts("server", "ca.pem"));
  EXPECT_TRUE(try_kv(certs_->opts("task1", "ca.pem")).ok());
}

TEST_F(MtlsTest, ClientWithoutCertificateIsRefused) {
  serve(certs_->opts("server", "ca.pem"));
  absl::Status s = try_kv(MtlsOptions{});  // plaintext client
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST_F(MtlsTest, ClientSignedByAnotherCaIsRefused) {
  serve(certs_->opts("server", "ca.pem"));
  EXPECT_EQ(try_kv(certs_->opts("foreign", "ca.pem")).code(), absl::StatusCode::kUnavailable);
  // And a client that does not trust the server's CA refuses the server.
  EXPECT_EQ(try_kv(certs_->opts("task1", "ca2.pem")).code(), absl::StatusCode::kUnavailable);
}

TEST_F(MtlsTest, UriPrefixIsCheckedOnBothSides) {
  MtlsOptions server = certs_->opts("server", "ca.pem");
  server.peer_uri_prefix = "spiffe://mcx.test/";
  serve(server);
  MtlsOptions good = certs_->opts("task1", "ca.pem");
  good.peer_uri_prefix = "spiffe://mcx.test/";
  EXPECT_TRUE(try_kv(good).ok());
  MtlsOptions wrong_domain = certs_->opts("other_domain", "ca.pem");  // server refuses the client
  wrong_domain.peer_uri_prefix = "spiffe://mcx.test/";
  EXPECT_EQ(try_kv(wrong_domain).code(), absl::StatusCode::kUnavailable);
  MtlsOptions picky = certs_->opts("task1", "ca.pem");  // client refuses the server
  picky.peer_uri_prefix = "spiffe://mcx.test/job/";
  EXPECT_EQ(try_kv(picky).code(), absl::StatusCode::kUnavailable);
}

TEST_F(MtlsTest, TaskIdentityBinding) {
  MtlsOptions server = certs_->opts("server", "ca.pem");
  server.bind_task_identity = true;
  serve(server);
  auto c = *make_grpc_client({addr(), certs_->opts("task3", "ca.pem")});
  // Task 3's certificate acting as task 1: refused.
  auto r = c->register_task(1, 42, 4, absl::Milliseconds(200));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(r.status().message(), HasSubstr("no URI SAN ending in 'task/1'"));
  EXPECT_THAT(r.status().message(), HasSubstr("spiffe://mcx.test/job/task/3"));
  // As itself it passes the identity check (and then waits for the others: a deadline, not a refusal).
  auto own = c->register_task(3, 43, 4, absl::Milliseconds(200));
  EXPECT_EQ(own.status().code(), absl::StatusCode::kDeadlineExceeded);
  // KV does not act as a task: allowed.
  EXPECT_TRUE(c->kv_insert("a", "b", false, absl::Seconds(2)).ok());
}

TEST_F(MtlsTest, RotatedCaFileIsPickedUpWithoutRestart) {
  // The server trusts only ca at first; a client with a ca2 certificate is refused. After the CA file is
  // rewritten to hold both, the same server accepts it.
  std::string bundle = certs_->path("rotating_ca.pem");
  fs::copy_file(certs_->path("ca.pem"), bundle, fs::copy_options::overwrite_existing);
  MtlsOptions server = certs_->opts("server", "rotating_ca.pem");
  serve(server);
  MtlsOptions client = certs_->opts("foreign", "ca.pem");
  EXPECT_FALSE(try_kv(client).ok());
  {
    std::ofstream out(bundle + ".tmp");
    std::ifstream a(certs_->path("ca.pem")), b(certs_->path("ca2.pem"));
    out << a.rdbuf() << b.rdbuf();
  }
  fs::rename(bundle + ".tmp", bundle);
  absl::Time until = absl::Now() + absl::Seconds(4);
  absl::Status s;
  do {
    absl::SleepFor(absl::Milliseconds(250));
    s = try_kv(client);
  } while (!s.ok() && absl::Now() < until);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(MtlsOptionsTest, ClearErrorsBeforeAnyConnection) {
  Certs certs;
  certs.make_ca("ca");
  certs.make_leaf("a", "ca");
  certs.make_leaf("b", "ca");
  MtlsOptions o = certs.opts("a", "ca.pem");
  EXPECT_TRUE(validate_mtls_options(o).ok());
  MtlsOptions missing = o;
  missing.key_file = certs.path("nope.key");
  absl::Status s = validate_mtls_options(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cannot read key file"));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
  MtlsOptions mismatched = o;
  mismatched.key_file = certs.path("b.key");
  EXPECT_THAT(validate_mtls_options(mismatched).message(), HasSubstr("does not match the certificate"));
  MtlsOptions not_pem = o;
  not_pem.cert_file = certs.path("a.ext");
  EXPECT_THAT(validate_mtls_options(not_pem).message(), HasSubstr("holds no PEM certificate"));
  MtlsOptions partial;
  partial.cert_file = o.cert_file;
  EXPECT_THAT(validate_mtls_options(partial).message(), HasSubstr("missing: key CA"));
  MtlsOptions prefix = o;
  prefix.peer_uri_prefix = "spiffe://mcx.test";
  EXPECT_THAT(validate_mtls_options(prefix).message(), HasSubstr("must end in '/'"));
  MtlsOptions strict;
  strict.require = true;
  EXPECT_EQ(validate_mtls_options(strict).code(), absl::StatusCode::kFailedPrecondition);
  // The client refuses to be created with bad files; the server refuses to start.
  EXPECT_EQ(make_grpc_client({"127.0.0.1:1", missing}).status().code(), absl::StatusCode::kInvalidArgument);
  ServiceOptions so;
  auto service = *CoordinationService::create(so);
  EXPECT_EQ(GrpcCoordinationServer::start(service.get(), {"127.0.0.1:0", mismatched}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GrpcCoordinationServer::start(service.get(), {"127.0.0.1:0", strict}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(MtlsOptionsTest, EnvironmentAndUriParsing) {
  std::map<std::string, std::string> env = {{"MCX_MTLS_CERT_FILE", "c.pem"}, {"MCX_MTLS_KEY_FILE", "k.pem"}, {"MCX_MTLS_CA_FILE", "ca.pem"},
                {"MCX_REQUIRE_MTLS", "1"}, {"MCX_MTLS_PEER_URI_PREFIX", "spiffe://x/"}};
  MtlsOptions explicit_opts;
  explicit_opts.cert_file = "mine.pem";
  MtlsOptions o = mtls_options_from_env(explicit_opts, env);
  EXPECT_EQ(o.cert_file, "mine.pem");  // explicit wins
  EXPECT_EQ(o.key_file, "k.pem");
  EXPECT_EQ(o.ca_file, "ca.pem");
  EXPECT_EQ(o.peer_uri_prefix, "spiffe://x/");
  EXPECT_TRUE(o.require);
  EXPECT_FALSE(o.bind_task_identity);
  EXPECT_EQ(task_id_from_uri("spiffe://mcx.test/job/task/12"), 12);
  EXPECT_EQ(task_id_from_uri("task/0"), 0);
  EXPECT_EQ(task_id_from_uri("spiffe://mcx.test/job/subtask/1"), std::nullopt);
  EXPECT_EQ(task_id_from_uri("spiffe://mcx.test/job/task/1x"), std::nullopt);
  EXPECT_EQ(task_id_from_uri("spiffe://mcx.test/job"), std::nullopt);
}

}  // namespace
}  // namespace mcx::distributed
