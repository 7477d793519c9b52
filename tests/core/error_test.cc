#include "mcx/core/error.h"

#include "gtest/gtest.h"

namespace mcx {
namespace {

TEST(Error, ThrowIfErrorThrowsTheSubclassOfTheCode) {
  EXPECT_THROW(throw_if_error(absl::InvalidArgumentError("x")), InvalidArgument);
  EXPECT_THROW(throw_if_error(absl::UnavailableError("x")), Unavailable);
  EXPECT_NO_THROW(throw_if_error(absl::OkStatus()));
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
