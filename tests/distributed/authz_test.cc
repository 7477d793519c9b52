// Authorization in the coordination service (principal.h): roles from URI SANs, the key rules, key
// ownership recorded by the store, and who may cancel a barrier.
#include "mcx/distributed/security/principal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mcx/distributed/coordination/service.h"
#include "mcx/distributed/rpc/handlers.h"
#include "mcx/distributed/security/job_secret.h"
#include "tests/distributed/callback_result.h"

namespace mcx::distributed {
namespace {

using ::testing::HasSubstr;

Principal task(TaskId id) { return principal_from_uri_sans({"spiffe://mcx/job/task/" + std::to_string(id)}, ""); }
Principal admin() { return principal_from_uri_sans({"spiffe://mcx/job/admin/root"}, ""); }
Principal op() { return principal_from_uri_sans({"spiffe://mcx/job/operator/alice"}, ""); }

TEST(Principal, RolesComeFromTheLastTwoSegmentsUnderThePrefix) {
  Principal t = principal_from_uri_sans({"dns-ish", "spiffe://mcx/job/task/12"}, "spiffe://mcx/");
  EXPECT_EQ(t.role, Role::kTask);
  EXPECT_EQ(t.task, 12);
  EXPECT_EQ(t.to_string(), "task/12");
  EXPECT_EQ(admin().to_string(), "admin/root");
  EXPECT_EQ(op().to_string(), "operator/alice");
  // Outside the prefix, a malformed id, an unknown role: no role.
  EXPECT_EQ(principal_from_uri_sans({"spiffe://evil/job/task/1"}, "spiffe://mcx/").role, Role::kNone);
  EXPECT_EQ(principal_from_uri_sans({"spiffe://mcx/job/task/1x"}, "").role, Role::kNone);
  EXPECT_EQ(principal_from_uri_sans({"spiffe://mcx/job/task/-1"}, "").role, Role::kNone);
  EXPECT_EQ(principal_from_uri_sans({"spiffe://mcx/job/root/x"}, "").role, Role::kNone);
  const Principal none = principal_from_uri_sans({}, "");
  EXPECT_EQ(none.role, Role::kNone);
  EXPECT_THAT(none.to_string(), HasSubstr("no role (URI SANs: none)"));
}

TEST(Principal, KeyTaskPrefix) {
  EXPECT_EQ(key_task_prefix("mcx/task/3/topology"), 3);
  EXPECT_EQ(key_task_prefix("mcx/task/3"), 3);
  EXPECT_FALSE(key_task_prefix("mcx/task/x/a").has_value());
  EXPECT_FALSE(key_task_prefix("mcx/tasks/3/a").has_value());
  EXPECT_FALSE(key_task_prefix("other/mcx/task/3/a").has_value());
}

TEST(Principal, KeyRules) {
  // A task's prefix: its own.
  EXPECT_TRUE(authorize_key(task(1), KeyAction::kOverwrite, "mcx/task/1/x", 1).ok());
  absl::Status s = authorize_key(task(2), KeyAction::kInsert, "mcx/task/1/x", std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("[authz] task/2 may not insert 'mcx/task/1/x': keys under 'mcx/task/1/' belong "
                                     "to task 1"));
  // Its inbox: anyone writes, only the owner deletes.
  EXPECT_TRUE(authorize_key(task(2), KeyAction::kOverwrite, "mcx/task/1/inbox/wake", 1).ok());
  EXPECT_FALSE(authorize_key(task(2), KeyAction::kDelete, "mcx/task/1/inbox/wake", 2).ok());
  EXPECT_TRUE(authorize_key(task(1), KeyAction::kDelete, "mcx/task/1/inbox/wake", 2).ok());
  // Job-wide keys: insert and increment by anyone, overwrite and delete by the first writer.
  EXPECT_TRUE(authorize_key(task(2), KeyAction::kInsert, "job/k", std::nullopt).ok());
  EXPECT_TRUE(authorize_key(task(2), KeyAction::kIncrement, "job/counter", 1).ok());
  EXPECT_TRUE(authorize_key(task(1), KeyAction::kOverwrite, "job/k", 1).ok());
  s = authorize_key(task(2), KeyAction::kOverwrite, "job/k", 1);
  EXPECT_THAT(s.message(), HasSubstr("only by the task that wrote it first (task 1)"));
  EXPECT_FALSE(authorize_key(task(2), KeyAction::kDelete, "job/k", 1).ok());
  // Admin deletes anything and writes nothing; an operator neither.
  EXPECT_TRUE(authorize_key(admin(), KeyAction::kDelete, "mcx/task/1/x", 1).ok());
  EXPECT_THAT(authorize_key(admin(), KeyAction::kInsert, "job/k", std::nullopt).message(),
              HasSubstr("an admin may delete keys but not write them"));
  EXPECT_THAT(authorize_key(op(), KeyAction::kDelete, "job/k", 1).message(), HasSubstr("an operator reads only"));
}

std::unique_ptr<CoordinationService> service(int n) {
  ServiceOptions o;
  o.num_tasks = n;
  o.start_timer_thread = false;
  return *CoordinationService::create(o);
}

TEST(KeyOwnership, TheStoreRecordsTheFirstWriter) {
  auto s = service(3);
  const Principal t1 = task(1), t2 = task(2), a = admin();
  ASSERT_TRUE(s->kv_insert("job/k", "v1", false, t1).ok());
  EXPECT_TRUE(s->kv_insert("job/k", "v2", true, t1).ok());
  absl::Status over = s->kv_insert("job/k", "evil", true, t2);
  EXPECT_EQ(over.code(), absl::StatusCode::kPermissionDenied) << over;
  EXPECT_EQ(*s->kv_try_get("job/k"), "v2");  // nothing lost
  // A delete of a directory with one key the caller does not own deletes nothing.
  ASSERT_TRUE(s->kv_insert("job/dir/mine", "x", false, t2).ok());
  ASSERT_TRUE(s->kv_insert("job/dir/theirs", "y", false, t1).ok());
  absl::StatusOr<size_t> n = s->kv_delete("job/dir", t2);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(n.status().message(), HasSubstr("'job/dir/theirs'"));
  EXPECT_TRUE(s->kv_try_get("job/dir/mine").ok());
  EXPECT_EQ(*s->kv_delete("job/dir/mine", t2), 1u);
  EXPECT_EQ(*s->kv_delete("job/dir", a), 1u);  // the admin may
  // Another task's prefix.
  EXPECT_EQ(s->kv_insert("mcx/task/1/topology", "fake", false, t2).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(s->kv_try_get("mcx/task/1/topology").ok());
  EXPECT_EQ(s->kv_increment("mcx/task/1/n", 1, t2).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(*s->kv_increment("job/n", 1, t2), 1);
  EXPECT_EQ(*s->kv_increment("job/n", 1, t1), 2);  // counters are shared
  // A trusted (in-process) caller is not checked.
  EXPECT_TRUE(s->kv_insert("job/k", "v3", true, Caller::trusted()).ok());
  EXPECT_EQ(*s->kv_delete("job/k", Caller::trusted()), 1u);
}

TEST(KeyOwnership, TheJobSecretIsTheServicesAndTasksAloneReadIt) {
  ServiceOptions o;
  o.num_tasks = 2;
  auto s = *CoordinationService::create(o);
  absl::StatusOr<std::string> secret = s->kv_try_get(kDataPlaneSecretKey);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ(secret->size(), 64u);  // 32 random bytes in hex
  EXPECT_NE(*secret, *(*CoordinationService::create(o))->kv_try_get(kDataPlaneSecretKey));  // new per service
  const Principal t1 = task(1), a = admin(), o1 = op();
  for (const Principal* who : {&t1, &a}) {
    EXPECT_EQ(s->kv_insert(kDataPlaneSecretKey, "mine", true, *who).code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(s->kv_delete(kDataPlaneSecretKey, *who).status().code(), absl::StatusCode::kPermissionDenied);
  }
  // Nor any trusted caller; a directory delete leaves it.
  EXPECT_EQ(s->kv_insert(kDataPlaneSecretKey, "mine", true, Caller::trusted()).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->kv_increment(kDataPlaneSecretKey, 1, Caller::trusted()).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(*s->kv_delete("mcx", a), 0u);
  EXPECT_EQ(s->kv_delete(kDataPlaneSecretKey, Caller::trusted()).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(*s->kv_try_get(kDataPlaneSecretKey), *secret);
  EXPECT_EQ(s->status().kv_keys, 0u);  // not the job's data: not counted
  EXPECT_TRUE(authorize_read(t1, kDataPlaneSecretKey).ok());
  for (const Principal* who : {&a, &o1}) {
    absl::Status r = authorize_read(*who, kDataPlaneSecretKey);
    EXPECT_EQ(r.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(r.message(), HasSubstr("readable by its tasks only"));
    EXPECT_TRUE(authorize_read(*who, "mcx/task/0/topology").ok());
  }
}

TEST(KeyOwnership, OnlyAnAdminEndsTheJob) {
  ServiceOptions o;
  o.num_tasks = 2;
  o.recoverable = true;  // ended all the same
  auto s = *CoordinationService::create(o);
  const Principal t0 = task(0), a = admin(), op1 = op();
  EXPECT_EQ(s->end_job("mine", t0).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->end_job("mine", op1).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(s->status().job_error.ok());
  ASSERT_TRUE(s->end_job("maintenance", a).ok());
  EXPECT_EQ(s->status().job_error.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s->status().job_error.message(), HasSubstr("the job was ended by admin/root: maintenance"));
  EXPECT_EQ(s->end_job("again", a).code(), absl::StatusCode::kFailedPrecondition);
  Result<absl::StatusOr<RegisterResult>> reg;
  s->register_task(0, 100, 2, absl::Seconds(1), reg.cb());
  EXPECT_EQ(reg.get().status().code(), absl::StatusCode::kAborted);  // nobody joins an ended job
}

TEST(KeyOwnership, OnlyParticipantsInFlightOrAnAdminCancelABarrier) {
  auto s = service(3);
  for (int i = 0; i < 3; ++i) {
    Result<absl::StatusOr<RegisterResult>> r;
    s->register_task(i, 100 + i, 3, absl::Seconds(5), r.cb());
  }
  Result<absl::Status> b0;
  s->barrier(0, 100, "b", 0, {0, 1}, absl::Seconds(30), b0.cb());
  const Principal t2 = task(2), t1 = task(1), a = admin(), o = op();
  absl::Status s2 = s->cancel_barrier("b", 0, t2);
  EXPECT_EQ(s2.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s2.message(), HasSubstr("a task may cancel only an instance in flight that it takes part in"));
  EXPECT_EQ(s->cancel_barrier("b", 0, o).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->cancel_barrier("b", 1, t1).code(), absl::StatusCode::kPermissionDenied);  // a future instance
  EXPECT_FALSE(b0.ready());
  EXPECT_TRUE(s->cancel_barrier("b", 0, t1).ok());
  EXPECT_EQ(b0.get().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(s->cancel_barrier("b", 1, a).ok());  // an admin may cancel a future instance
}

// Every handler of an authorized call hands the service (or its read filter) the caller it was given: the same
// request that a trusted caller may make is refused for a principal the rules refuse, through each handler.
TEST(Authz, EveryAuthorizedHandlerPassesItsCaller) {
  ServiceOptions o;
  o.num_tasks = 3;
  o.start_timer_thread = false;
  auto s = *CoordinationService::create(o);
  const Principal t1 = task(1), t2 = task(2), operator_ = op();
  ASSERT_TRUE(s->kv_insert("mcx/task/1/k", "v", false, t1).ok());
  ASSERT_TRUE(s->kv_insert("mcx/task/1/n", "1", false, t1).ok());
  // Each handler with a refused principal, then with a trusted caller; code() of the reply's status.
  auto code = [](const proto::StatusProto& p) { return static_cast<absl::StatusCode>(p.code()); };
  auto run = [&](const Caller& who) {
    std::vector<absl::StatusCode> codes;
    proto::KvInsertRequest insert;
    insert.set_key("mcx/task/1/k");
    insert.set_value("w");
    insert.set_allow_overwrite(true);
    serve_kv_insert(*s, insert, [&](proto::StatusResponse r) { codes.push_back(code(r.status())); }, who);
    proto::KvIncrementRequest increment;
    increment.set_key("mcx/task/1/n");
    increment.set_delta(1);
    serve_kv_increment(*s, increment, [&](proto::KvIncrementResponse r) { codes.push_back(code(r.status())); }, who);
    proto::KvGetRequest get;
    get.set_key(std::string(kDataPlaneSecretKey));
    get.set_try_only(true);
    serve_kv_get(*s, get, [&](proto::KvGetResponse r) { codes.push_back(code(r.status())); }, who);
    proto::KvDirRequest dir;
    dir.set_dir("mcx/secret");
    serve_kv_dir(*s, dir, [&](proto::KvDirResponse r) {
      codes.push_back(r.entries_size() == 0 ? absl::StatusCode::kPermissionDenied : absl::StatusCode::kOk);
    }, who);
    proto::CancelBarrierRequest cancel;
    cancel.set_name("future");
    cancel.set_counter(3);
    serve_cancel_barrier(*s, cancel, [&](proto::StatusResponse r) { codes.push_back(code(r.status())); }, who);
    proto::KvDeleteRequest del;
    del.set_key("mcx/task/1/k");
    serve_kv_delete(*s, del, [&](proto::KvDeleteResponse r) { codes.push_back(code(r.status())); }, who);
    return codes;
  };
  const auto denied = absl::StatusCode::kPermissionDenied;
  // Task 2 may not write task 1's keys or cancel a barrier it is not in; an operator may not read the secrets.
  EXPECT_THAT(run(t2), ::testing::ElementsAre(denied, denied, absl::StatusCode::kOk, absl::StatusCode::kOk, denied,
                                              denied));
  EXPECT_THAT(run(operator_), ::testing::ElementsAre(denied, denied, denied, denied, denied, denied));
  EXPECT_THAT(run(Caller::trusted()), ::testing::Each(absl::StatusCode::kOk));
  proto::EndJobRequest end;
  end.set_reason("test");
  absl::StatusCode ended = absl::StatusCode::kUnknown;
  serve_end_job(*s, end, [&](proto::StatusResponse r) { ended = code(r.status()); }, t1);
  EXPECT_EQ(ended, denied);
  serve_end_job(*s, end, [&](proto::StatusResponse r) { ended = code(r.status()); }, Caller::trusted());
  EXPECT_EQ(ended, absl::StatusCode::kOk);
}

}  // namespace
}  // namespace mcx::distributed
