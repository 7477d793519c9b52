#include "mcx/core/error.h"

#include <vector>

#include "gtest/gtest.h"

namespace mcx {
namespace {

TEST(Error, ThrowIfErrorThrowsTheSubclassOfTheCode) {
  EXPECT_THROW(throw_if_error(absl::InvalidArgumentError("x")), InvalidArgument);
  EXPECT_THROW(throw_if_error(absl::UnavailableError("x")), Unavailable);
  EXPECT_NO_THROW(throw_if_error(absl::OkStatus()));
}

// The failed devices come from the resolver the runtime installs (here one by hand); none without it.
TEST(Error, AProcessFailureCarriesTheFailedProcesssDevices) {
  set_process_devices_resolver([](int process) { return std::vector<int>{2 * process, 2 * process + 1}; });
  try {
    throw_if_error(mark_process_failure(absl::UnavailableError("[test] gone"), 3));
    ADD_FAILURE() << "nothing thrown";
  } catch (const ProcessFailure& e) {
    EXPECT_EQ(e.process(), 3);
    EXPECT_EQ(e.failed_device_ids(), (std::vector<int>{6, 7}));
  }
  set_process_devices_resolver(nullptr);
  EXPECT_TRUE(ProcessFailure(absl::StatusCode::kUnavailable, "x", 3).failed_device_ids().empty());
  EXPECT_TRUE(ProcessFailure(absl::StatusCode::kUnavailable, "x").failed_device_ids().empty());
}

TEST(Error, AMarkedStatusIsAProcessFailureNamingTheProcess) {
  const absl::Status s = mark_process_failure(absl::UnavailableError("[data plane] process 2 died"), 2);
  EXPECT_EQ(failed_process(s), 2);
  EXPECT_EQ(failed_process(absl::UnavailableError("x")), -1);
  try {
    throw_if_error(s);
    FAIL() << "no exception";
  } catch (const ProcessFailure& e) {
    EXPECT_EQ(e.process(), 2);
    EXPECT_EQ(e.code(), absl::StatusCode::kUnavailable);
    EXPECT_STREQ(e.what(), "[data plane] process 2 died");
    // Back to a status at a boundary: still marked.
    EXPECT_EQ(failed_process(status_from_exception(e)), 2);
  }
  EXPECT_TRUE(mark_process_failure(absl::OkStatus(), 3).ok());
}

TEST(Error, NoPublicErrorStartsWithTheSameBracketTwice) {
  EXPECT_EQ(public_message("[a] [a] m"), "[a] m");
  EXPECT_EQ(public_message("[a] [a] [a] m"), "[a] m");
  EXPECT_EQ(public_message("[a] [b] m"), "[a] [b] m");  // b is the layer under a: kept
  EXPECT_EQ(public_message("[a]"), "[a]");
  EXPECT_EQ(public_message("[a] m [a]"), "[a] m [a]");
  EXPECT_EQ(public_message("no prefix"), "no prefix");
  try {
    throw_if_error(mark_process_failure(absl::FailedPreconditionError("[sync] [sync] the processes differ"), 1));
    FAIL() << "no exception";
  } catch (const ProcessFailure& e) {
    EXPECT_STREQ(e.what(), "[sync] the processes differ");
  }
  // However an error is made.
  EXPECT_STREQ(InvalidArgument("[dims] [dims] expected a concrete shape").what(), "[dims] expected a concrete shape");
  // Adding an API's context to an error that already carries it leaves it alone.
  const absl::Status inner = absl::FailedPreconditionError("[sync] the processes differ");
  EXPECT_EQ(with_api_prefix(inner, "sync").message(), "[sync] the processes differ");
  EXPECT_EQ(with_api_prefix(inner, "multihost").message(), "[multihost] [sync] the processes differ");
  EXPECT_EQ(with_api_prefix(mark_process_failure(inner, 4), "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed_process(with_api_prefix(mark_process_failure(inner, 4), "x")), 4);
}

TEST(Error, WithMessageKeepsCodeAndMark) {
  const absl::Status s = mark_process_failure(absl::AbortedError("inner"), 5);
  const absl::Status w = with_message(s, "[jit(step) on cpu:1] inner");
  EXPECT_EQ(w.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(w.message(), "[jit(step) on cpu:1] inner");
  EXPECT_EQ(failed_process(w), 5);
}

TEST(Error, WithPayloadsOfCarriesTheMarkToALaterError) {
  const absl::Status first = mark_process_failure(absl::UnavailableError("process 1 died"), 1);
  const absl::Status later = with_payloads_of(absl::AbortedError("unusable after an earlier error"), first);
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(failed_process(later), 1);
  EXPECT_TRUE(with_payloads_of(absl::OkStatus(), first).ok());
}

}  // namespace
}  // namespace mcx
