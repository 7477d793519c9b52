// Robustness of the parser: every truncation and many random single-character edits of a printed
// program must either fail with a positioned InvalidArgument or parse into a program that verifies and
// round-trips; nothing may crash or hang.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir_test_programs.h"
#include "mcx/ir/shape_rules.h"
#include "mcx/ir/text.h"

namespace mcx::ir {
namespace {

void check_outcome(const std::string& text) {
  auto p = parse_program(text);
  if (!p.ok()) {
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(p.status().message()), ::testing::StartsWith("[parse_program] line ")) << text;
    return;
  }
  EXPECT_TRUE(verify(*p).ok()) << text;
  std::string again = print_program(*p);
  auto q = parse_program(again);
  ASSERT_TRUE(q.ok()) << q.status().message() << "\n" << again;
  EXPECT_EQ(print_program(*q), again);
}

TEST(TextFuzz, EveryTruncationFailsCleanly) {
  std::string text = print_program(testing_programs::all_ops_program());
  // The last characters are "}\n": dropping only the newline still parses.
  for (size_t n = 0; n + 1 < text.size(); ++n) {
    auto p = parse_program(std::string_view(text).substr(0, n));
    ASSERT_FALSE(p.ok()) << "prefix of " << n << " characters parsed";
    ASSERT_THAT(std::string(p.status().message()), ::testing::StartsWith("[parse_program] line "));
  }
}

TEST(TextFuzz, RandomEditsFailCleanlyOrRoundTrip) {
  std::string text = print_program(testing_programs::all_ops_program());
  const std::string alphabet = "%[](){},:=-@ \n0123456789abfinux_.*/\"";
  std::mt19937_64 rng(1234);
  int parsed_ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = text;
    size_t pos = rng() % t.size();
    switch (rng() % 3) {
      case 0: t[pos] = alphabet[rng() % alphabet.size()]; break;
      case 1: t.erase(pos, 1); break;
      default: t.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
    }
    check_outcome(t);
    parsed_ok += parse_program(t).ok();
    if (::testing::Test::HasFailure()) break;
  }
  // Some edits are harmless (whitespace, renamed values), most are not.
  EXPECT_GT(parsed_ok, 0);
  EXPECT_LT(parsed_ok, 3000);
}

}  // namespace
}  // namespace mcx::ir
